"""Triage while a campaign runs: threads that reduce and cluster findings as they come.

The loop only records findings; these threads take them from the store, one at a time each,
through the same pipeline as `nnforge triage` (triage/pipeline.py), sharing the campaign's local
workers: more of them while findings wait, fewer once the queue has drained. At the end, `attach_waiting` lets every waiting finding whose key's reduced findings
agree join their cluster without a reduction.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from nnforge.agent.campaign_config import CampaignConfig
from nnforge.agent.store import CampaignStore


EXTRA_EVERY = 2  # one more triage worker for every this many more findings that wait for a reduction
RECENT = 12  # reductions the drain estimate averages


class TriageThread(threading.Thread):
    """One triage worker: reduces and clusters waiting findings, one at a time, through the
    triage pipeline as `nnforge triage` (triage/pipeline.py), with a small budget per finding.

    Each finding goes through `triage.pipeline.triage_finding`: the first findings of a
    provisional root-cause key are reduced and their repro checked, the rest attach to the
    cluster those reached, so a bug hit a thousand times costs `triage_per_key` reductions.
    Thread i works only while its group wants more than i workers (TriageGroup.wanted). It has its
    own store connection (SQLite connections are per thread) and shares the local workers when the
    executor has some (else one of its own). Findings it could not triage stay `new` for
    `nnforge triage DIR`.
    """

    def __init__(self, out: Path, pool: Any | None, cfg: CampaignConfig, log: Callable[[str], None],
                 group: "TriageGroup", index: int = 0):
        super().__init__(name=f"nnforge-triage-{index}", daemon=True)
        self.out, self.shared_pool, self.cfg, self.log = out, pool, cfg, log
        self.group, self.index = group, index
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self.done = 0
        self.failed = 0
        self.known = 0
        self.current: str = ""

    def wake(self) -> None:
        self._wake.set()

    def stop(self, wait_s: float) -> None:
        self._stop_event.set()
        self._wake.set()
        self.join(timeout=wait_s)

    def run(self) -> None:
        from nnforge.core.settings import load_settings
        from nnforge.triage.pipeline import KNOWN_GUILTY, TriageConfig, triage_finding

        # --llm openai turns the triage LLM step on as it turns on LLM mutators (offline by default)
        settings = load_settings(llm_provider="openai") if self.cfg.llm != "none" else load_settings()
        cfg = TriageConfig(budget_s=self.cfg.triage_budget_s, max_queries=self.cfg.triage_max_queries,
                           use_llm=self.cfg.llm != "none", per_key=self.cfg.triage_per_key)
        store = CampaignStore(self.out)
        own_pool = None
        try:
            while not self._stop_event.is_set():
                self._wake.wait(timeout=2.0 if self.index else 5.0)
                self._wake.clear()
                while not self._stop_event.is_set():
                    finding = self.group.claim(store, self.index)
                    if finding is None:
                        break
                    pool = self.shared_pool
                    if pool is None:
                        if own_pool is None:
                            from nnforge.oracle.sandbox import WorkerPool

                            own_pool = WorkerPool(size=1, timeout_s=self.cfg.timeout_s, memory_mb=self.cfg.memory_mb)
                        pool = own_pool
                    self.current = f"finding {finding.finding_id}"
                    t0 = time.monotonic()
                    try:
                        o = triage_finding(store, pool, self.out, finding, settings=settings, cfg=cfg)
                        self.done += 1
                        if o.how == "attached":
                            self.known += 1
                        elif o.how == KNOWN_GUILTY:
                            self.known += 1
                            self.log(f"triage: finding {finding.finding_id} → cluster {o.cluster_id} unreduced "
                                     f"(its guilty operator is wrong alone in it)")
                        else:
                            self.group.reduced(time.monotonic() - t0)
                            self.log(f"triage: finding {finding.finding_id} → cluster {o.cluster_id}"
                                     f"{' (new)' if o.is_new_cluster else ''}, repro {o.repro}")
                        if o.is_new_cluster:
                            self.group.new_clusters.append(finding.finding_id)
                    except Exception as e:
                        self.failed += 1
                        if not self._stop_event.is_set():
                            store.mark_failed(finding.finding_id, f"{type(e).__name__}: {e}")
                            self.log(f"triage of finding {finding.finding_id} failed ({type(e).__name__}: {e}); "
                                     f"`nnforge triage {self.out}` will retry it")
                    finally:
                        self.current = ""
                        self.group.release(finding.finding_id)
        finally:
            if own_pool is not None:
                own_pool.close()
            store.close()


class TriageGroup:
    """Triage's workers, as many as the waiting findings need: `triage_workers` always (one by
    default), and while findings wait for a reduction one more for every EXTRA_EVERY of them, up
    to `most` (all of the campaign's workers by default), or all at once when at the present pace
    the backlog would outlast the budget. The campaign tests on the workers triage does not want
    (agent/campaign.py `_test_slots`), so testing slows while a backlog drains and resumes after.

    Threads take findings from one queue (the store's waiting findings, oldest first, those that
    can attach without a reduction before those that need one); a finding is claimed by one thread."""

    def __init__(self, out: Path, pool: Any | None, cfg: CampaignConfig, log: Callable[[str], None], *,
                 most: int | None = None, time_left: Callable[[], float] | None = None):
        self.base = max(1, int(cfg.triage_workers))
        # without shared workers (Ray) each thread starts a worker of its own: no more than asked for
        self.most = max(self.base, int(most or 1)) if pool is not None else self.base
        self.time_left = time_left
        self.threads = [TriageThread(out, pool, cfg, log, group=self, index=i) for i in range(self.most)]
        self._lock = threading.Lock()
        self._claimed: set[int] = set()
        self._attempted: set[int] = set()
        self._seconds: deque[float] = deque(maxlen=RECENT)
        self.per_key = cfg.triage_per_key
        self.backlog = 0  # waiting findings that need a reduction (none of their key's reductions to join)
        self.waiting = 0  # all waiting findings
        self.new_clusters: list[int] = []  # findings that made a new cluster (the campaign pays their arms)

    # -- the queue ------------------------------------------------------------------------------------------
    def claim(self, store: CampaignStore, index: int) -> Any | None:
        """The next finding thread `index` should triage, claimed for it; None when there is none
        or the group does not want that many workers now."""
        with self._lock:
            failed = self._attempted - self._claimed  # tried and still waiting: left for `nnforge triage`
            waiting = [f for f in store.new_findings() if f.finding_id not in failed]
            attachable = {f.finding_id for f in waiting if self._attachable(store, f)}
            self.waiting = len(waiting)
            self.backlog = len(waiting) - len(attachable)  # the ones being reduced now included
            if index >= self.wanted():
                return None
            free = [f for f in waiting if f.finding_id not in self._claimed]
            free.sort(key=lambda f: (f.finding_id not in attachable, f.finding_id))
            if not free:
                return None
            finding = free[0]
            self._claimed.add(finding.finding_id)
            self._attempted.add(finding.finding_id)
            return finding

    def release(self, finding_id: int) -> None:
        with self._lock:
            self._claimed.discard(finding_id)

    def reduced(self, seconds: float) -> None:
        with self._lock:
            self._seconds.append(seconds)

    def _attachable(self, store: CampaignStore, finding: Any) -> bool:
        from nnforge.triage.pipeline import attach_target

        return bool(finding.pkey) and attach_target(store, finding, finding.pkey, self.per_key) is not None

    # -- how many workers -----------------------------------------------------------------------------------
    def mean_reduction_s(self) -> float | None:
        return sum(self._seconds) / len(self._seconds) if self._seconds else None

    def drain_s(self, workers: int | None = None) -> float | None:
        """Seconds the backlog takes on `workers` triage workers (now: wanted()) at the recent pace."""
        mean = self.mean_reduction_s()
        if mean is None or not self.backlog:
            return None if self.backlog else 0.0
        return self.backlog * mean / max(1, workers or self.wanted())

    def wanted(self) -> int:
        """How many workers triage wants now (see the class docstring)."""
        if self.backlog <= 0:
            return self.base
        want = self.base + (self.backlog - 1) // EXTRA_EVERY
        mean = self.mean_reduction_s()
        if mean is not None and self.time_left is not None and self.backlog * mean / max(1, want) > self.time_left():
            want = self.most
        return max(self.base, min(self.most, want))

    def busy(self) -> int:
        """Workers triage wants and has work for: what the campaign keeps from testing."""
        return self.wanted() if (self.backlog or self.current) else 0

    def outlook(self) -> str:
        """'7 wait for a reduction, ≈ 5 min at 42 s each on 2 workers' (empty with no backlog)."""
        if not self.backlog:
            return ""
        mean, drain = self.mean_reduction_s(), self.drain_s()
        if mean is None or drain is None:
            return f"{self.backlog} wait for a reduction"
        return (f"{self.backlog} wait for a reduction, ≈ {drain / 60:.1f} min at {mean:.0f} s each "
                f"on {self.wanted()} worker(s)")

    # -- the threads ----------------------------------------------------------------------------------------
    def start(self) -> None:
        for t in self.threads:
            t.start()

    def wake(self) -> None:
        for t in self.threads:
            t.wake()

    def stop(self, wait_s: float) -> None:
        for t in self.threads:
            t._stop_event.set()
            t._wake.set()
        deadline = time.monotonic() + wait_s
        for t in self.threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def is_alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    @property
    def current(self) -> str:
        return ", ".join(t.current for t in self.threads if t.current)

    def describe(self) -> str:
        done = sum(t.done for t in self.threads)
        known = sum(t.known for t in self.threads)
        failed = sum(t.failed for t in self.threads)
        doing = f", now {self.current}" if self.current else ""
        outlook = f"; {self.outlook()}" if self.backlog else ""
        return f"{done} triaged ({known} joined a known cluster at once), {failed} failed{outlook}{doing}"


def attach_waiting(store: Any, per_key: int) -> int:
    """At a campaign's end: every waiting finding whose key's reduced findings agree joins their
    cluster (no reduction, no worker), so only findings that still need a reduction wait."""
    from nnforge.triage.pipeline import attach_target

    n = 0
    for f in store.new_findings():
        target = attach_target(store, f, f.pkey, per_key) if f.pkey else None
        if target is not None:
            store.attach(f.finding_id, target)
            n += 1
    return n
