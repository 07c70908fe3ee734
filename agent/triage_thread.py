"""Triage while a campaign runs: threads that reduce and cluster findings as they come.

The loop only records findings; these threads take them from the store, one at a time each,
through the same pipeline as `nnforge triage` (triage/pipeline.py), sharing the campaign's local
workers. At the end, `attach_waiting` lets every waiting finding whose key's reduced findings
agree join their cluster without a reduction.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from nnforge.agent.campaign_config import CampaignConfig
from nnforge.agent.store import CampaignStore


class TriageThread(threading.Thread):
    """Reduces and clusters new findings in the background, one at a time, through the triage
    pipeline as `nnforge triage` (triage/pipeline.py), with a small budget per finding.

    Each finding goes through `triage.pipeline.triage_finding`: the first findings of a
    provisional root-cause key are reduced and their repro checked, the rest attach to the
    cluster those reached, so a bug hit a thousand times costs `triage_per_key` reductions. It has its own store connection (SQLite connections are
    per thread) and shares the local workers when the executor has some (else one of its own).
    Findings it could not triage stay `new` for `nnforge triage DIR`.
    """

    def __init__(self, out: Path, pool: Any | None, cfg: CampaignConfig, log: Callable[[str], None],
                 part: tuple[int, int] = (0, 1)):
        super().__init__(name=f"nnforge-triage-{part[0]}", daemon=True)
        self.out, self.shared_pool, self.cfg, self.log = out, pool, cfg, log
        self.part = part  # (i, n): this thread takes the findings whose id is i modulo n
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self.done = 0
        self.failed = 0
        self.known = 0
        self.current: str = ""
        self.backlog = 0  # waiting findings that need a reduction (not attachable)
        self._attempted: set[int] = set()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, wait_s: float) -> None:
        self._stop_event.set()
        self._wake.set()
        self.join(timeout=wait_s)

    def describe(self) -> str:
        doing = f", now {self.current}" if self.current else ""
        return f"{self.done} triaged ({self.known} joined a known cluster at once), {self.failed} failed{doing}"

    def run(self) -> None:
        from nnforge.core.settings import load_settings
        from nnforge.triage.pipeline import TriageConfig, triage_finding

        # --llm openai turns the triage LLM step on as it turns on LLM mutators (offline by default)
        settings = load_settings(llm_provider="openai") if self.cfg.llm != "none" else load_settings()
        cfg = TriageConfig(budget_s=self.cfg.triage_budget_s, max_queries=self.cfg.triage_max_queries,
                           use_llm=self.cfg.llm != "none", per_key=self.cfg.triage_per_key)
        store = CampaignStore(self.out)
        own_pool = None
        try:
            while not self._stop_event.is_set():
                self._wake.wait(timeout=5.0)
                self._wake.clear()
                i, n = self.part
                waiting = [f for f in store.new_findings()
                           if f.finding_id not in self._attempted and f.finding_id % n == i]
                self.backlog = sum(1 for f in waiting if not self._attachable(store, f))
                for finding in waiting:
                    if self._stop_event.is_set():
                        break
                    self._attempted.add(finding.finding_id)
                    pool = self.shared_pool
                    if pool is None:
                        if own_pool is None:
                            from nnforge.oracle.sandbox import WorkerPool

                            own_pool = WorkerPool(size=1, timeout_s=self.cfg.timeout_s, memory_mb=self.cfg.memory_mb)
                        pool = own_pool
                    self.current = f"finding {finding.finding_id}"
                    try:
                        o = triage_finding(store, pool, self.out, finding, settings=settings, cfg=cfg)
                        self.done += 1
                        if o.how == "attached":
                            self.known += 1
                        else:
                            self.backlog = max(self.backlog - 1, 0)
                            self.log(f"triage: finding {finding.finding_id} → cluster {o.cluster_id}"
                                     f"{' (new)' if o.is_new_cluster else ''}, repro {o.repro}")
                    except Exception as e:
                        self.failed += 1
                        if not self._stop_event.is_set():
                            store.mark_failed(finding.finding_id, f"{type(e).__name__}: {e}")
                            self.log(f"triage of finding {finding.finding_id} failed ({type(e).__name__}: {e}); "
                                     f"`nnforge triage {self.out}` will retry it")
                    finally:
                        self.current = ""
                self.backlog = 0 if not self._stop_event.is_set() else self.backlog
        finally:
            if own_pool is not None:
                own_pool.close()
            store.close()

    def _attachable(self, store: CampaignStore, finding: Any) -> bool:
        from nnforge.triage.pipeline import attach_target

        return bool(finding.pkey) and attach_target(store, finding, finding.pkey, self.cfg.triage_per_key) is not None


class TriageGroup:
    """`triage_workers` TriageThreads splitting the findings between them by id: triage's share
    of the shared workers is that many (each thread holds one worker at a time, while reducing)."""

    def __init__(self, out: Path, pool: Any | None, cfg: CampaignConfig, log: Callable[[str], None]):
        n = max(1, int(cfg.triage_workers))
        self.threads = [TriageThread(out, pool, cfg, log, part=(i, n)) for i in range(n)]

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
    def backlog(self) -> int:
        return sum(t.backlog for t in self.threads)

    @property
    def current(self) -> str:
        return ", ".join(t.current for t in self.threads if t.current)

    def describe(self) -> str:
        done = sum(t.done for t in self.threads)
        known = sum(t.known for t in self.threads)
        failed = sum(t.failed for t in self.threads)
        doing = f", now {self.current}" if self.current else ""
        share = f" on {len(self.threads)} threads" if len(self.threads) > 1 else ""
        return f"{done} triaged ({known} joined a known cluster at once), {failed} failed{share}{doing}"


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
