"""Executors: where a campaign's tests run. `submit(case, target)` → a Future of `ExecResult`.

- `LocalExecutor` (default): one `WorkerPool` of N sandboxed workers on this machine and N
  threads, each calling `Oracle.check` (which blocks on a worker). Its pool is also lent to
  mutators that need an eager probe and to the triage thread, so they share the N workers.
- `RayExecutor` (`--executor ray [--address ...]`): one Ray actor per worker slot, each holding
  its own `WorkerPool(size=1)`; the program still runs only in that actor's sandboxed
  subprocess. Actors take a case as plain data and return `CaseResult.to_wire()` (core/result.py): verdicts as JSON,
  the chosen values as wire bytes; the driver alone writes the store and the case folders.

Both report worker health (restarts, timeouts, segfaults, max worker RSS) for the status panel.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from nnforge.core.calls import CallStep
from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS
from nnforge.core.testcase import TestCase

HEALTH_KEYS = ("calls", "restarts", "recycles", "timeouts", "segfaults", "ooms", "errors", "started")


@dataclass(frozen=True)
class ExecutorConfig:
    workers: int = 2
    timeout_s: float = 60.0
    memory_mb: int = 6000
    recycle_after: int = 200
    value_search_budget_ms: float = VALUE_SEARCH_BUDGET_MS
    inductor_cache_dir: str | None = None
    coverage: bool = False  # Oracle(coverage=True): each result carries the compiler lines new to its worker
    protect: tuple[str, ...] = ()  # folders workers see read-only (the campaign folder), see oracle/sandbox.py
    warm: tuple[str, ...] = ("inductor",)  # targets a fork server's template compiles once before its calls


@dataclass(frozen=True)
class ExecResult:
    """One case judged on one target, and how long the oracle took (wall, seconds)."""

    result: Any  # oracle.CaseResult
    wall_s: float


class Executor(ABC):
    size: int

    @abstractmethod
    def submit(self, case: TestCase, target: str) -> "Future[ExecResult]":
        """Judge `case` on `target`; the Future raises only when the executor itself failed."""

    @abstractmethod
    def health(self) -> dict[str, Any]:
        """Summed worker counters (HEALTH_KEYS), `alive`, `size` and `rss_mb` (largest worker RSS)."""

    def local_pool(self) -> Any | None:
        """A WorkerPool on this machine that others (probes, triage) may share, if there is one."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Stop everything; tests in flight are abandoned (their Futures may never complete)."""


# -- cases as plain data (what crosses a process or machine boundary) -------------------------------------
def case_to_wire(case: TestCase) -> dict[str, Any]:
    from nnforge.oracle.job import dump_values

    return {"program": case.program, "calls": [c.to_json() for c in case.calls], "graph": case.graph,
            "meta": case.meta,
            "inputs_pt": None if case.inputs is None else dump_values(tuple(case.inputs)),
            "state_pt": None if case.state_dict is None else dump_values(dict(case.state_dict))}


def case_from_wire(d: dict[str, Any]) -> TestCase:
    from nnforge.oracle.job import load_values

    inputs = load_values(d.get("inputs_pt"))
    state = load_values(d.get("state_pt"))
    return TestCase(program=d["program"], calls=tuple(CallStep.from_json(c) for c in d["calls"]), graph=d.get("graph"),
                    meta=dict(d.get("meta") or {}), inputs=None if inputs is None else tuple(inputs),
                    state_dict=None if state is None else dict(state))


def result_to_wire(result: Any) -> dict[str, Any]:
    return result.to_wire()


def result_from_wire(case: TestCase, wire: dict[str, Any]) -> Any:
    from nnforge.core.result import CaseResult

    return CaseResult.from_wire(case, wire)


def pool_rss_mb(pool: Any) -> float:
    """The largest RSS among a WorkerPool's live workers, in MB (0 when none is alive)."""
    from nnforge.oracle.sandbox import _rss_bytes

    best = 0
    for slot in getattr(pool, "_slots", ()):
        worker = slot.worker
        if worker is not None:
            best = max(best, _rss_bytes(worker.pid))
    return round(best / 2**20, 1)


def _make_pool(cfg: ExecutorConfig, size: int) -> Any:
    from nnforge.oracle.sandbox import WorkerPool

    return WorkerPool(size=size, timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb, recycle_after=cfg.recycle_after,
                      inductor_cache_dir=cfg.inductor_cache_dir, protect=cfg.protect, warm=cfg.warm)


class _Oracles:
    """One Oracle per target over one pool (an Oracle is configuration, not state)."""

    def __init__(self, pool: Any, cfg: ExecutorConfig):
        self.pool, self.cfg = pool, cfg
        self._by_target: dict[str, Any] = {}
        self._lock = threading.Lock()

    def check(self, case: TestCase, target: str) -> ExecResult:
        from nnforge.oracle.oracle import Oracle

        with self._lock:
            oracle = self._by_target.get(target)
            if oracle is None:
                extra = {"coverage": True} if self.cfg.coverage else {}
                # a wrong value's verdict says where it first went wrong: its early root-cause key
                oracle = self._by_target[target] = Oracle(self.pool, [target], self.cfg.value_search_budget_ms,
                                                          locate=True, **extra)
        t0 = time.perf_counter()
        result = oracle.check(case)
        return ExecResult(result, time.perf_counter() - t0)


# -- local -------------------------------------------------------------------------------------------------
class LocalExecutor(Executor):
    def __init__(self, cfg: ExecutorConfig):
        self.cfg = cfg
        self.size = cfg.workers
        self.pool = _make_pool(cfg, cfg.workers)
        self._oracles = _Oracles(self.pool, cfg)
        self._threads = ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="nnforge-test")

    def submit(self, case: TestCase, target: str) -> "Future[ExecResult]":
        return self._threads.submit(self._oracles.check, case, target)

    def health(self) -> dict[str, Any]:
        st = self.pool.stats()
        out: dict[str, Any] = {k: int(st.get(k, 0)) for k in HEALTH_KEYS}
        out["alive"], out["size"] = st.get("alive", 0), self.size
        out["busy_s"] = float(st.get("busy_s", 0.0))  # worker seconds in calls: tests, triage, probes
        out["rss_mb"] = pool_rss_mb(self.pool)
        return out

    def local_pool(self) -> Any:
        return self.pool

    def close(self) -> None:
        self.pool.close()  # busy calls return at once (PoolClosedError in their threads)
        self._threads.shutdown(wait=False, cancel_futures=True)


# -- Ray ---------------------------------------------------------------------------------------------------
class RaySlot:
    """The body of one Ray actor: a WorkerPool(size=1) and the oracles over it."""

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = ExecutorConfig(**cfg)
        self.pool = _make_pool(self.cfg, 1)
        self.oracles = _Oracles(self.pool, self.cfg)

    def check(self, wire_case: dict[str, Any], target: str) -> dict[str, Any]:
        done = self.oracles.check(case_from_wire(wire_case), target)
        out = result_to_wire(done.result)
        out["wall_s"] = done.wall_s
        out["health"] = self.health()
        return out

    def health(self) -> dict[str, Any]:
        st = self.pool.stats()
        out = {k: int(st.get(k, 0)) for k in HEALTH_KEYS}
        out["alive"] = st.get("alive", 0)
        out["rss_mb"] = pool_rss_mb(self.pool)
        out["pid"] = os.getpid()
        return out

    def close(self) -> None:
        self.pool.close()


class RayExecutor(Executor):
    """One actor per worker slot. `address` None: a local Ray (ray.init on this machine)."""

    def __init__(self, cfg: ExecutorConfig, address: str | None = None, *, ray_init_kwargs: dict[str, Any] | None = None):
        try:
            import ray
        except ImportError as e:
            raise RuntimeError("--executor ray needs the `ray` package (pip install ray)") from e
        self.ray = ray
        self.cfg = cfg
        self.size = cfg.workers
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            # logging_level ERROR: otherwise a local Ray prints over the live panel that it turned token
            # authentication on (its default, which we keep: the documented way to silence that notice,
            # RAY_AUTH_MODE=disabled, would turn it off), where it saved the token, and that it started.
            # Errors still show, and a failed start raises.
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "ignore_reinit_error": True, "logging_level": logging.ERROR}
            if address:
                kwargs["address"] = address
            else:
                kwargs["num_cpus"] = max(cfg.workers, 1)
            kwargs.update(ray_init_kwargs or {})
            ray.init(**kwargs)
        actor_cls = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0)(RaySlot)
        cfg_json = dict(cfg.__dict__)
        self._actors = [actor_cls.options(max_concurrency=2).remote(cfg_json) for _ in range(cfg.workers)]
        self._in_flight = [0] * cfg.workers
        self._health: list[dict[str, Any]] = [{} for _ in range(cfg.workers)]
        self._lock = threading.Lock()

    def submit(self, case: TestCase, target: str) -> "Future[ExecResult]":
        with self._lock:
            i = min(range(len(self._actors)), key=lambda k: self._in_flight[k])
            self._in_flight[i] += 1
        ref = self._actors[i].check.remote(case_to_wire(case), target)
        out: Future[ExecResult] = Future()

        def done(f: "Future[Any]") -> None:
            with self._lock:
                self._in_flight[i] -= 1
            try:
                wire = f.result()
                self._health[i] = dict(wire.get("health") or {})
                out.set_result(ExecResult(result_from_wire(case, wire), float(wire.get("wall_s", 0.0))))
            except BaseException as e:  # the actor died or Ray failed: the executor's failure, not the program's
                out.set_exception(e)

        ref.future().add_done_callback(done)
        return out

    def health(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: 0 for k in HEALTH_KEYS}
        out["alive"], out["size"], out["rss_mb"] = 0, self.size, 0.0
        for h in self._health:
            for k in HEALTH_KEYS:
                out[k] += int(h.get(k, 0))
            out["alive"] += int(h.get("alive", 0))
            out["rss_mb"] = max(out["rss_mb"], float(h.get("rss_mb", 0.0)))
        return out

    def close(self) -> None:
        # Ask each actor to kill its sandboxed worker first (a worker lives in its own session and
        # would outlive a killed actor), then end the actors.
        try:
            self.ray.get([a.close.remote() for a in self._actors], timeout=15)
        except Exception:
            pass
        for a in self._actors:
            try:
                self.ray.kill(a)
            except Exception:
                pass
        self._actors = []
        if self._owns_ray:
            self.ray.shutdown()


def make_executor(kind: str, cfg: ExecutorConfig, *, address: str | None = None,
                  ray_init_kwargs: dict[str, Any] | None = None) -> Executor:
    if kind == "local":
        return LocalExecutor(cfg)
    if kind == "ray":
        return RayExecutor(cfg, address, ray_init_kwargs=ray_init_kwargs)
    raise ValueError(f"unknown executor {kind!r}; use local or ray")

