"""ExampleBank: the few-shot examples an LLM prompt shows, chosen by Thompson sampling.

Each example is an earlier mutant that ran (an LLM mutant, or an offline rule's mutant used to
start a category off). Every time an example is shown, the mutant the model then writes either
passes its checks or does not; that outcome is credited to every example the prompt showed. An
example's success rate has a Beta(successes + 1, failures + 1) posterior; to pick k examples we
draw once from each posterior and take the k highest draws, so good examples are shown more
often while rarely shown ones still get tried.

State is one JSON file (`examples.json`) in a folder the caller owns (the campaign folder or the
LLM cache folder), written atomically, so a resumed campaign keeps what it learnt.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BANK_FILE = "examples.json"
MAX_PER_CATEGORY = 24  # beyond this, the example with the lowest posterior mean is dropped
MAX_EXAMPLE_CHARS = 4000  # longer programs are not worth their tokens as examples


@dataclass(frozen=True)
class Example:
    """One earlier mutant program for one category, with its record as a few-shot example."""

    example_id: str
    category: str
    program: str
    origin: str = "llm"  # "llm" | "offline:<mutator name>"
    successes: int = 0
    failures: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Example":
        return cls(**d)

    @property
    def mean(self) -> float:
        return (self.successes + 1) / (self.successes + self.failures + 2)


def example_id(category: str, program: str) -> str:
    return hashlib.sha256(f"{category}\n{program}".encode("utf-8")).hexdigest()[:16]


class ExampleBank:
    """Examples per category with their successes and failures; persisted in `folder/examples.json`."""

    def __init__(self, folder: str | os.PathLike | None) -> None:
        self.path = Path(os.path.expanduser(str(folder))) / BANK_FILE if folder is not None else None
        self._lock = threading.Lock()
        self._examples: dict[str, Example] = {}
        if self.path is not None and self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self._examples = {e["example_id"]: Example.from_json(e) for e in data.get("examples", [])}
            except (OSError, ValueError, KeyError, TypeError):
                self._examples = {}  # a damaged bank only loses what it learnt

    def examples(self, category: str) -> list[Example]:
        with self._lock:
            return [e for e in self._examples.values() if e.category == category]

    def add(self, category: str, program: str, origin: str = "llm") -> Example | None:
        """Keep `program` as an example (None when it is too long to be worth showing)."""
        if len(program) > MAX_EXAMPLE_CHARS:
            return None
        eid = example_id(category, program)
        with self._lock:
            if eid not in self._examples:
                self._examples[eid] = Example(eid, category, program, origin)
                self._prune(category)
            ex = self._examples.get(eid)
        self._save()
        return ex

    def pick(self, category: str, k: int, rng: random.Random) -> list[Example]:
        """Up to k examples of `category`: the k highest draws from their Beta posteriors."""
        pool = self.examples(category)
        draws = [(rng.betavariate(e.successes + 1, e.failures + 1), e.example_id, e) for e in pool]
        draws.sort(key=lambda t: (-t[0], t[1]))
        return [e for _, _, e in draws[:k]]

    def record(self, example_ids: list[str] | tuple[str, ...], success: bool) -> None:
        """Credit (or debit) the examples one prompt showed with that prompt's outcome."""
        with self._lock:
            for eid in example_ids:
                e = self._examples.get(eid)
                if e is None:
                    continue
                self._examples[eid] = Example(e.example_id, e.category, e.program, e.origin,
                                              e.successes + int(success), e.failures + int(not success))
        self._save()

    def _prune(self, category: str) -> None:
        mine = [e for e in self._examples.values() if e.category == category]
        while len(mine) > MAX_PER_CATEGORY:
            worst = min(mine, key=lambda e: (e.mean, e.successes + e.failures))
            del self._examples[worst.example_id]
            mine.remove(worst)

    def _save(self) -> None:
        if self.path is None:
            return
        with self._lock:
            data = {"examples": [e.to_json() for e in sorted(self._examples.values(), key=lambda e: e.example_id)]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
        os.replace(tmp, self.path)
