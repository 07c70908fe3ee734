"""Root-cause keys: what a finding's bug is, independent of the program that happened to carry it.

Two keys, one cheap and one exact:

- `provisional_key(verdict, case)` is computed when a finding is recorded, before any
  reduction: symptom, target, guilty rung, and for crashes the normalised error (the C++
  compiler's first `error:` line when there is one) with the compiler's top frames, for stale
  state what changed between calls, and otherwise the mutator category. Findings that share it
  are presumed one bug: only the first few are reduced, the rest wait attached to their cluster.
  A wrong value that the worker located (oracle/locate.py: the first statement whose compiled
  value departs from eager) keys on that statement instead: its operators, its dtype and the
  attribute class of the call (broadcast operands, a 0-d operand, a negative literal...). A
  wrong `sub` is then one key whether its values flow on through `log`, `getitem` or `tril`.
- The final signature (`triage.signature.signature_of`) is computed on the reduced case. For
  stale state it is the state change itself, not the operators: a compiled module that keeps
  its graph after an attribute changed is one bug whatever ops the programs hold.
"""

from __future__ import annotations

import ast
import json
import re

from nnforge.core.calls import CallStep
from nnforge.core.python_state import value_kind
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom, Verdict
from nnforge.triage.normalize import compiler_frames, headline, normalize_message

CRASH_LIKE = frozenset({Symptom.CRASH, Symptom.EXCEPTION_MISMATCH, Symptom.SEGFAULT, Symptom.TIMEOUT, Symptom.OOM})
FRAMES_IN_KEY = 3
WRONG_VALUES = "wrong values"  # the symptom family of a located mismatch or NaN/Inf mismatch
STALE = '["stale state"'  # how every stale-state key begins
LOST_WRITE = '["lost side effect"'  # how every key of a lost write to Python state begins

# g++/clang: "/tmp/x/cabc.cpp:12:34: error: 'tmp0_tail' was not declared in this scope"
_CPP_ERROR = re.compile(r"^[^\n]*?\berror:\s*(?P<msg>[^\n]+)$", re.MULTILINE)
_QUOTED_NAME = re.compile(r"[‘'`][A-Za-z_][\w:<>, ]*[’'`]")


def compiler_error_line(message: str | None) -> str | None:
    """The C/C++ compiler's first `error:` line, normalised (quoted names masked), or None."""
    if not message or "error:" not in message:
        return None
    for m in _CPP_ERROR.finditer(message):
        text = m.group("msg").strip()
        if text and not text.lower().startswith(("command", "subprocess")):
            return normalize_message(_QUOTED_NAME.sub("'<name>'", text))[:200]
    return None


def crash_message(verdict: Verdict) -> str:
    """The part of a crash's message that names the bug: the C++ error when the compiler's
    output holds one (a `CalledProcessError` headline names only the command), else the
    normalised first line."""
    return compiler_error_line(verdict.exc_message) or headline(verdict.exc_message or "")


# -- state changes between calls ----------------------------------------------------------------------------
def step_changes(prev: CallStep, step: CallStep) -> list[str]:
    """What `step` changes relative to the call before it, as kinds (not names or values)."""
    out: list[str] = []
    for value in step.set_attrs.values():
        out.append(f"attribute ({value_kind(value)})")
    for value in step.set_globals.values():
        out.append(f"global ({value_kind(value)})")
    if step.mode is not None and step.mode != (prev.mode or "train"):
        out.append("training flag")
    if step.grad_enabled is not None and step.grad_enabled != prev.grad_enabled:
        out.append("grad mode")
    for change in step.inputs:
        for field_name, label in (("shape", "input shape"), ("dtype", "input dtype"), ("layout", "input layout"),
                                  ("requires_grad", "input requires_grad")):
            if getattr(change, field_name) is not None:
                out.append(label)
    if step.reset_cache:
        out.append("cache reset")
    return out


def state_changes(case: TestCase, verdict: Verdict) -> tuple[str, ...]:
    """Every kind of state change from the first call up to the one that showed the bug."""
    last = verdict.call_index if verdict.call_index is not None else len(case.calls) - 1
    kinds: set[str] = set()
    for i in range(1, min(last, len(case.calls) - 1) + 1):
        kinds.update(step_changes(case.calls[i - 1], case.calls[i]))
    return tuple(sorted(kinds))


def is_stale_state(verdict: Verdict, case: TestCase) -> bool:
    """The compiled run with state retained disagrees with the one reset before every call."""
    return bool(verdict.stateful) and len(case.calls) > 1


def stale_key(verdict: Verdict, case: TestCase) -> str:
    changes = state_changes(case, verdict) or ("no visible change",)
    return json.dumps(["stale state", list(changes)])


def lost_write_key(verdict: Verdict) -> str | None:
    """A wrong value that is a write to Python state (a module attribute, a program global) is
    keyed by what was written, not by the ops around it: Dynamo lost or changed the write."""
    if not verdict.side_effect:
        return None
    return json.dumps(["lost side effect", verdict.side_effect])


WRITTEN_STATE = ("module state after the call", "inputs after the call")


def written_state_key(verdict: Verdict) -> str | None:
    """A wrong value in what the call writes in place (a module's buffers, a mutated input), not in
    what it returns, is keyed by which state went wrong and on which rung: a running mean that
    AOTAutograd fails to write back is one bug under `batch_norm` and `instance_norm`, whether the
    buffer comes back off or NaN. The operators around it say nothing more: the compiler's
    handling of in-place writes is the suspect."""
    if verdict.symptom not in (Symptom.MISMATCH, Symptom.NAN_MISMATCH) or verdict.gradient or verdict.side_effect:
        return None
    part = next((p for p in (verdict.detail or "").split("; ") if p.startswith(f"{verdict.rung}:")), "")
    which = next((w for w in WRITTEN_STATE if f"({w}:" in part), None)
    return None if which is None else json.dumps(["wrong state after the call", which])


# -- where a wrong value first appeared ----------------------------------------------------------------------
def located(verdict: Verdict) -> dict | None:
    """The verdict's located first wrong value (a wrong output value only), or None."""
    fw = verdict.first_wrong
    if not isinstance(fw, dict) or not fw.get("line") or verdict.gradient or verdict.side_effect:
        return None
    return fw if verdict.symptom in (Symptom.MISMATCH, Symptom.NAN_MISMATCH) else None


def guilty_ops(first_wrong: dict) -> tuple[str, ...]:
    """The ATen operator found wrong alone (`("aten.add",)`, triage/guilty.py), else the operators
    of the statement that first went wrong (`("sub",)`); ("assign",) for none."""
    if first_wrong.get("aten"):  # aten.add_.Tensor -> aten.add: an in-place variant is the same kernel
        from nnforge.oracle.locate import aten_packet

        return (aten_packet(str(first_wrong["aten"])),)
    return statement_ops_of(first_wrong)


def statement_ops_of(first_wrong: dict) -> tuple[str, ...]:
    """The operators of the statement that first went wrong (`("sub",)`); ("assign",) for none."""
    from nnforge.triage.canonical import statement_ops

    return statement_ops(str(first_wrong.get("line") or "")) or ("assign",)


def attribute_class(first_wrong: dict) -> tuple[str, ...]:
    """What kind of call went wrong, as few words as tell calls of one operator apart:
    broadcast operands, a 0-d operand, an empty result, a negative or a float literal argument."""
    out: set[str] = set()
    shape = first_wrong.get("shape")
    operands = [s for s in (first_wrong.get("operands") or {}).values() if isinstance(s, list)]
    if isinstance(shape, list):
        if any(0 < _numel(s) < _numel(shape) for s in operands if s):  # a smaller operand stretched
            out.add("broadcast")
        if 0 in shape:
            out.add("empty")
    if any(s == [] for s in operands) or shape == []:
        out.add("0-d")
    try:
        tree = ast.parse(str(first_wrong.get("line") or ""))
    except SyntaxError:
        return tuple(sorted(out))
    for node in ast.walk(tree):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and isinstance(node.operand.value, int) and not isinstance(node.operand.value, bool):
            out.add("negative int")
        elif isinstance(node, ast.Constant) and isinstance(node.value, float):
            out.add("float literal")
    return tuple(sorted(out))


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def located_key(first_wrong: dict, *, early: bool) -> list:
    """["first wrong", ops, dtype, attribute class] (early: the exact dtype and the call's class,
    so that findings which agree on all of it can skip a reduction) or ["first wrong", ops]
    (final, on the reduced case: the guilty operator alone, whatever dtype, literals and sizes
    the reduction kept; one vectorised `floor` bug is one cluster in float64 and bfloat16)."""
    ops = list(guilty_ops(first_wrong))
    if early:
        return ["first wrong", ops, str(first_wrong.get("dtype") or "?"), list(attribute_class(first_wrong))]
    return ["first wrong", ops]


# -- the provisional key -------------------------------------------------------------------------------------
def provisional_key(verdict: Verdict, case: TestCase) -> str:
    """The cheap key of an unreduced finding (see the module docstring)."""
    head = [verdict.symptom.value, verdict.target, verdict.rung or ""]
    if (fw := located(verdict)) is not None and not is_stale_state(verdict, case):
        return json.dumps([WRONG_VALUES, verdict.target, verdict.rung or ""] + located_key(fw, early=True))
    if is_stale_state(verdict, case):
        return json.dumps(head + [stale_key(verdict, case)])
    if (lost := lost_write_key(verdict)) is not None:
        return json.dumps(head + [lost])
    if (written := written_state_key(verdict)) is not None:
        return json.dumps([WRONG_VALUES, verdict.target, verdict.rung or "", written])
    if verdict.symptom in CRASH_LIKE:
        frames = compiler_frames(verdict.frames, limit=FRAMES_IN_KEY)
        return json.dumps(head + [verdict.exc_type or "", crash_message(verdict), list(frames)])
    category = str((case.meta or {}).get("category") or "seed") if isinstance(case.meta, dict) else "seed"
    if verdict.gradient:  # a wrong gradient is the backward's bug, apart from the forward's
        return json.dumps(head + ["wrong gradient", category])
    return json.dumps(head + ["category", category])


def describe_state_change(case: TestCase, verdict: Verdict) -> str:
    """'a float attribute changed' — for titles of stale-state bugs."""
    changes = state_changes(case, verdict)
    if not changes:
        return "a later call"
    return ", ".join(changes)
