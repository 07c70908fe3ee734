"""Graph → TestCase.program: a readable, self-contained PyTorch module, one line per op.

The program is the currency every later stage works on (mutators, LLM, reducer, repro), so it
imports only torch and reads like something a person wrote.
"""

from __future__ import annotations

import random

from nnforge.core.dtypes import input_int_range, is_float, is_int
from nnforge.generator.ir import Graph, Value
from nnforge.generator.spec import OpSpec, all_ops
from nnforge.generator.z3_state import Z3_LOCK

HEADER = "import torch\nimport torch.nn.functional as F\n"


def spec_instance(op: str, in_sigs: list[tuple[str, int]], uid: str) -> OpSpec:
    """A spec object able to materialise a node whose attributes are already concrete."""
    ops = all_ops()
    if op not in ops:
        raise KeyError(f"unknown operator {op!r} (not in the spec registry)")
    return ops[op](in_sigs, random.Random(0), uid)


def value_ref(graph: Graph, vid: int) -> str:
    return f"self.w{vid}" if vid in graph.weights else f"v{vid}"


def random_tensor_expr(v: Value) -> str:
    """An expression making a fresh random tensor of v's type (values are chosen later by value search)."""
    shape = list(v.shape)
    if is_float(v.dtype):
        return f"torch.randn({shape}, dtype=torch.{v.dtype})"
    if v.dtype == "bool":
        return f"torch.randint(0, 2, {shape}).bool()"
    lo, hi = input_int_range(v.dtype)
    assert is_int(v.dtype), v.dtype
    return f"torch.randint({lo}, {hi + 1}, {shape}, dtype=torch.{v.dtype})"


def node_line(graph: Graph, node_index: int) -> str:
    node = graph.nodes[node_index]
    in_vals = [graph.values[i] for i in node.inputs]
    with Z3_LOCK:  # the spec's constructor makes z3 terms; they must also die under the lock
        spec = spec_instance(node.op, [(v.dtype, len(v.shape)) for v in in_vals], f"n{node.id}")
        expr = spec.materialize([value_ref(graph, i) for i in node.inputs], dict(node.attrs),
                                [list(v.shape) for v in in_vals])
        del spec
    outs = ", ".join(f"v{o}" for o in node.outputs)
    return f"{outs} = {expr}"


def to_program(graph: Graph) -> str:
    lines = [HEADER, "", "class Model(torch.nn.Module):", "    def __init__(self):", "        super().__init__()"]
    for wid in graph.weights:
        v = graph.values[wid]
        lines.append(f"        self.w{wid} = torch.nn.Parameter({random_tensor_expr(v)})")
    args = ", ".join(["self"] + [f"v{i}" for i in graph.inputs])
    lines += ["", f"    def forward({args}):"]
    for k in range(len(graph.nodes)):
        lines.append("        " + node_line(graph, k))
    outs = ", ".join(value_ref(graph, o) for o in graph.outputs)
    lines.append(f"        return ({outs},)" if len(graph.outputs) == 1 else f"        return ({outs})")
    lines += ["", "", "def make_inputs():"]
    items = ", ".join(random_tensor_expr(graph.values[i]) for i in graph.inputs)
    lines.append(f"    return ({items},)" if len(graph.inputs) == 1 else f"    return ({items})")
    return "\n".join(lines) + "\n"
