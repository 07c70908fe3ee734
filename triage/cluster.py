"""Clustering: deciding whether a new finding is a bug we already know or a new one.

The rule is deliberately simple so a maintainer can predict it:

1. Equal signature digests are one cluster (symptom, target, blame rung and crash key or
   canonical reduced program all agree).
2. Otherwise, for silent wrong results only (`mismatch`, `nan_mismatch`), whose key is a
   canonical program and so can differ by an operator the reducer could not remove, a finding
   may join the most similar cluster with the same target, rung and symptom when the similarity
   of the two signatures is at least `threshold`. Crashes never join by similarity: their key
   already names the failing code, and two different crash keys are two different bugs.
3. Otherwise the finding opens a new cluster whose id is its own digest.

Persistence is not this module's business: it reads the existing clusters through anything with
a `cluster_records()` method (the agent's Store, or `MemoryClusters` below for benchmarks), so
the triage stage never imports the agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from nnforge.core.signature import Signature
from nnforge.triage.signature import similarity as signature_similarity

SIMILARITY_SYMPTOMS = frozenset({"mismatch", "nan_mismatch"})
DEFAULT_THRESHOLD = 0.85


@dataclass(frozen=True)
class ClusterRecord:
    """What clustering needs to know about an existing cluster."""

    cluster_id: str
    signature: Signature  # the signature that opened the cluster
    count: int = 0
    title: str = ""


@dataclass(frozen=True)
class Assignment:
    cluster_id: str
    is_new: bool
    how: str  # "digest" | "similar" | "new"
    score: float | None = None  # the similarity, when `how == "similar"`

    def to_json(self) -> dict[str, object]:
        return {"cluster_id": self.cluster_id, "is_new": self.is_new, "how": self.how, "score": self.score}


def comparable(a: Signature, b: Signature) -> bool:
    """May `a` join `b`'s cluster by similarity? Only same target, rung and silent symptom."""
    return (a.symptom == b.symptom and a.symptom in SIMILARITY_SYMPTOMS
            and a.target == b.target and a.rung == b.rung)


def choose_cluster(signature: Signature, existing: Iterable[ClusterRecord], *,
                   threshold: float | None = DEFAULT_THRESHOLD,
                   similarity: Callable[[Signature, Signature], float] | None = None) -> Assignment:
    """Where `signature` goes among `existing` clusters (see the module docstring).

    `threshold=None` turns the similarity tie-breaker off (digest equality only).
    """
    records = list(existing)
    digest = signature.digest
    for rec in records:
        if rec.cluster_id == digest or rec.signature.digest == digest:
            return Assignment(rec.cluster_id, False, "digest")
    if threshold is not None and signature.symptom in SIMILARITY_SYMPTOMS:
        sim = similarity or signature_similarity
        best: tuple[float, int, ClusterRecord] | None = None
        for rec in records:
            if not comparable(signature, rec.signature):
                continue
            score = float(sim(signature, rec.signature))
            if score >= threshold and (best is None or (score, rec.count) > best[:2]):
                best = (score, rec.count, rec)
        if best is not None:
            return Assignment(best[2].cluster_id, False, "similar", round(best[0], 4))
    return Assignment(digest, True, "new")


@dataclass
class MemoryClusters:
    """An in-memory cluster book: clusters for a benchmark or a dry run, nothing written."""

    threshold: float | None = DEFAULT_THRESHOLD
    records: dict[str, ClusterRecord] = field(default_factory=dict)
    members: dict[str, list[object]] = field(default_factory=dict)

    def cluster_records(self) -> list[ClusterRecord]:
        return list(self.records.values())

    def add(self, signature: Signature, member: object = None, title: str = "") -> Assignment:
        """Assign `signature` and remember `member` (any label) in its cluster."""
        a = choose_cluster(signature, self.cluster_records(), threshold=self.threshold)
        rec = self.records.get(a.cluster_id) or ClusterRecord(a.cluster_id, signature, 0, title)
        self.records[a.cluster_id] = ClusterRecord(rec.cluster_id, rec.signature, rec.count + 1, rec.title)
        self.members.setdefault(a.cluster_id, []).append(member)
        return a


def pairwise_precision_recall(truth: dict[object, object], predicted: dict[object, object]) -> tuple[float, float]:
    """Pairwise clustering precision and recall of `predicted` (item -> cluster) against `truth`
    (item -> true bug): precision = share of same-cluster pairs that are one bug; recall = share
    of one-bug pairs that share a cluster. 1.0 when there are no pairs to judge."""
    items = [i for i in truth if i in predicted]
    same_pred = same_true = both = 0
    for x in range(len(items)):
        for y in range(x + 1, len(items)):
            p = predicted[items[x]] == predicted[items[y]]
            t = truth[items[x]] == truth[items[y]]
            same_pred += p
            same_true += t
            both += p and t
    return (both / same_pred if same_pred else 1.0, both / same_true if same_true else 1.0)
