"""The reducer's interestingness test: does a candidate still show *the same* bug?

"Any failure" is not enough: a reducer that accepts any crash slides from the bug it was given
onto whatever the smaller program happens to trip over (an easier crash, an invalid program that
the reference rejects). As Hypothesis does with a failure's origin, a candidate counts only when
it fails the same way: same target, symptom, blame rung and statefulness; for crash-like
symptoms also the same exception type, the same normalised message headline and the same
innermost compiler frame. Timeouts compare no frame (where a hang is interrupted is noise).
"""

from __future__ import annotations

from nnforge.core.verdict import Symptom, Verdict
from nnforge.triage.normalize import compiler_frames, headline
from nnforge.triage.signature import CRASH_LIKE


def same_bug(ref: Verdict, new: Verdict) -> bool:
    """True when `new` shows the bug `ref` showed (see the module docstring for what counts)."""
    if not ref.is_bug or not new.is_bug:
        return False
    if (new.target, new.symptom, new.rung, new.stateful) != (ref.target, ref.symptom, ref.rung, ref.stateful):
        return False
    if (new.gradient is None) != (ref.gradient is None):  # a wrong gradient is not a wrong output
        return False
    if ref.symptom not in CRASH_LIKE:
        return True
    if (new.exc_type or "") != (ref.exc_type or ""):
        return False
    if headline(new.exc_message or "") != headline(ref.exc_message or ""):
        return False
    if ref.symptom is Symptom.TIMEOUT:
        return True
    return compiler_frames(new.frames, limit=1) == compiler_frames(ref.frames, limit=1)


def why_not(ref: Verdict, new: Verdict) -> str:
    """One phrase saying how `new` differs from `ref` (for the reducer's step log)."""
    if not new.is_bug:
        return new.symptom.value
    for field in ("target", "symptom", "rung", "stateful", "exc_type"):
        a, b = getattr(ref, field), getattr(new, field)
        if a != b:
            return f"{field} {getattr(b, 'value', b)} instead of {getattr(a, 'value', a)}"
    if headline(new.exc_message or "") != headline(ref.exc_message or ""):
        return f"message {headline(new.exc_message or '')[:80]!r}"
    if compiler_frames(new.frames, limit=1) != compiler_frames(ref.frames, limit=1):
        return f"top frame {compiler_frames(new.frames, limit=1)}"
    return "same bug"
