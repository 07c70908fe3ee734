"""Signatures: which findings are the same bug (computing `core.signature.Signature`).

- Crash-like symptoms (crash, exception_mismatch, segfault, timeout, oom) key on where the
  compiler broke: exception type, the message's first line normalised (numbers, shapes, names,
  paths gone) and the innermost compiler frames (wrappers skipped, no line numbers).
- Wrong outputs (mismatch, nan_mismatch) key on where the values first went wrong when the
  worker located it (oracle/locate.py, triage/guilty.py): the ATen operator wrong alone, else
  the operators of that statement, whatever the reduced program computes after it. Unlocated, they key on the canonical form of
  the (reduced) program: its operator sequence with dtypes (see canonical.py).
- Stale state (the compiled run that kept its state disagrees with the one reset before every
  call) keys on what changed between calls (rootcause.py), not on the operators that carried it.
- A lost write to Python state (a module attribute or program global that differs after a call)
  keys on the kind of write (`module attribute (int)`), not on the operators either.

Both carry the target and the blame rung: the same message from Dynamo and from Inductor are
two bugs. `similarity` breaks ties between signatures whose keys differ (clustering uses it to
attach a near-duplicate to an existing cluster).
"""

from __future__ import annotations

import json
from typing import Sequence

from nnforge.core.signature import Signature
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom, Verdict
from nnforge.triage.canonical import canonical_form, op_names
from nnforge.triage.normalize import compiler_frames, normalize_message
from nnforge.triage.rootcause import (CRASH_LIKE, FRAMES_IN_KEY, LOST_WRITE, STALE, crash_message, is_stale_state,
                                      located, located_key, lost_write_key, stale_key, written_state_key)

__all__ = ["CRASH_LIKE", "OUTPUT_LIKE", "canonical_form", "is_crash_like", "signature_of", "similarity"]

OUTPUT_LIKE = frozenset({Symptom.MISMATCH, Symptom.NAN_MISMATCH})
FIRST_WRONG = '["first wrong"'  # how every key of a located wrong value begins
WRONG_STATE = '["wrong state after the call"'  # ... of a wrong buffer or input written in place


def is_crash_like(symptom: Symptom | str) -> bool:
    return Symptom(symptom) in CRASH_LIKE


def signature_of(verdict: Verdict, case: TestCase) -> Signature:
    """The signature of `verdict` (on `case`, ideally already reduced)."""
    symptom = verdict.symptom
    ops = op_names(case)
    if is_stale_state(verdict, case):  # stale values that come back off or NaN: one state bug
        family = Symptom.MISMATCH if symptom is Symptom.NAN_MISMATCH else symptom
        return Signature(symptom=family.value, target=verdict.target, rung=verdict.rung,
                         key=stale_key(verdict, case), exc_type=verdict.exc_type, ops=ops)
    if (lost := lost_write_key(verdict)) is not None:
        return Signature(symptom=symptom.value, target=verdict.target, rung=verdict.rung, key=lost, ops=ops)
    if (written := written_state_key(verdict)) is not None:  # NaN or off: one family, as located values
        return Signature(symptom=Symptom.MISMATCH.value, target=verdict.target, rung=verdict.rung, key=written, ops=ops)
    if symptom in CRASH_LIKE:
        message = crash_message(verdict)
        frames = compiler_frames(verdict.frames, limit=FRAMES_IN_KEY)
        key = json.dumps([verdict.exc_type or "", message, list(frames)])
        return Signature(symptom=symptom.value, target=verdict.target, rung=verdict.rung, key=key,
                         exc_type=verdict.exc_type, message=message, frames=frames, ops=ops)
    if (fw := located(verdict)) is not None:
        # where the values first went wrong, not what carried them on: a mismatch and a NaN/Inf
        # mismatch of one wrong operator are one bug (the symptom family is "mismatch")
        return Signature(symptom=Symptom.MISMATCH.value, target=verdict.target, rung=verdict.rung,
                         key=json.dumps(located_key(fw, early=False)), ops=ops)
    if symptom in OUTPUT_LIKE:
        # a wrong gradient and a wrong output of the same operators are different bugs (the
        # backward's kernels and decompositions against the forward's)
        key = canonical_form(case) if not verdict.gradient else json.dumps(["wrong gradient", canonical_form(case)])
        return Signature(symptom=symptom.value, target=verdict.target, rung=verdict.rung, key=key, ops=ops)
    # pass / invalid: not a bug; a key that still separates them by what was said
    return Signature(symptom=symptom.value, target=verdict.target, rung=verdict.rung,
                     key=normalize_message(verdict.detail)[:200], ops=ops)


def similarity(a: Signature, b: Signature) -> float:
    """How alike two signatures are, in [0, 1]: 1 for equal keys, 0 for unrelated findings.

    Findings of a different target or symptom family never resemble each other. Crash-like:
    shared compiler frames (innermost weighs most), message words, exception type. Wrong
    outputs: one minus the normalised edit distance of the operator sequences.
    """
    if a.target != b.target or is_crash_like(a.symptom) != is_crash_like(b.symptom):
        return 0.0
    if a.key == b.key and a.symptom == b.symptom and a.rung == b.rung:
        return 1.0
    if any(k.startswith((STALE, LOST_WRITE, FIRST_WRONG, WRONG_STATE)) for k in (a.key, b.key)):
        return 0.0  # a state change or written state is no operator sequence; a located wrong operator is exact
    rung = 1.0 if a.rung == b.rung else 0.5
    if is_crash_like(a.symptom):
        frames = _frame_overlap(a.frames, b.frames)
        words = _jaccard(set((a.message or "").split()), set((b.message or "").split()))
        exc = 1.0 if a.exc_type == b.exc_type else 0.0
        score = 0.5 * frames + 0.3 * words + 0.2 * exc
    else:
        score = 1.0 - edit_distance(a.ops, b.ops) / max(len(a.ops), len(b.ops), 1)
    return max(0.0, min(1.0, score * rung))


def _frame_overlap(a: Sequence[str], b: Sequence[str]) -> float:
    if not a and not b:
        return 1.0
    weights = [1.0 / (i + 1) for i in range(max(len(a), len(b)))]
    got = sum(w for i, w in enumerate(weights) if i < len(a) and i < len(b) and a[i] == b[i])
    shared = len(set(a) & set(b)) / max(len(set(a) | set(b)), 1)
    return 0.7 * got / sum(weights) + 0.3 * shared


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two token sequences."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]
