"""Signatures: what makes two findings the same bug (the data type; triage computes them).

A signature is deliberately coarse: the symptom, the target and blame rung, and a key that is
either a normalised crash location (exception type, message with numbers/shapes/names stripped,
top compiler frames) or a canonical form of the reduced program for silent wrong outputs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Signature:
    symptom: str  # Symptom value
    target: str
    rung: str | None
    key: str  # normalised crash key, or canonical program form
    exc_type: str | None = None
    message: str | None = None  # normalised message
    frames: tuple[str, ...] = ()  # normalised "file:function" of the top compiler frames
    ops: tuple[str, ...] = field(default=(), compare=False)  # operator sequence, for similarity tie-breaks

    @property
    def digest(self) -> str:
        """Stable id of the bug class: equal digests are one cluster."""
        h = hashlib.sha256(json.dumps([self.symptom, self.target, self.rung, self.key]).encode())
        return h.hexdigest()[:12]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["frames"] = list(self.frames)
        d["ops"] = list(self.ops)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Signature":
        d = dict(d)
        d["frames"] = tuple(d.get("frames", ()))
        d["ops"] = tuple(d.get("ops", ()))
        return cls(**d)
