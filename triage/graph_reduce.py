"""Graph-level reduction: keep a subset of the generator graph's nodes, cut edges become inputs.

A case that carries the generator's Graph (and whose program is still exactly that graph's
materialisation) is reduced on the graph, not on text: every subset of nodes is a well-formed
program once each value a kept node reads but no kept node produces becomes a new input. Those
inputs carry the values the removed producers computed on the case's values (recorded in a
worker, see intermediates.py), so the kept nodes see exactly what they saw before. Inputs and
weights no kept node reads are dropped; values produced by kept nodes and read by none become
outputs (an unused result would be dead code the compiler removes, hiding the bug).
"""

from __future__ import annotations

from typing import Any

from nnforge.core.testcase import TestCase
from nnforge.generator.ir import Graph
from nnforge.generator.materialize import to_program


def graph_of(case: TestCase) -> Graph | None:
    """The case's graph when its program is still the graph's materialisation, else None."""
    if not case.graph:
        return None
    try:
        graph = Graph.from_json(case.graph)
        return graph if to_program(graph) == case.program else None
    except Exception:
        return None


def subgraph(graph: Graph, keep: set[int], outputs: list[int] | None = None) -> Graph:
    """The graph of the nodes in `keep` (node ids); `outputs` restricts the outputs (dead nodes go)."""
    kept = [n for n in graph.nodes if n.id in keep]
    if outputs is not None:  # keep only what the chosen outputs need
        needed, live = set(outputs), []
        for node in reversed(kept):
            if needed & set(node.outputs):
                live.append(node)
                needed |= set(node.inputs)
        kept = list(reversed(live))
    produced = {o for n in kept for o in n.outputs}
    consumed: list[int] = []
    for n in kept:
        consumed += [i for i in n.inputs if i not in consumed]
    weights = [w for w in graph.weights if w in consumed]
    originals = [i for i in graph.inputs if i in consumed]
    cuts = [v for v in consumed if v not in produced and v not in weights and v not in originals]
    if outputs is None:
        outs = [o for o in graph.outputs if o in produced]
        outs += [o for n in kept for o in n.outputs if o not in consumed and o not in outs]
    else:
        outs = [o for o in outputs if o in produced]
    values = {v: graph.values[v] for v in list(consumed) + [o for n in kept for o in n.outputs]}
    return Graph(values=values, nodes=kept, inputs=originals + cuts, weights=weights, outputs=outs)


def graph_case(case: TestCase, original: Graph, graph: Graph, recorded: dict[str, Any]) -> TestCase | None:
    """A TestCase for `graph` (a subgraph of `original`, the graph of `case`) with concrete values.

    None when a needed value was not recorded or the graph has no node or no output.
    """
    if not graph.nodes or not graph.outputs:
        return None
    base_inputs = tuple(case.inputs or ())
    inputs = []
    for vid in graph.inputs:
        if vid in original.inputs and original.inputs.index(vid) < len(base_inputs):
            inputs.append(base_inputs[original.inputs.index(vid)])
        elif f"v{vid}" in recorded:
            inputs.append(recorded[f"v{vid}"])
        else:
            return None
    state = {k: v for k, v in (case.state_dict or {}).items() if k in {f"w{w}" for w in graph.weights}}
    meta = dict(case.meta)
    meta.update(n_nodes=len(graph.nodes), ops=graph.ops())
    return case.with_(program=to_program(graph), inputs=tuple(inputs), state_dict=state, graph=graph.to_json(), meta=meta)
