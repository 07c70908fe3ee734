"""Spec self-check: does each spec tell the truth about the operator it describes?

For a random solver instance of one operator, the materialised program must run in eager and
produce exactly the shapes and dtypes `type_transfer` promised, and export to ONNX where the spec
claims it does. Wide specs are only safe because this check runs on every one of them.
"""

from __future__ import annotations

import io
import random
import warnings
from dataclasses import dataclass

from nnforge.generator.engine import GeneratorConfig, GraphGenerator
from nnforge.generator.ir import Graph
from nnforge.generator.materialize import to_program
from nnforge.generator.spec import OpSpec


@dataclass
class SpecCheck:
    op: str
    graph: Graph
    program: str
    onnx_checked: bool


def one_op_graph(spec: type[OpSpec], seed: int, tries: int = 40, binning: bool = True) -> Graph:
    """A graph holding one instance of `spec` on randomly typed inputs."""
    rng = random.Random(seed)
    for attempt in range(tries):
        gen = GraphGenerator(GeneratorConfig(n_nodes=1, seed=seed * 1000 + attempt, ops=(spec.name,), binning=binning,
                                             zero_size_prob=0.1))
        arity = spec.pick_arity(rng)
        combos = spec.dtype_combos(arity)
        if not combos:
            raise AssertionError(f"{spec.name}: no dtype combination for arity {arity}")
        combo = rng.choice(combos)
        sigs = [(combo[i], rng.choice([r for r in spec.ranks_at(i) if r <= 5])) for i in range(arity)]
        if not spec.accepts(sigs):
            continue
        gen.deadline = float("inf")
        ids = [gen.add_placeholder(s, weight_hint=i in spec.weight_inputs, bin_now=False) for i, s in enumerate(sigs)]
        if gen.insert_forward(spec, ids):
            gen.bin_placeholders(ids)
            return gen.finish().graph
    raise AssertionError(f"{spec.name}: no satisfiable instance in {tries} tries (is `requires` too strict?)")


def run_program(program: str):
    """Execute a trusted generated program in-process; returns (model, inputs, outputs)."""
    import torch

    ns: dict = {}
    exec(compile(program, "<selfcheck>", "exec"), ns)
    torch.manual_seed(0)
    model = ns["Model"]()
    inputs = ns["make_inputs"]()
    with torch.no_grad():
        outputs = model(*inputs)
    return model, inputs, outputs


def check_spec(spec: type[OpSpec], seed: int, onnx: bool = True) -> SpecCheck:
    graph = one_op_graph(spec, seed)
    program = to_program(graph)
    try:
        model, inputs, outputs = run_program(program)
    except Exception as e:
        raise AssertionError(f"{spec.name} (seed {seed}) fails in eager: {type(e).__name__}: {e}\n{program}") from e
    from nnforge.core.dtypes import from_torch

    node = graph.nodes[0]
    for vid, out in zip(graph.outputs, outputs):
        want = graph.values[vid]
        got_shape, got_dtype = list(out.shape), from_torch(out.dtype)
        if got_shape != want.shape or got_dtype != want.dtype:
            raise AssertionError(
                f"{spec.name} (seed {seed}, attrs {node.attrs}): type_transfer said {want.dtype}{want.shape}, "
                f"eager gave {got_dtype}{got_shape}\n{program}"
            )
    if len(outputs) != len(graph.outputs):
        raise AssertionError(f"{spec.name}: {len(outputs)} outputs, spec said {len(graph.outputs)}")
    claims = onnx and spec([(graph.values[i].dtype, len(graph.values[i].shape)) for i in node.inputs],
                           random.Random(0), "chk").exports_onnx(node.attrs,
                                                                [(graph.values[i].dtype, len(graph.values[i].shape)) for i in node.inputs])
    if claims:
        import torch

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, tuple(inputs), io.BytesIO(), dynamo=False, opset_version=17)
        except Exception as e:
            raise AssertionError(
                f"{spec.name} (seed {seed}, attrs {node.attrs}) claims ONNX export but it fails: "
                f"{type(e).__name__}: {str(e)[:300]}\n{program}"
            ) from e
    return SpecCheck(spec.name, graph, program, bool(claims))
