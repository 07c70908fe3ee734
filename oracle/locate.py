"""Where the values first go wrong: the first statement whose compiled value departs from eager.

A wrong output says nothing about its cause: a broadcast `sub` computed the wrong way round shows
up as NaN after a `log`, as a wrong `getitem`, as a wrong `tril`. Triage keys findings by their
root cause, so before any reduction is paid for, the worker runs the program once more with
every tensor a top-level statement of `forward` assigns returned as an output, in statement
order, through the rung the blame ladder found guilty, judged exactly as outputs are (the float64
run, rounding noise). The first leaf that fails names the statement. Inductor still fuses a
kernel whose intermediates are outputs, so a fused kernel's wrong code stays wrong; a bug that
needs an intermediate never to reach memory may vanish, and then nothing is located.

Runs in the worker, on the case's chosen values, for the first call of its sequence only.
`FirstWrong` is data: the statement, its value's dtype and shape, and the shapes of the tensors
it reads. Naming the operators and classing the attributes is triage's job (triage/rootcause.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from typing import Any

SEEN = "_nnforge_seen"
MAX_LINE = 240  # characters of the statement kept in the verdict


@dataclass(frozen=True)
class Slot:
    """One value the probe returns: the name a statement assigned, and that statement."""

    name: str
    line: str
    reads: tuple[str, ...]  # names the statement reads (its operands, where they are names)


def probe_source(program: str) -> tuple[str, list[Slot]] | None:
    """`program` with Model.forward returning every value its top-level statements assign (a
    tuple, in order), and what each position holds; None for a forward this cannot follow
    (a loop, a return inside a branch, no Model)."""
    try:
        tree = ast.parse(program)
    except SyntaxError:
        return None
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    forward = None if model is None else next(
        (f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if forward is None or not any(isinstance(n, ast.Import) and any(a.name == "torch" and a.asname is None
                                                                     for a in n.names) for n in tree.body):
        return None  # the probe names `torch`
    for node in ast.walk(forward):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
            return None
    slots: list[Slot] = []
    body = _instrument(forward.body, slots, top=True)
    if body is None or not slots:
        return None
    forward.body = [ast.parse(f"{SEEN} = []").body[0], *body]
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", slots


def _instrument(stmts: list[ast.stmt], slots: list[Slot], top: bool) -> list[ast.stmt] | None:
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.Return):
            out.append(ast.parse(f"return tuple({SEEN})").body[0])
            continue
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            inner = _instrument(stmt.body, slots, top=False)
            if inner is None:
                return None
            stmt.body = inner
            out.append(stmt)
            continue
        if any(isinstance(n, ast.Return) for n in ast.walk(stmt)):
            return None  # a return inside a branch: which values exist depends on the path taken
        out.append(stmt)
        if isinstance(stmt, ast.Assign):
            names = [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Store)]
            line = ast.unparse(stmt)[:MAX_LINE]
            reads = tuple(dict.fromkeys(n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)))
            for name in names:
                slots.append(Slot(name, line, reads))
                # tensors only: a function, a module or a list is no value to compare (None holds its place)
                out.append(ast.parse(f"{SEEN}.append({name} if isinstance({name}, torch.Tensor) else None)").body[0])
    if top and not any(isinstance(s, ast.Return) for s in stmts):
        out.append(ast.parse(f"return tuple({SEEN})").body[0])
    return out


_POSITION = re.compile(r"^\[(\d+)\]")


def locate_first_wrong(prog: Any, target_text: str, rung: str | None) -> dict[str, Any] | None:
    """The first statement of `prog` whose value the guilty rung computes wrong, as
    {"name", "line", "dtype", "shape", "operands": {name: shape}}; None when nothing is located."""
    from nnforge.core.calls import SINGLE_CALL
    from nnforge.oracle.backend import parse_target
    from nnforge.oracle.compare import flatten, tensor_leaves
    from nnforge.oracle.job import Program, run_reference, run_rung

    probe = probe_source(prog.source)
    if probe is None:
        return None
    source, slots = probe
    ladder = parse_target(target_text).ladder()
    backend = next((b for b in ladder if b.name == rung), ladder[-1])
    step = replace(prog.steps[0], backward=False, optimizer=None, retain_graph=False) if prog.steps else SINGLE_CALL[0]
    probe_prog = Program(source=source, inputs=prog.inputs, state_dict=prog.state_dict, steps=(step,), seed=prog.seed)
    try:
        ref = run_reference(probe_prog)
    except Exception:  # InvalidCase or worse: the probe itself misbehaves, nothing is located
        return None
    outcome = run_rung(probe_prog, ref, backend)
    if not outcome.failed or outcome.output_index is None or outcome.call_index != 0:
        return None
    expected = ref.outputs[0].outputs
    leaves = tensor_leaves(expected) if backend.flat_outputs else flatten(expected)
    if outcome.output_index >= len(leaves):
        return None
    path, value = leaves[outcome.output_index]
    m = _POSITION.match(path)
    if m is None or int(m.group(1)) >= len(slots):
        return None
    k = int(m.group(1))
    slot = slots[k]
    values = dict(zip((s.name for s in slots[:k]), expected[:k])) if isinstance(expected, (tuple, list)) else {}
    operands = {n: _shape(values[n]) for n in slot.reads if n in values and _shape(values[n]) is not None}
    for n in slot.reads:  # the forward's own inputs are no statement's value
        if n not in operands and (shape := _input_shape(prog, n)) is not None:
            operands[n] = shape
    return {"name": slot.name, "line": slot.line, "dtype": str(getattr(value, "dtype", type(value).__name__)).replace(
        "torch.", ""), "shape": _shape(value), "operands": operands, "symptom": outcome.symptom.value}


def _shape(value: Any) -> list[int] | None:
    shape = getattr(value, "shape", None)
    return None if shape is None else [int(d) for d in shape]


def _input_shape(prog: Any, name: str) -> list[int] | None:
    """The shape of forward's parameter `name` on the case's inputs."""
    try:
        tree = ast.parse(prog.source)
        model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
        forward = next(f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
        params = [a.arg for a in forward.args.args[1:]]
    except (SyntaxError, StopIteration):
        return None
    if name not in params or params.index(name) >= len(prog.inputs):
        return None
    return _shape(prog.inputs[params.index(name)])
