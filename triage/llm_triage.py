"""The optional LLM step of triage: a title, a root-cause hypothesis and a duplicate check for a
cluster the structural key could not place.

The model proposes; NNForge decides. A title or hypothesis is used only if it brings no number,
version or code span the template did not already have (numbers come from runs, not from a
model); a duplicate is accepted only when the cluster it names exists and its structural key
agrees with the new one on guilty rung and symptom (the candidates shown are those clusters
only, and the answer is checked again). A malformed reply, an unreachable endpoint or a spent
budget leaves the structural decision standing. Offline, this module is never called.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

from nnforge.core.prompt_files import prompt_text

TITLE_MAX = 110
HYPOTHESIS_MAX_CHARS = 700
MAX_CANDIDATES = 12
PROGRAM_MAX_CHARS = 2500


@dataclass(frozen=True)
class TriageAdvice:
    """What the model said, after NNForge's checks: None where a part was refused or missing."""

    title: str | None = None
    hypothesis: str | None = None
    duplicate_of: str | None = None
    model: str = ""
    refused: tuple[str, ...] = ()  # why parts of the reply were not used


_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
_VERSION = re.compile(r"\b\d+\.\d+(?:\.\d+)?[\w.+-]*")
_CODE = re.compile(r"`[^`\n]+`")


def _facts(text: str) -> set[str]:
    """The spans a model may repeat but never invent: numbers, versions and inline code."""
    return set(_NUMBER.findall(text)) | set(_VERSION.findall(text)) | set(_CODE.findall(text))


def brings_nothing_new(candidate: str, source: str) -> bool:
    return _facts(candidate) <= _facts(source)


def same_structure(a: Any, b: Any) -> bool:
    """May the clusters of signatures `a` and `b` be merged? Only with equal rung and symptom."""
    return getattr(a, "rung", None) == getattr(b, "rung", None) and getattr(a, "symptom", None) == getattr(b, "symptom", None)


def candidates_for(signature: Any, clusters: Iterable[Any]) -> list[Any]:
    """The existing clusters a new one could duplicate: same rung and symptom, newest first."""
    same = [c for c in clusters if same_structure(c.signature, signature)]
    return sorted(same, key=lambda c: -float(getattr(c, "last_seen", 0.0) or 0.0))[:MAX_CANDIDATES]


def request(new: dict[str, Any], candidates: list[Any]) -> str:
    """The user message: the new cluster and its candidate duplicates, as JSON."""
    return json.dumps({
        "new_cluster": {**new, "program": str(new.get("program", ""))[:PROGRAM_MAX_CHARS]},
        "existing_clusters": [{"id": c.cluster_id, "title": c.title, "symptom": c.signature.symptom,
                               "guilty_layer": c.signature.rung, "key": c.signature.key} for c in candidates],
    }, indent=1, default=str)


def parse_advice(reply: str) -> dict[str, Any]:
    """The JSON object of a reply (a fenced block or bare), else ValueError."""
    text = (reply or "").strip()
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    if fenced:
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("the reply holds no JSON object")
    data = json.loads(text[start:end + 1])
    if not isinstance(data, dict):
        raise ValueError("the reply's JSON is not an object")
    return data


def _checked_text(value: Any, limit: int, source: str, what: str, refused: list[str]) -> str | None:
    """`value` as one line if it is a string within `limit` that brings no fact of its own, else None."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = " ".join(value.split())
    if len(text) > limit:
        refused.append(f"{what} longer than {limit} characters")
        return None
    if not brings_nothing_new(text, source):
        refused.append(f"{what} brings numbers or code of its own")
        return None
    return text


def judge_advice(data: dict[str, Any], *, template_title: str, source: str, signature: Any,
                 candidates: list[Any], model: str) -> TriageAdvice:
    """Keep the parts of a parsed reply that pass NNForge's checks (see the module docstring)."""
    refused: list[str] = []
    title = _checked_text(data.get("title"), TITLE_MAX, template_title, "title", refused)
    hyp = _checked_text(data.get("hypothesis"), HYPOTHESIS_MAX_CHARS, source, "hypothesis", refused)
    dup = data.get("duplicate_of")
    dup_id = None
    if isinstance(dup, str) and dup.strip():
        match = [c for c in candidates if c.cluster_id == dup.strip()]
        if not match:
            refused.append(f"duplicate_of names no candidate cluster ({dup.strip()[:40]})")
        elif not same_structure(match[0].signature, signature):
            refused.append("duplicate_of differs in rung or symptom")
        else:
            dup_id = match[0].cluster_id
    return TriageAdvice(title, hyp, dup_id, model, tuple(refused))


def advise(client: Any, *, new: dict[str, Any], signature: Any, clusters: Iterable[Any],
           template_title: str, source: str) -> TriageAdvice | None:
    """Ask the model about a new cluster; None when no usable reply came (the caller goes on)."""
    candidates = candidates_for(signature, clusters)
    try:
        reply = client.complete(prompt_text("triage/cluster.md"), request(new, candidates), purpose="triage")
        data = parse_advice(reply)
    except Exception:  # LLMUnavailable, malformed JSON, a transport error: the structural key decides
        return None
    return judge_advice(data, template_title=template_title, source=source, signature=signature,
                        candidates=candidates, model=str(getattr(client, "model", "?")))
