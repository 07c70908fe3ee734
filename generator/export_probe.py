"""Which operator instances the ONNX path carries, learned by probing the installed exporter
instead of claimed by hand.

An `ort` or `tvm` test whose program the exporter cannot carry (an integer dtype the ONNX
operator does not take, a form the converter refuses) is invalid for its target: it costs a
test and finds nothing. Specs say what they claim (`OpSpec.exports_onnx`), but the truth depends
on the installed torch, onnx, onnxruntime and TVM. So the campaign probes: for every operator
that claims export and every placeholder dtype, the generator builds a few one-operator programs,
a worker exports each exactly as the `onnx_export` rung does (oracle/export_probe.py), and the
results, keyed by `instance_key(op, input dtypes)`, go into a table (core/export_table.py) cached
per installed versions. Generation for ONNX targets then skips the instances the path refused.

This module only plans probes and writes their programs; running them is the oracle's job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

from nnforge.core.dtypes import ALL_DTYPES
from nnforge.generator.engine import GeneratorConfig, form_keys, generate_graph, instance_key, rank_key
from nnforge.generator.ir import Graph
from nnforge.generator.materialize import to_program
from nnforge.generator.spec import all_ops

# ONNX backends take no bfloat16 inputs (oracle/onnx_backends.py): for ONNX targets such placeholders
# become parameters, which export as initializers (probes of a bfloat16 operator take no input at all)
ONNX_WEIGHT_ONLY_DTYPES = ("bfloat16",)
PROBE_DTYPES = ALL_DTYPES
PROBES_PER_PAIR = 2  # programs per (operator, placeholder dtype): attributes and partner dtypes vary
PROBE_GENERATION_MS = 400.0


@dataclass(frozen=True)
class Probe:
    key: str  # instance_key of the program's one operator
    rank_key: str  # rank_key of the same
    program: str
    forms: tuple[str, ...] = ()  # form_keys of the same: how its drawn attributes are spelt


def onnx_config(base: GeneratorConfig, blocked: frozenset[str] = frozenset()) -> GeneratorConfig:
    """`base` for a test headed for an ONNX target: ops that claim export, no instance the export
    table blocks, no bfloat16 input."""
    placeholders = tuple(d for d in base.dtypes if d not in ONNX_WEIGHT_ONLY_DTYPES) or base.dtypes
    return replace(base, onnx_only=True, blocked=blocked, weight_only_dtypes=ONNX_WEIGHT_ONLY_DTYPES,
                   dtypes=placeholders)


def probe_pairs(ops: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """(operator, placeholder dtype) for every operator that claims ONNX export."""
    registry = all_ops()
    names = sorted(ops if ops is not None else registry)
    return [(name, dtype) for name in names if registry[name].onnx for dtype in PROBE_DTYPES]


def probes_for(op: str, dtype: str, seed: int, count: int = PROBES_PER_PAIR) -> Iterator[Probe]:
    """Up to `count` one-operator programs of `op` growing from a `dtype` placeholder (fewer where
    the operator does not take it)."""
    for i in range(count):
        cfg = onnx_config(GeneratorConfig(n_nodes=1, seed=seed * 101 + i, ops=(op,), dtypes=(dtype,),
                                          timeout_ms=PROBE_GENERATION_MS, zero_size_prob=0.0))
        try:
            gen = generate_graph(cfg)
        except Exception:
            continue
        nodes = [n for n in gen.graph.nodes if n.op == op]
        if len(gen.graph.nodes) != 1 or not nodes:
            continue
        [(key, rank)] = node_keys(gen.graph)
        [node] = nodes
        yield Probe(key, rank, to_program(gen.graph), form_keys(op, node.attrs, node.solver_attrs))


def node_keys(graph: Graph) -> list[tuple[str, str]]:
    """(instance_key, rank_key) of every node of a generator graph (generator/ir.Graph)."""
    return [(instance_key(n.op, [graph.values[v].dtype for v in n.inputs]),
             rank_key(n.op, len(graph.values[n.inputs[0]].shape) if n.inputs else 0)) for n in graph.nodes]
