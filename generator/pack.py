"""Several generated programs in one: a pack is the disjoint union of their graphs.

Most of a torch.compile test's seconds are fixed costs paid once per compiled module: Dynamo's
trace, AOTAutograd, Inductor's scheduling, a C++ compile, loading, the worker round trip, the
reference runs (bench/phases.py). A pack pays them once for k programs. Its forward computes
every program on inputs of its own and returns all their outputs, so each program's results
are compared as they would be alone; and since a pack is a generator program like any other
(its graph is the union, its text is that graph's materialisation), a disagreement needs no
special unpacking: the reducer's graph pass deletes the other programs' operators like any
operator the bug does not need, down to the guilty program (or to the cross-program fusion,
when it takes two). Value ids are renumbered, so a pack's names are its own, not the members'.
"""

from __future__ import annotations

from dataclasses import replace

from nnforge.core.testcase import TestCase
from nnforge.generator.ir import Graph, Node, Value
from nnforge.generator.materialize import to_program


def pack_graphs(graphs: list[Graph]) -> Graph:
    """The disjoint union: ids renumbered in order (the first graph's values first), inputs,
    weights and outputs concatenated in the members' order."""
    out = Graph()
    next_value = 0
    next_node = 0
    for g in graphs:
        ids = {}
        for vid in sorted(g.values):
            ids[vid] = next_value
            v = g.values[vid]
            out.values[next_value] = Value(next_value, v.dtype, list(v.shape))
            next_value += 1
        for n in g.nodes:
            out.nodes.append(Node(next_node, n.op, dict(n.attrs), [ids[i] for i in n.inputs],
                                  [ids[o] for o in n.outputs], list(n.solver_attrs)))
            next_node += 1
        out.inputs += [ids[i] for i in g.inputs]
        out.weights += [ids[w] for w in g.weights]
        out.outputs += [ids[o] for o in g.outputs]
    return out


def pack_cases(cases: list[TestCase]) -> TestCase:
    """One test of the generator cases `cases` (each with its graph, none with values yet).
    Meta: `pack` the members' generator seeds, `pack_outputs` how many outputs each has (in
    order), `ops` and `n_nodes` of the whole; the calls are the first member's."""
    if not cases:
        raise ValueError("an empty pack")
    if len(cases) == 1:
        return cases[0]
    graphs = []
    for c in cases:
        if not c.graph or c.inputs is not None:
            raise ValueError("only generator cases without values can be packed")
        graphs.append(Graph.from_json(c.graph))
    packed = pack_graphs(graphs)
    first = cases[0]
    meta = {k: v for k, v in first.meta.items() if k not in ("seed", "generation_ms")}
    meta.update({
        "pack": [c.meta.get("seed") for c in cases],
        "pack_outputs": [len(g.outputs) for g in graphs],
        "n_nodes": len(packed.nodes),
        "ops": packed.ops(),
        "onnx_exportable": all(c.meta.get("onnx_exportable", True) for c in cases),
        "generation_ms": round(sum(float(c.meta.get("generation_ms", 0.0)) for c in cases), 2),
        "seed": first.meta.get("seed"),
    })
    return replace(first, program=to_program(packed), graph=packed.to_json(), meta=meta)


def programs_in(case: TestCase) -> int:
    """How many generator programs the case holds (a pack's members; otherwise 1)."""
    return len(case.meta.get("pack") or ()) or 1

