"""The guilty statement of a reduced wrong value: where it first appears, and whether it is wrong alone.

The worker locates the first statement whose compiled value departs from eager (oracle/locate.py).
In a reduced program that still holds several statements the first wrong value need not be the
cause: a bug triggered by one operator can show in another's output (a graph-level pass, a fused
kernel, a fault keyed on what the graph contains). So before the final key is chosen, each
statement is run alone on the values it saw (the others cut, their values fed in as inputs, as
the reducer does), the located one first: the first that is wrong on its own is the guilty one.
When none is, the bug needs them together and the located statement keys it.

Below the statement, for torch.compile targets: a statement is often several ATen operators
(`F.softsign` is abs, add and div; `torch.lerp` a sub and an add). Each runs alone on the values it
saw (oracle/locate.py `aten_pieces`), and the first wrong alone names the bug: a wrong `add`
shows in softsign, rms_norm and lerp alike, and is one cluster. When no statement is wrong alone,
the whole program's ATen calls are tried the same way.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any

from nnforge.core.settings import Settings
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom, Verdict

WRONG = (Symptom.MISMATCH, Symptom.NAN_MISMATCH)


def guilty_verdict(pool: Any, case: TestCase, verdict: Verdict, *, settings: Settings) -> Verdict:
    """`verdict` with `first_wrong` set to the guilty statement of `case` (see the module
    docstring); without it when `case` does not show a located wrong value again."""
    from nnforge.oracle.job import locatable

    if not locatable(verdict) or case.inputs is None:
        return verdict
    oracle = _locating_oracle(pool, verdict.target, settings)
    again = oracle.check(case).verdicts[0]
    if again.symptom not in WRONG:
        return replace(verdict, first_wrong=None)
    if again.first_wrong is None:  # the wrong value is none the probe sees (an input written in place...)
        found = _deepest(pool, oracle, _wrong_aten_piece(pool, oracle, case, verdict.target, settings,
                                                         most=MAX_PIECES_ALL), settings)
        return replace(verdict, first_wrong=None if found is None else {**found[1], "aten": found[0], "piece": True})
    alone, single = _wrong_alone(pool, oracle, case, again.first_wrong, settings)
    guilty = alone or again.first_wrong
    found = _deepest(pool, oracle, _wrong_aten_piece(pool, oracle, single or case, verdict.target, settings,
                                                     most=MAX_PIECES_ONE if single is not None else MAX_PIECES_ALL),
                     settings)
    if found is not None:
        guilty = {**guilty, "aten": found[0]}
    return replace(verdict, first_wrong=guilty)


def _deepest(pool: Any, oracle: Any, found: tuple[str, dict, dict] | None,
             settings: Settings) -> tuple[str, dict, dict] | None:
    """`found` (a wrong ATen piece), or the operator of its reference decomposition that is wrong
    alone (oracle/locate.py `below_aten`): the bug then has one name in every call that uses it."""
    if found is None:
        return None
    out = pool.call("nnforge.oracle.locate:below_aten", {**found[2], "most": MAX_PIECES_ONE},
                    timeout_s=settings.worker_timeout_s)
    if not out.ok:
        return found
    return _first_wrong_piece(oracle, out.value.get("pieces") or []) or found


def known_guilty_cluster(pool: Any, case: TestCase, verdict: Verdict, clusters: list[tuple[str, str]], *,
                         settings: Settings) -> str | None:
    """The cluster, of `clusters` ((cluster id, its guilty ATen operator) of listed wrong-value
    clusters on this target), whose operator is wrong alone on the values this unreduced case
    gave it; None when none is (then the case needs its own reduction).

    A reduction costs tens of queries; this costs one trace and a query per call of a known
    guilty operator. A program that runs a known-wrong `add` on values where it is wrong shows
    that bug whatever else it computes, so it joins that cluster unreduced. It stays in the
    store, and a second bug it also holds is found again in programs without the add."""
    from nnforge.oracle.job import locatable

    if not clusters or not locatable(verdict) or case.inputs is None:
        return None
    oracle = _locating_oracle(pool, verdict.target, settings)
    by_op = {op: cid for cid, op in clusters}
    found = _wrong_aten_piece(pool, oracle, case, verdict.target, settings, most=MAX_KNOWN_TRIES, only=sorted(by_op))
    if found is None:
        return None
    from nnforge.oracle.locate import aten_packet

    return by_op.get(aten_packet(found[0]))


MAX_PIECES_ONE = 12  # ATen operators of one statement tried alone at the most
MAX_PIECES_ALL = 32  # ... of a whole program none of whose statements is wrong alone
MAX_KNOWN_TRIES = 4  # calls of a known guilty operator tried in an unreduced program


def _wrong_aten_piece(pool: Any, oracle: Any, single: TestCase, target: str, settings: Settings, *,
                      most: int = MAX_PIECES_ONE, only: list[str] | None = None) -> tuple[str, dict, dict] | None:
    """(the first ATen operator of `single` wrong alone, where the piece went wrong, the piece) or None
    (torch.compile targets only: an ONNX target does not compile ATen calls one by one).
    `single` is one statement, or the whole program when no statement is wrong alone: the
    statements of a mutator's block (a dict built and read back, a branch) depend on each other
    through Python values no input can carry, but their ATen calls still run one by one.
    `only`: the operators to try (`aten.add`), all when None."""
    from nnforge.oracle.backend import parse_target
    from nnforge.oracle.job import dump_values

    if parse_target(target).spec.family == "onnx" or single.inputs is None:
        return None
    payload = {"program": single.program, "inputs_pt": dump_values(tuple(single.inputs)),
               "state_pt": dump_values(dict(single.state_dict or {})), "calls": [c.to_json() for c in single.calls],
               "most": most, "only": only or []}
    out = pool.call("nnforge.oracle.locate:aten_pieces", payload, timeout_s=settings.worker_timeout_s)
    if not out.ok:
        return None
    return _first_wrong_piece(oracle, out.value.get("pieces") or [])


def _first_wrong_piece(oracle: Any, pieces: list[dict]) -> tuple[str, dict, dict] | None:
    """(the first piece's operator that is wrong alone, where it went wrong, the piece) or None."""
    for p in pieces:
        fw = _wrong(oracle, p)
        if fw is not None:
            return p["op"], fw, {"program": p["program"], "inputs_pt": p["inputs_pt"]}
    return None


def _locating_oracle(pool: Any, target: str, settings: Settings) -> Any:
    """The oracle for `target` that also says where a wrong value first appears."""
    from nnforge.oracle.oracle import Oracle

    return Oracle(pool, [target], settings.value_search_budget_ms, timeout_s=settings.worker_timeout_s, locate=True)


def _wrong(oracle: Any, piece: dict) -> dict | None:
    """Where the piece alone went wrong, or None when it is right alone."""
    from nnforge.oracle.job import load_values

    case = TestCase(program=piece["program"], inputs=tuple(load_values(piece["inputs_pt"])))
    got = oracle.check(case).verdicts[0]
    if got.symptom not in WRONG:
        return None
    return got.first_wrong or {"line": piece["program"].split("out = ", 1)[-1].split("\n", 1)[0], "dtype": None}


def _wrong_alone(pool: Any, oracle: Any, case: TestCase, located: dict,
                 settings: Settings) -> tuple[dict | None, TestCase | None]:
    """(the first statement wrong on its own, the located one first, and its one-statement case);
    (None, case) when `case` is one statement already; (None, None) when none is wrong alone."""
    from nnforge.triage import program_reduce as pr
    from nnforge.triage.intermediates import record_in

    try:
        items = pr.statement_items(case)
        body = pr.Edit.of(case).forward.body
    except pr.NotAProgram:
        return None, None
    if len(items) < 2:
        return None, case
    first = next((i for i in items if ast.unparse(body[i])[:len(located["line"])] == located["line"]), None)
    order = ([first] if first is not None else []) + [i for i in items if i != first]
    try:
        recorded, shapes = record_in(pool, case, timeout_s=settings.worker_timeout_s)
    except RuntimeError:
        return None, None
    for i in order:
        single = pr.without_statements(returning(case, i), [i], items, recorded, shapes)
        if single is None:
            continue
        got = oracle.check(single).verdicts[0]
        if got.symptom in WRONG and got.first_wrong is not None:
            return got.first_wrong, single
    return None, None


def returning(case: TestCase, index: int) -> TestCase:
    """`case` with forward returning what statement `index` assigns (and nothing else), so the
    statement kept alone is no dead code."""
    from nnforge.triage import program_reduce as pr

    edit = pr.Edit.of(case)
    body = edit.forward.body
    names = _assigned(body[index])
    if not names:
        return case
    ret = ast.Return(value=ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Load()) for n in names], ctx=ast.Load()))
    if body and isinstance(body[-1], ast.Return):
        body[-1] = ret
    else:
        body.append(ret)
    return edit.to_case(case)


def wrong_before_crash(pool: Any, case: TestCase, verdict: Verdict, *,
                       settings: Settings) -> tuple[TestCase, Verdict] | None:
    """(the shortest prefix of `case` whose outputs are already wrong, its verdict) when `case`
    crashes, else None.

    A frontend that gives one operator a wrong shape makes the next operator's conversion fail
    ("Cannot broadcast 16 and 4", "Concat expects the same shape"): each consumer crashes with
    its own message, and one bug becomes as many crash clusters as it has consumers. Cut after
    each statement in turn, returning what it assigns: the first prefix that gives wrong values
    or a wrong shape is the bug, and the crash only its consequence."""
    from nnforge.triage import program_reduce as pr

    if verdict.symptom not in (Symptom.CRASH, Symptom.EXCEPTION_MISMATCH) or case.inputs is None:
        return None
    try:
        items = pr.statement_items(case)
    except pr.NotAProgram:
        return None
    oracle = _locating_oracle(pool, verdict.target, settings)
    for i in items[:-1]:
        cut = _prefix(case, i)
        if cut is None:
            continue
        got = oracle.check(cut)
        if got.verdicts[0].symptom in WRONG and not got.verdicts[0].gradient:
            return got.case, got.verdicts[0]
    return None


def _prefix(case: TestCase, index: int) -> TestCase | None:
    """`case` up to statement `index`, returning what that statement assigns (None when it assigns
    no name)."""
    from nnforge.triage import program_reduce as pr

    edit = pr.Edit.of(case)
    body = edit.forward.body
    names = _assigned(body[index])
    if not names:
        return None
    edit.forward.body = body[:index + 1] + [ast.Return(value=ast.Tuple(
        elts=[ast.Name(id=n, ctx=ast.Load()) for n in dict.fromkeys(names)], ctx=ast.Load()))]
    if edit.undefined():
        return None
    edit.tidy()
    return edit.to_case(case)


def _assigned(stmt: ast.stmt) -> list[str]:
    """The names `stmt` assigns, in order (a name assigned twice comes twice)."""
    return [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
