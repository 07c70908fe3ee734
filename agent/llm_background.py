"""LLM mutations off the campaign's main loop.

An LLM call takes seconds when the endpoint is well and up to its timeout times its retries
when it is not; on the main loop that would stall the status lines, the scheduler and the
workers, and a hung endpoint could push a campaign past its budget. So LLM mutators run on a
thread of their own: the loop hands a seed to `take`, which returns a mutant the thread
finished earlier for that category (or None) and queues the seed for the next one. A None is
a fallback: the loop uses an offline mutator of the same category for this test, and counts it.
"""

from __future__ import annotations

import queue
import random
import threading
from collections import Counter
from concurrent.futures import Future
from typing import Any, Callable

MAX_PENDING_PER_CATEGORY = 1


class BackgroundMutations:
    def __init__(self, mutators: dict[str, Any], probe: Callable[[], Any], *, threads: int = 1):
        self.mutators = mutators
        self._probe = probe
        self._jobs: queue.Queue[tuple[Future, Callable[[], Any]] | None] = queue.Queue()
        # daemon threads: a call hung on the endpoint must not keep the process alive at its end
        self._threads = [threading.Thread(target=self._serve, name=f"nnforge-llm-{i}", daemon=True)
                         for i in range(max(1, threads))]
        for t in self._threads:
            t.start()
        self._pending: dict[str, list[Future]] = {}
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()  # submitted, mutants, empty, failed, fallbacks
        self.last_error = ""

    def __contains__(self, category: str) -> bool:
        return category in self.mutators

    def take(self, category: str, case: Any, rng: random.Random) -> Any | None:
        """A finished mutant for `category`, if one is ready; queues `case` for the next one. Never waits."""
        m = self.mutators[category]
        ready = None
        with self._lock:
            futures = self._pending.setdefault(category, [])
            for f in [f for f in futures if f.done()]:
                futures.remove(f)
                try:
                    mutant = f.result()
                except Exception as e:  # LLMUnavailable, a malformed reply, a mutator bug
                    self.counts["failed"] += 1
                    self.last_error = f"{type(e).__name__}: {str(e)[:200]}"
                    continue
                if mutant is None:
                    self.counts["empty"] += 1
                elif ready is None:
                    ready = mutant
                    self.counts["mutants"] += 1
            if len(futures) < MAX_PENDING_PER_CATEGORY and m.applicable(case):
                seed = random.Random(rng.random())
                futures.append(self._submit(lambda: m.mutate(case, seed, self._probe())))
                self.counts["submitted"] += 1
            if ready is None:
                self.counts["fallbacks"] += 1
        return ready

    def _submit(self, fn: Callable[[], Any]) -> Future:
        f: Future = Future()
        self._jobs.put((f, fn))
        return f

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            f, fn = job
            if not f.set_running_or_notify_cancel():
                continue
            try:
                f.set_result(fn())
            except BaseException as e:
                f.set_exception(e)

    def pending(self) -> int:
        with self._lock:
            return sum(1 for fs in self._pending.values() for f in fs if not f.done())

    def close(self) -> None:
        """Abandon what is in flight: a hung call must not hold the campaign's end (its thread ends
        with its own timeout; the process does not wait for it)."""
        with self._lock:
            for fs in self._pending.values():
                for f in fs:
                    f.cancel()
        for _ in self._threads:
            self._jobs.put(None)
