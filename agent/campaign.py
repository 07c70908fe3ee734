"""The campaign loop: seeds → (mutants) → value search + oracle in sandboxed workers → store.

One test is one case judged on one target. The scheduler (`scheduler.py`) picks an arm (seed
source × category × target); the seed source gives a case (the solver generator, with a seed
number that only ever grows, or a history seed); a mutator of the arm's category rewrites it
unless the arm says "seed"; the case folder `DIR/cases/<case_id>/` and a `queue` row are written
BEFORE the test runs; the executor runs it; the verdict, and the finding when it is a bug, go to
the store in one transaction before anything else happens with them; then the case folder gets
the values value search chose and its `verdicts.json`, and the scheduler is paid 1 if the test
showed new behaviour.

Why this order: a campaign killed at any moment (Ctrl-C, SIGKILL, power) loses only the
verdicts of the tests in flight, and `--resume` runs those again from their folders. The seed
counter is stored before a seed is used, so a resumed campaign never regenerates a program it
already ran. Elapsed time accumulates across runs, so the budget is the campaign's, not a run's.

Around the loop: a lock file (`lock.py`) so two campaigns never share a folder; a start-up check
that the folder is writable and the disk has room; a triage thread that reduces and clusters
findings as they come (sharing the local workers); a stats row every ~10 s; the live status;
the summary and HTML report (written by `agent/summary.py` and `agent/report_html.py`) at the end
and every `report_every_s`.

This module keeps the loop; beside it: `campaign_config.py` (what was asked for), `seed_sources.py`
(the generator and history seeds), `novelty.py` (what the scheduler rewards as new),
`triage_thread.py` (triage while the campaign runs), `coverage_map.py` (the covered lines, and their
file in the campaign folder); the store's tables, the campaign's among them, are `store.py`'s.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import socket
import threading
import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from nnforge.agent.campaign_config import CampaignConfig, CampaignSetupError, categories_for_target, is_onnx_target
from nnforge.agent.store import STORE_FILE, CampaignStore, QueuedTest, is_disk_full
from nnforge.agent.coverage_map import load_coverage_map, save_coverage_map
from nnforge.agent.novelty import behaviours_of, compiler_record, root_cause_key
from nnforge.agent.seed_sources import GeneratorSource, HistorySource, history_prior
from nnforge.agent.triage_thread import TriageGroup, attach_waiting
from nnforge.agent.executor import ExecutorConfig, ExecResult, make_executor
from nnforge.agent.lock import CampaignLock
from nnforge.agent.scheduler import Arm, Scheduler
from nnforge.agent.status import StatusDisplay, StatusSnapshot
from nnforge.core.backward import differentiable
from nnforge.generator.pack import pack_cases, programs_in
from nnforge.mutators.pack import NotPackable, pack_mutants, packable
from nnforge.core.testcase import TestCase
from nnforge.oracle import kernel_unit
from nnforge.core.verdict import Verdict

CASES_SUBDIR = "cases"
PROBE_MB = 4
PROBE_TIMEOUT_S = 15.0  # an eager run of a candidate mutant
CAMPAIGN_CACHE_DIR = "inductor-cache"  # the campaign's own compile cache, inside its folder
MAX_DRAWS_PER_SLOT = 6  # attempts to make a new test before waiting for a result
EXHAUSTED_AFTER = 20  # consecutive duplicates after which an arm is retired (history seeds all run)


def preflight(out: Path, min_free_mb: int, probe_mb: int = PROBE_MB) -> None:
    """Create `out`, write and fsync a probe file, check free space: CampaignSetupError if any fails."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CampaignSetupError(f"cannot create the campaign folder {out}: {e.strerror or e}") from e
    probe = out / f".nnforge-write-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            chunk = b"\0" * (1 << 20)
            for _ in range(probe_mb):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise CampaignSetupError(f"cannot write to the campaign folder {out}: {e.strerror or e}") from e
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    free_mb = shutil.disk_usage(out).free / 2**20
    if free_mb < min_free_mb:
        raise CampaignSetupError(
            f"only {free_mb:.0f} MB free on the disk holding {out}; a campaign needs at least {min_free_mb} MB "
            f"(NNFORGE_CAMPAIGN_MIN_FREE_MB): free some space or choose another -o")


def _is_disk_full(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return is_disk_full(e)


def value_bin_families() -> tuple[str, ...]:
    from nnforge.oracle.value_bins import FAMILIES

    return FAMILIES


def calls_kind(case: TestCase) -> str:
    return "forward + backward" if any(c.backward for c in case.calls) else "forward"


def _worker_seconds(result: Any) -> float | None:
    """Seconds the test's worker calls took (oracle.Oracle), None from an oracle that does not say."""
    value = (getattr(result, "timings", None) or {}).get("worker_s")
    return round(float(value), 4) if isinstance(value, (int, float)) else None


def _requested_bin(case: TestCase) -> str | None:
    b = case.meta.get("value_bin")
    return b if isinstance(b, str) else None


def _bin_kept(case: TestCase, verdict: Verdict) -> bool | None:
    """Whether the test ran on values with its bin's property (None: no bin, or not known)."""
    wanted = _requested_bin(case)
    if wanted is None or verdict.value_bin is None:
        return None
    return verdict.value_bin == wanted


def write_reports(folder: Path, store: Any, log: Callable[[str], None] = lambda s: None) -> dict[str, str]:
    """summary.md and report.html from the store; a writer that fails is reported, not raised."""
    from nnforge.agent.report_html import write_report
    from nnforge.agent.summary import write_summary

    files = {}
    for key, writer in (("summary", write_summary), ("report", write_report)):
        try:
            files[key] = str(writer(folder, store))
        except Exception as e:
            log(f"writing the {key} failed: {type(e).__name__}: {e}")
    return files


# -- the campaign ------------------------------------------------------------------------------------------------
@dataclass
class _Counters:
    made: int = 0
    duplicates: int = 0
    mutate_failed: int = 0
    generate_failed: int = 0
    executor_errors: int = 0
    requeued: int = 0
    lost: int = 0
    novel: int = 0


@dataclass
class CampaignOutcome:
    folder: Path
    reason: str  # "budget" | "interrupted" | "disk full"
    tests_this_run: int
    tests_total: int
    elapsed_s: float
    run_s: float
    findings: int
    clusters: int
    health: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


class Campaign:
    """`Campaign(cfg).run()` or `Campaign.resume(dir).run()`; raises CampaignSetupError / CampaignLocked."""

    def __init__(self, cfg: CampaignConfig, *, resume: bool = False, budget_override_s: float | None = None,
                 display: StatusDisplay | None = None, ray_init_kwargs: dict[str, Any] | None = None):
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.resuming = resume
        self.budget_override_s = budget_override_s
        self.display = display or StatusDisplay()
        self.ray_init_kwargs = ray_init_kwargs
        self.counters = _Counters()
        self._stop = threading.Event()
        self._interrupts = 0
        self.coverage_map: Any = None
        self._probe_pool: Any = None
        self.gate: Any = None  # agent/export_gate.GateCheck, made on first use

    # -- setup --------------------------------------------------------------------------------------------
    def _open(self) -> None:
        if self.resuming and not (self.out / STORE_FILE).is_file():
            raise CampaignSetupError(f"{self.out} holds no campaign to resume (no {STORE_FILE} in it)")
        if not self.resuming:
            _check_targets(self.cfg.targets)
        preflight(self.out, int(self._resume_overrides.get("min_free_mb") or self.cfg.min_free_mb))
        self.lock = CampaignLock(self.out)
        self.lock.acquire()  # CampaignLocked propagates: "DIR is in use by campaign pid N ..."
        try:
            self.store = CampaignStore(self.out)
            saved = self.store.get_json("campaign_config")
            if self.resuming:
                if saved is None:
                    raise CampaignSetupError(f"{self.out} holds no campaign to resume (no campaign_config in its store)")
                cfg = CampaignConfig.from_json({**saved, "out": str(self.out)})
                overrides = {k: v for k, v in self._resume_overrides.items() if v is not None}
                self.cfg = replace(cfg, **overrides)
                if self.budget_override_s is not None:
                    self.cfg = replace(self.cfg, budget_s=self.budget_override_s)
            elif saved is not None:
                raise CampaignSetupError(f"{self.out} already holds a campaign; continue it with "
                                         f"`nnforge campaign --resume {self.out}` or choose another -o")
            _check_targets(self.cfg.targets)
            self.elapsed_base = float(self.store.get_meta("campaign_elapsed_s") or 0.0)
            self.runs = self.store.get_json("campaign_runs", []) or []
            self.runs.append({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                              "resumed": self.resuming, "elapsed_at_start": self.elapsed_base})
            self._build()  # seed sources and mutators: a bad option fails here, before anything is stored
            self.store.set_json("campaign_config", self.cfg.to_json())
            if self.store.get_meta("campaign_started") is None:
                self.store.set_meta("campaign_started", str(time.time()))
            self.store.set_json("campaign_runs", self.runs)
            self.store.set_meta("campaign_status", "running")
        except BaseException:
            self.lock.release()
            raise

    _resume_overrides: dict[str, Any] = {}

    def _build(self) -> None:
        from nnforge.mutators.base import CATEGORIES, TRAINING, all_mutators

        cfg = self.cfg
        self.rng = random.Random(cfg.seed + len(self.runs) * 7919)
        self.sources: dict[str, Any] = {}
        history_dirs = []
        for spec in cfg.seeds:
            kind, _, arg = spec.partition(":")
            if kind == "generator":
                self.sources["generator"] = GeneratorSource(self.store, cfg)
                self.sources["generator"].admit = self._admits
            elif kind == "history":
                if not arg:
                    raise CampaignSetupError("--seeds history:DIR needs the folder (history:seeds/)")
                history_dirs.append(arg)
            else:
                raise CampaignSetupError(f"unknown seed source {spec!r}; use generator and/or history:DIR")
        if history_dirs:
            try:
                self.sources["history"] = HistorySource(history_dirs)
            except FileNotFoundError as e:
                raise CampaignSetupError(str(e)) from e
        if not self.sources:
            raise CampaignSetupError("no seed source: --seeds generator[,history:DIR]")
        self.llm_mutators: dict[str, Any] = {}
        self.llm_client: Any = None
        self.llm_background: Any = None
        if cfg.llm not in ("none", "openai"):
            raise CampaignSetupError(f"--llm {cfg.llm!r}: use none or openai")
        offline = all_mutators()
        if cfg.llm == "openai":
            from nnforge.agent.llm_background import BackgroundMutations

            self.llm_mutators = self._make_llm_mutators()
            self.llm_background = BackgroundMutations(self.llm_mutators, self._probe)
            categories = list(CATEGORIES)
        else:
            categories = [c for c in CATEGORIES if any(m.category == c for m in offline.values())]
        if cfg.backward_share == 0:  # forward only: no training mutants either
            categories = [c for c in categories if c != TRAINING]
        self.offline = offline
        self.scheduler = Scheduler(list(self.sources), categories if cfg.mutant_share > 0 else [], cfg.targets,
                                   prior=history_prior(history_dirs), mutant_share=cfg.mutant_share, seed=cfg.seed,
                                   categories_for=categories_for_target,
                                   value_bins=value_bin_families() if cfg.value_bins else ())
        state = self.store.get_json("scheduler_state")
        if state:
            self.scheduler.restore(state)
        self.exhausted: set[str] = set()
        self._dup_streak: Counter[str] = Counter()
        self.next_test_no = self.store.max_test_no() + 1

    def _make_llm_mutators(self) -> dict[str, Any]:
        from nnforge.core.llm import LLMClient
        from nnforge.core.settings import load_settings
        from nnforge.mutators.examples import ExampleBank
        from nnforge.mutators.llm import llm_mutators

        settings = load_settings(llm_provider="openai")
        # The replies live in DIR's store (table llm_cache): a resumed campaign asks nothing twice.
        client = self.llm_client = LLMClient.from_settings(settings, cache=self.store.llm_cache())
        bank = ExampleBank(settings.llm_cache_dir)
        return llm_mutators(client, bank=bank, max_repairs=settings.llm_max_repairs)

    # -- time -----------------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.elapsed_base + (time.monotonic() - self.run_t0)

    # -- signals --------------------------------------------------------------------------------------------
    def request_stop(self, why: str = "") -> None:
        if not self._stop.is_set():
            self._stop.set()
            self.display.event(f"stopping{': ' + why if why else ''}; tests in flight get a few seconds "
                               f"(Ctrl-C again to stop at once; --resume continues)")

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._interrupts += 1
        if self._interrupts > 1:
            raise KeyboardInterrupt
        self.request_stop(signal.Signals(signum).name)

    # -- making tests -----------------------------------------------------------------------------------------
    def _next_test(self) -> tuple[QueuedTest, TestCase] | None:
        arm = self.scheduler.pick(exclude=self.exhausted)
        source = self.sources[arm.source]
        t0 = time.perf_counter()
        try:
            seed_case, seed_no = source.draw(arm.target, self.rng)
            if self.cfg.pack > 1 and not arm.mutates and arm.source == "generator" and not is_onnx_target(arm.target):
                # more programs in the same compilation (a mutant rewrites one program: never packed)
                seed_case = pack_cases([seed_case] + [source.draw(arm.target, self.rng)[0]
                                                      for _ in range(self.cfg.pack - 1)])
        except Exception as e:
            if _is_disk_full(e):
                raise
            self.counters.generate_failed += 1
            self.display.event(f"seed source {arm.source} failed: {type(e).__name__}: {e}")
            return None
        t_gen = time.perf_counter() - t0
        case, mutator_name, t_mut = seed_case, None, 0.0
        if arm.mutates:
            t1 = time.perf_counter()
            mutant = self._mutate(seed_case, arm.category, arm.target)
            t_mut = time.perf_counter() - t1
            if mutant is None:
                self.counters.mutate_failed += 1
                self.scheduler.reward(arm, 0.0)  # the arm could not make a test from this seed
                self.scheduler.missed(arm)
                return None
            case = mutant
            mutator_name = str(mutant.meta.get("mutator") or arm.category)
            if self.cfg.pack_mutants > 1 and not is_onnx_target(arm.target) and packable(mutant) is None:
                t2 = time.perf_counter()
                case = self._mutant_pack(mutant, arm, source)
                t_mut += time.perf_counter() - t2
        if (self.cfg.backward_share > 0 and not is_onnx_target(arm.target) and not any(c.backward for c in case.calls)
                and self.rng.random() < self.cfg.backward_share and differentiable(case.program)):
            case = case.with_(calls=tuple(c.with_backward() for c in case.calls))
        if self.store.has_test(case.case_id, arm.target):
            self.counters.duplicates += 1
            self._dup_streak[arm.key] += 1
            if self._dup_streak[arm.key] >= EXHAUSTED_AFTER:
                self.exhausted.add(arm.key)
            return None
        self._dup_streak[arm.key] = 0
        family = self.scheduler.pick_bin() if case.inputs is None else None
        if family is not None:  # the worker draws the values from it (oracle/value_bins.py)
            case = case.with_(meta={**case.meta, "value_bin": family})
        folder = self.out / CASES_SUBDIR / case.case_id
        case.save(folder)  # before the test runs: a kill loses only the verdict
        test = QueuedTest(test_no=self.next_test_no, case_id=case.case_id, target=arm.target, folder=str(folder),
                          source=arm.source, mutator=mutator_name, category=arm.category, arm=arm.key,
                          seed_no=seed_no, t_generate=round(t_gen, 4), t_mutate=round(t_mut, 4))
        self.store.enqueue(test)
        self.scheduler.made(arm)
        self.next_test_no += 1
        self.counters.made += 1
        return test, case

    def _mutant_pack(self, first: TestCase, arm: Arm, source: Any) -> TestCase:
        """`first` and up to `pack_mutants - 1` more single-call mutants of the arm's category, on
        seeds of their own, in one test (mutators/pack.py); `first` alone when no other packs with it."""
        members = [first]
        for _ in range(2 * (self.cfg.pack_mutants - 1)):
            if len(members) >= self.cfg.pack_mutants:
                break
            try:
                other = self._mutate(source.draw(arm.target, self.rng)[0], arm.category, arm.target)
            except Exception as e:
                if _is_disk_full(e):
                    raise
                continue
            if other is not None and other.calls == first.calls and packable(other) is None:
                members.append(other)
        if len(members) == 1:
            return first
        try:
            return pack_mutants(members)
        except NotPackable:  # two members import different things under one name
            return first

    def _mutate(self, case: TestCase, category: str, target: str) -> TestCase | None:
        """A mutant of `case` in `category` that the target's export gate (if it has one) lets through."""
        if self.llm_background is not None and category in self.llm_background:
            # the LLM works on its own thread: take a mutant it finished, else an offline one now
            mutant = self.llm_background.take(category, case, self.rng)
            if mutant is not None and self._admits(mutant, target):
                return mutant
        probe = self._probe()
        options = [m for m in self.offline.values() if m.category == category]
        self.rng.shuffle(options)
        for m in options:
            try:
                if not m.applicable(case):
                    continue
                mutant = m.mutate(case, self.rng, probe if m.uses_probe else None)
            except Exception:  # a mutator bug must not stop the campaign
                continue
            if mutant is not None and self._admits(mutant, target):
                return mutant
        return None

    def _admits(self, case: TestCase, target: str) -> bool:
        """Whether `case` passes `target`'s ONNX export gate, asked on the probe worker before it is a
        test (agent/export_gate.py); targets without such a gate admit everything."""
        from nnforge.agent.export_gate import GateCheck, export_is_gate

        if not self.cfg.gate_check or not export_is_gate(target):
            return True
        if self.gate is None:
            self.gate = GateCheck(lambda *a, **k: self._probe_pool_call()(*a, **k))
        return self.gate(case)

    def _inductor_cache_dir(self) -> str:
        """The campaign's own compile cache (no other run's kernels, none of its kernels for
        another run), unless the user shares one on purpose (NNFORGE_INDUCTOR_CACHE_DIR)."""
        from nnforge.core.settings import load_settings
        from nnforge.oracle.compile_cache import fresh_compile_cache

        shared = load_settings().inductor_cache_dir
        if shared:
            return shared
        own = self.out / CAMPAIGN_CACHE_DIR
        if not own.is_dir():
            fresh_compile_cache(own)
        return str(own)

    def _probe_pool_call(self) -> Callable[..., Any]:
        if self._probe_pool is None:
            from nnforge.oracle.sandbox import WorkerPool

            self._probe_pool = WorkerPool(size=1, timeout_s=PROBE_TIMEOUT_S, memory_mb=self.cfg.memory_mb,
                                          inductor_cache_dir=self._inductor_cache_dir(), protect=(str(self.out),),
                                          warm=("eager",))
        return self._probe_pool.call

    def _probe(self) -> Callable[[TestCase], bool]:
        """Mutators that must know whether a candidate runs in eager ask a worker of its own: on the
        test workers a probe would wait behind a compile of a minute, and the loop with it."""
        from nnforge.mutators.validate import eager_probe

        return eager_probe(self._probe_pool_call(), timeout_s=PROBE_TIMEOUT_S)

    def _load_pending(self) -> deque[tuple[QueuedTest, TestCase]]:
        out: deque[tuple[QueuedTest, TestCase]] = deque()
        for test in self.store.pending():
            try:
                case = TestCase.load(test.folder)
            except Exception as e:
                self.counters.lost += 1
                self.display.event(f"test {test.test_no} ({test.folder}) cannot be rerun: {type(e).__name__}: {e}")
                continue
            out.append((test, case))
        if out:
            self.counters.requeued = len(out)
            self.display.event(f"resuming: {len(out)} queued test(s) without a verdict (in flight, or made ahead) "
                               f"run again")
        return out

    # -- judging ----------------------------------------------------------------------------------------------
    def _handle(self, test: QueuedTest, case: TestCase, done: ExecResult) -> None:
        result = done.result
        verdict = next((v for v in result.verdicts if v.target == test.target), result.verdicts[0])
        behaviours = behaviours_of(result, case)
        new = self.scheduler.novel(behaviours)
        if self.triage is not None:  # a bug pays when triage makes it a new cluster (_pay_new_clusters)
            new = [b for b in new if not b.startswith("bug:")]
        if self.coverage_map is not None and getattr(result, "coverage", None):
            fresh = self.coverage_map.add(result.coverage)
            if fresh:
                new.append(f"cov:{fresh}")  # not remembered as seen: every new line is news
        t_search = float(result.timings.get("prepare_s", 0.0))
        drawn = _requested_bin(case)
        finding_id = self.store.record_verdict(test, verdict, t_search=round(t_search, 4),
                                               t_oracle=round(max(done.wall_s - t_search, 0.0), 4),
                                               elapsed_s=round(self.elapsed(), 2), novel=bool(new),
                                               compiler=compiler_record(result, test.target),
                                               pkey=root_cause_key(verdict, case) if verdict.is_bug else None,
                                               value_bin=drawn, value_bin_kept=_bin_kept(case, verdict),
                                               calls_kind=calls_kind(case), programs=programs_in(case),
                                               t_worker=_worker_seconds(result))
        self.store.set_meta("campaign_elapsed_s", f"{self.elapsed():.2f}")
        arm = Arm.from_key(test.arm)
        self.scheduler.reward(arm, 1.0 if new else 0.0)
        self.scheduler.reward_bin(drawn, 1.0 if new else 0.0)
        self.scheduler.timed(arm, done.wall_s)
        if new:
            self.counters.novel += 1
            self.last_new = time.monotonic()
        self.tests_this_run += 1
        self._save_case_result(test, result, verdict)
        if finding_id is not None:
            self.display.event(f"finding {finding_id}: {verdict.symptom.value} on {verdict.target} "
                               f"(rung {verdict.rung or '-'}, {test.category}"
                               f"{'/' + test.mutator if test.mutator else ''}) case {test.folder}")
            if self.triage is not None:
                self.triage.wake()

    def _pay_new_clusters(self) -> None:
        """The scheduler is paid per root cause: the arm whose finding triage made a new cluster
        of earns its reward now; a finding that joined a known cluster earns nothing."""
        triage = self.triage
        while triage is not None and triage.new_clusters:
            arm = self.store.arm_of_finding(triage.new_clusters.pop(0))
            if arm:
                self.scheduler.credit(Arm.from_key(arm))
                self.counters.novel += 1
                self.last_new = time.monotonic()

    def _save_case_result(self, test: QueuedTest, result: Any, verdict: Verdict) -> None:
        folder = Path(test.folder)
        if result.values_chosen and result.case.inputs is not None:
            result.case.save(folder)
        path = folder / "verdicts.json"
        items: list[dict[str, Any]] = []
        if path.is_file():
            try:
                old = json.loads(path.read_text())
                items = [v for v in (old if isinstance(old, list) else []) if v.get("target") != verdict.target]
            except (ValueError, AttributeError):
                items = []
        items.append(verdict.to_json())
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(items, indent=2, default=str))
        os.replace(tmp, path)

    # -- stats and status -------------------------------------------------------------------------------------
    def _health(self) -> dict[str, Any]:
        h = dict(self.executor.health())
        for k, base in self.health_base.items():
            if isinstance(h.get(k), (int, float)):
                h[k] = round(h[k] + base, 2) if isinstance(h[k], float) else h[k] + base
        return h

    def _snapshot(self, in_flight: int) -> StatusSnapshot:
        tests = self.store.tests_count()
        return StatusSnapshot(
            elapsed_s=self.elapsed(), budget_s=self.cfg.budget_s, tests=tests, tests_per_min=self._rate(tests),
            in_flight=in_flight, verdicts=self.store.verdict_counts(), findings=self.store.findings_count(),
            clusters=self.store.clusters_count(), latest_finding=self.store.latest_finding(),
            last_new_s=None if self.last_new is None else time.monotonic() - self.last_new,
            health=self._health(), top_arms=self.scheduler.summary(6),
            triage=self.triage.describe() if self.triage is not None else "off (run `nnforge triage DIR`)",
            llm=self._llm_line())

    def _llm_stats(self) -> dict[str, Any] | None:
        if self.llm_background is None:
            return None
        stats = dict(self.llm_client.stats()) if self.llm_client is not None else {}
        return {**stats, **dict(self.llm_background.counts), "pending": self.llm_background.pending(),
                "last_error": self.llm_background.last_error,
                "unavailable": self.llm_client.unavailable_reason if self.llm_client is not None else ""}

    def _llm_line(self) -> str:
        s = self._llm_stats()
        if s is None:
            return ""
        down = f", offline: {s['unavailable']}" if s.get("unavailable") else ""
        return (f"calls {s.get('calls', 0)} (cached {s.get('cache_hits', 0)}), tokens {s.get('tokens', 0)}, "
                f"failed {s.get('failures', 0)}, mutants {s.get('mutants', 0)}, offline fallbacks "
                f"{s.get('fallbacks', 0)}{down}")

    def _rate(self, tests: int) -> float:
        now = self.elapsed()
        self._rate_window.append((now, tests))
        while len(self._rate_window) > 2 and now - self._rate_window[0][0] > 120:
            self._rate_window.popleft()
        t0, n0 = self._rate_window[0]
        if now - t0 >= 20:
            return 60.0 * (tests - n0) / (now - t0)
        run_min = (time.monotonic() - self.run_t0) / 60
        return self.tests_this_run / run_min if run_min > 0 else 0.0

    def _write_stats(self, in_flight: int) -> None:
        snap = self._snapshot(in_flight)
        h = snap.health
        counts = snap.verdicts
        invalid = sum(c.get("invalid", 0) for c in counts.values())
        row = {"ts": time.time(), "elapsed_s": round(snap.elapsed_s, 2), "tests": snap.tests,
               "tests_per_min": round(snap.tests_per_min, 3), "bugs": snap.findings, "clusters": snap.clusters,
               "invalid": invalid, "worker_restarts": h.get("restarts", 0), "timeouts": h.get("timeouts", 0),
               "segfaults": h.get("segfaults", 0), "rss_mb": h.get("rss_mb", 0.0),
               "covered_lines": self.coverage_map.covered_lines if self.coverage_map is not None else None,
               "json": {"verdicts": counts, "health": h, "in_flight": in_flight, "tests_this_run": self.tests_this_run,
                        "counters": asdict(self.counters), "top_arms": snap.top_arms, "workers": self.cfg.workers,
                        "executor": self.cfg.executor, "run": len(self.runs), "llm": self._llm_stats()}}
        self.store.add_stats(row)
        if self.coverage_map is not None:
            self.scheduler.covered_lines = self.coverage_map.covered_lines
            save_coverage_map(self.out, self.coverage_map)
        self.store.set_json("scheduler_state", self.scheduler.to_json())
        self._say_triage_outlook()
        self.store.set_meta("campaign_elapsed_s", f"{self.elapsed():.2f}")
        self.display.update(snap, force=True)

    def _say_triage_outlook(self) -> None:
        """A backlog that will not drain before the budget ends is said as it grows (the live
        panel, the event log and summary.md), with the estimate; so is its draining."""
        triage = self.triage
        if triage is None:
            return
        left = self.cfg.budget_s - self.elapsed()
        drain = triage.drain_s()
        late = drain is not None and drain > max(left, 0.0) and triage.backlog > 0
        said = getattr(self, "_outlook_said", 0)
        if late and triage.backlog >= max(1, 2 * said):
            self._outlook_said = triage.backlog
            line = (f"{triage.outlook()}: more than the {max(left, 0) / 60:.1f} min of budget left; "
                    f"the rest waits for the triage after the budget or `nnforge triage {self.out}`")
            self.display.event(f"triage backlog: {line}")
            self.store.set_meta("triage_outlook", line)
        elif said and not triage.backlog:
            self._outlook_said = 0
            self.store.set_meta("triage_outlook", f"the backlog drained ({self.elapsed() / 60:.1f} min in)")

    def _write_reports(self) -> dict[str, str]:
        return write_reports(self.out, self.store, self.display.event)

    # -- the loop ---------------------------------------------------------------------------------------------
    def run(self) -> CampaignOutcome:
        self._open()
        self.run_t0 = time.monotonic()
        self.tests_this_run = 0
        self.last_new: float | None = None
        self._rate_window: deque[tuple[float, int]] = deque()
        self.triage: TriageGroup | None = None
        if self.cfg.coverage:
            self.coverage_map = load_coverage_map(self.out)
        last = self.store.stats_rows()[-1:] if self.resuming else []
        prev = last[0]["json"].get("health", {}) if last else {}
        self.health_base = {k: int(prev.get(k, 0)) for k in ("restarts", "timeouts", "segfaults", "ooms", "calls")}
        self.health_base["busy_s"] = float(prev.get("busy_s", 0.0))  # worker seconds accumulate across runs
        reason = "budget"
        installed = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                installed.append((sig, signal.signal(sig, self._on_signal)))
        self.display.start()
        try:
            self.executor = make_executor(self.cfg.executor, ExecutorConfig(
                workers=self.cfg.workers, timeout_s=self.cfg.timeout_s, memory_mb=self.cfg.memory_mb,
                value_search_budget_ms=self.cfg.value_search_budget_ms, inductor_cache_dir=self._inductor_cache_dir(),
                coverage=self.cfg.coverage, protect=(str(self.out),), warm=tuple(self.cfg.targets)),
                address=self.cfg.address, ray_init_kwargs=self.ray_init_kwargs)
            try:
                if self.cfg.triage:
                    self.triage = TriageGroup(self.out, self.executor.local_pool(), self.cfg, self.display.event,
                                              most=self.cfg.triage_max_workers or self.executor.size,
                                              time_left=lambda: self.cfg.budget_s - self.elapsed())
                    self.triage.start()
                self.display.event(f"campaign {'resumed' if self.resuming else 'started'} in {self.out}: "
                                   f"{self.cfg.budget_s:.0f} s budget ({self.elapsed_base:.0f} s used), targets "
                                   f"{','.join(self.cfg.targets)}, {self.cfg.workers} {self.cfg.executor} workers")
                pool = self.executor.local_pool()
                if pool is not None and getattr(pool, "isolation", None) is not None:
                    isolation = pool.isolation.summary()
                    self.store.set_meta("sandbox", isolation)
                    self.display.event(isolation)
                torch_targets = not all(map(is_onnx_target, self.cfg.targets))
                if pool is not None and getattr(pool, "kernel_unit", None) and torch_targets:
                    self.store.set_meta("inductor_kernels", kernel_unit.DESCRIPTIONS.get(pool.kernel_unit, pool.kernel_unit))
                self._load_export_table(pool)
                reason = self._loop()
                if reason == "budget":
                    self._triage_after_budget()
            finally:
                if self.triage is not None:
                    self.triage.stop(wait_s=3.0)
                if self.llm_background is not None:
                    self.llm_background.close()  # a call still hanging is abandoned, not awaited
                self.executor.close()
                if self._probe_pool is not None:
                    self._probe_pool.close()
                if self.gate is not None:
                    self.store.set_meta("export_gate", self.gate.line())
                if self.triage is not None:
                    self.triage.stop(wait_s=10.0)
        except KeyboardInterrupt:
            reason = "interrupted"
        finally:
            for sig, old in installed:
                signal.signal(sig, old)
            outcome = self._finish(reason)
            self.display.stop()
        return outcome

    def _load_export_table(self, pool: Any) -> None:
        """For ONNX targets: what the installed export path carries (agent/export_probe.py), so their
        generated tests hold only instances it was not seen to refuse. Probing, once per set of
        versions, does not count against the budget."""
        from nnforge.oracle.backend import parse_target

        onnx_targets = [t for t in self.cfg.targets if is_onnx_target(t)]
        source = self.sources.get("generator")
        if not onnx_targets or source is None:
            return
        from nnforge.agent.export_probe import export_table_for
        from nnforge.core.settings import load_settings
        from nnforge.oracle.sandbox import WorkerPool

        t0 = time.monotonic()
        own = None
        if pool is None:  # Ray: probe on a local pool of its own
            own = pool = WorkerPool(size=self.cfg.workers, timeout_s=self.cfg.timeout_s, memory_mb=self.cfg.memory_mb,
                                    inductor_cache_dir=self._inductor_cache_dir(), protect=(str(self.out),))
        try:
            table = export_table_for(load_settings().export_table_dir, pool.call, self.cfg.workers, self.display.event)
        except Exception as e:  # no table: ONNX tests are generated as before, and say so
            self.display.event(f"export table unavailable ({type(e).__name__}: {e}); ONNX tests use the specs' claims")
            return
        finally:
            if own is not None:
                own.close()
        parts = []
        for target in onnx_targets:
            name = parse_target(target).name
            source.blocked[target] = table.blocked_for_target(name)
            parts.append(f"{name} {len(source.blocked[target])}")
        line = (f"export table of {len(table.probes)} probes: operator instances blocked as the path refuses "
                f"them: {', '.join(parts)}")
        self.store.set_meta("export_table", line)
        self.display.event(line)
        self.run_t0 += time.monotonic() - t0  # the budget is for tests

    def _loop(self) -> str:
        pending = self._load_pending()
        in_flight: dict[Future[ExecResult], tuple[QueuedTest, TestCase]] = {}
        next_stats = time.monotonic()
        next_report = time.monotonic() + self.cfg.report_every_s
        drain_until: float | None = None
        reason = "budget"
        try:
            while True:
                slots = self._test_slots()
                accepting = slots > 0
                reserve = (not accepting and not self._stop.is_set() and self.elapsed() < self.cfg.budget_s
                           and drain_until is None)
                if reserve and not in_flight:  # the triage reserve: triage alone, until its backlog is done
                    time.sleep(0.5)
                    if time.monotonic() >= next_stats:
                        self._write_stats(0)
                        next_stats = time.monotonic() + self.cfg.stats_every_s
                    continue
                if accepting:
                    draws = 0
                    while len(in_flight) < slots and draws < MAX_DRAWS_PER_SLOT:
                        item = pending.popleft() if pending else self._next_test()
                        draws += 1
                        if item is not None:
                            in_flight[self.executor.submit(item[1], item[0].target)] = item
                    if len(in_flight) >= slots and not pending:
                        # every worker is busy: make the next test now (generation, mutation, its
                        # folder and queue row), so the first worker to finish starts it at once
                        # instead of idling while the parent makes it
                        item = self._next_test()
                        if item is not None:
                            pending.append(item)
                elif drain_until is None and not reserve:
                    reason = "interrupted" if self._stop.is_set() else "budget"
                    grace = 3.0 if self._stop.is_set() else self.cfg.drain_s
                    drain_until = time.monotonic() + grace
                    if in_flight:
                        self.display.event(f"{'stopping' if self._stop.is_set() else 'budget spent'}: waiting up to "
                                           f"{grace:.0f} s for {len(in_flight)} test(s) in flight")
                if not in_flight and not accepting and not reserve:
                    break
                if drain_until is not None and time.monotonic() > drain_until:
                    if in_flight:
                        self.display.event(f"{len(in_flight)} test(s) still in flight stay queued for --resume")
                    break
                if in_flight:
                    done, _ = wait(list(in_flight), timeout=0.5, return_when=FIRST_COMPLETED)
                else:
                    done = set()
                    time.sleep(0.2)
                for fut in done:
                    test, case = in_flight.pop(fut)
                    try:
                        exec_result = fut.result()
                    except Exception as e:
                        if self._stop.is_set() or drain_until is not None:
                            continue
                        self.counters.executor_errors += 1
                        self.display.event(f"test {test.test_no} failed in the executor ({type(e).__name__}: {e}); "
                                           f"it stays queued for --resume")
                        continue
                    self._handle(test, case, exec_result)
                self._pay_new_clusters()
                now = time.monotonic()
                if now >= next_stats:
                    self._write_stats(len(in_flight))
                    next_stats = now + self.cfg.stats_every_s
                elif self.display.live_mode:
                    self.display.update(self._snapshot(len(in_flight)))
                if now >= next_report:
                    self._write_reports()
                    next_report = now + self.cfg.report_every_s
        except Exception as e:
            if _is_disk_full(e):
                self.display.event(f"the disk holding {self.out} is full ({e}); the campaign stops here, "
                                   f"everything recorded so far is kept: free space and --resume")
                return "disk full"
            raise
        return reason

    def _test_slots(self) -> int:
        """How many tests may be in flight now: 0 once the budget is spent or a stop was asked for;
        else the workers triage does not want. Triage's first worker shares with the tests (it
        holds one only while it reduces); while findings wait for a reduction triage wants more
        (agent/triage_thread.py TriageGroup.wanted), up to all of them, and testing resumes once
        the queue has drained. Within the triage reserve at the budget's end, every worker triage
        wants is kept from testing, its first one too (so that the morning list is complete)."""
        if self._stop.is_set() or self.elapsed() >= self.cfg.budget_s:
            return 0
        size = self.executor.size
        triage = self.triage
        if triage is None:
            return size
        local = self.executor.local_pool() is not None  # on Ray, triage has workers of its own
        if self._in_triage_reserve():
            spare = max(0, size - triage.wanted()) if local else size
            if not getattr(self, "_reserve_said", False):
                self._reserve_said = True
                goes_on = f"tests go on on {spare} of {size} workers" if spare else "no new tests"
                self.display.event(f"{self.cfg.budget_s - self.elapsed():.0f} s left: triage finishes "
                                   f"{triage.backlog} finding(s); {goes_on}")
            return spare
        busy = triage.busy() if local else 0
        if busy <= triage.base:
            self._triage_took = 0
            return size
        if busy > getattr(self, "_triage_took", 0):
            self.display.event(f"triage: {triage.outlook()}; it takes {min(busy, size)} of {size} workers "
                               f"until the queue drains")
        self._triage_took = busy
        return max(0, size - busy)

    def _in_triage_reserve(self) -> bool:
        """Findings wait for a reduction and the budget's end is within the triage reserve."""
        return (self.triage is not None and self.triage.is_alive() and bool(self.triage.backlog or self.triage.current)
                and self.cfg.budget_s - self.elapsed() <= self.cfg.triage_reserve_s)

    def _triage_after_budget(self) -> None:
        """A test the triage reserve let run can record a finding in the budget's last seconds, with
        no time left to reduce it; it would wait for `nnforge triage` and miss the morning list (a
        stop-35 campaign's last finding was a bug of its own). Triage finishes the findings that
        need a reduction, for at most `triage_after_s` (the triage reserve unless
        NNFORGE_TRIAGE_AFTER_BUDGET_S says otherwise); Ctrl-C stops it, and what is left still waits."""
        from nnforge.triage.pipeline import attach_target

        triage = self.triage
        cap = self.cfg.triage_after_s
        if triage is None or not triage.is_alive() or cap <= 0:
            return
        per_key = self.cfg.triage_per_key
        needs = {f.finding_id for f in self.store.new_findings()
                 if not (f.pkey and attach_target(self.store, f, f.pkey, per_key) is not None)}
        if not needs:
            return
        self.display.event(f"budget spent: triage finishes {len(needs)} finding(s) recorded at its end "
                           f"(at most {cap:.0f} s more; Ctrl-C leaves them for `nnforge triage`)")
        triage.wake()
        deadline = time.monotonic() + cap
        while not self._stop.is_set() and triage.is_alive() and time.monotonic() < deadline:
            # a finding leaves the new ones when its cluster is chosen, before its repro check runs:
            # wait for that too, or the cluster stays "unchecked" and off the morning list
            if not needs & {f.finding_id for f in self.store.new_findings()} and not triage.current:
                return
            time.sleep(0.5)
        left = len(needs & {f.finding_id for f in self.store.new_findings()})
        if left:
            self.display.event(f"{left} finding(s) still wait for triage: `nnforge triage {self.out}`")

    def _finish(self, reason: str) -> CampaignOutcome:
        files: dict[str, str] = {}
        health: dict[str, Any] = {}
        try:
            if self.cfg.triage:
                attached = attach_waiting(self.store, self.cfg.triage_per_key)
                if attached:
                    self.display.event(f"{attached} waiting finding(s) attached to their key's cluster")
            if hasattr(self, "executor"):
                health = self._health()
                self._write_stats(0)
            self.store.set_meta("campaign_elapsed_s", f"{self.elapsed():.2f}")
            self.store.set_json("scheduler_state", self.scheduler.to_json())
            self.runs[-1].update({"ended": time.time(), "reason": reason, "tests": self.tests_this_run,
                                  "elapsed_at_end": round(self.elapsed(), 2)})
            self.store.set_json("campaign_runs", self.runs)
            self.store.set_meta("campaign_status", "finished" if reason == "budget" else "interrupted")
            files = self._write_reports()
        except Exception as e:
            self.display.event(f"could not finish the store cleanly: {type(e).__name__}: {e}")
        outcome = CampaignOutcome(folder=self.out, reason=reason, tests_this_run=self.tests_this_run,
                                  tests_total=self.store.tests_count(), elapsed_s=self.elapsed(),
                                  run_s=time.monotonic() - self.run_t0, findings=self.store.findings_count(),
                                  clusters=self.store.clusters_count(), health=health, files=files)
        self.store.close()
        self.lock.release()
        return outcome

    # -- constructors ----------------------------------------------------------------------------------------
    @classmethod
    def resume(cls, folder: str | os.PathLike, *, budget_s: float | None = None,
               display: StatusDisplay | None = None, overrides: dict[str, Any] | None = None,
               ray_init_kwargs: dict[str, Any] | None = None) -> "Campaign":
        """The campaign stored in `folder`, to continue (`budget_s`: a new total budget)."""
        c = cls(CampaignConfig(out=str(folder), budget_s=budget_s or 1.0), resume=True, budget_override_s=budget_s,
                display=display, ray_init_kwargs=ray_init_kwargs)
        c._resume_overrides = dict(overrides or {})
        return c


def _check_targets(targets: tuple[str, ...]) -> None:
    from nnforge.oracle.backend import parse_target

    if not targets:
        raise CampaignSetupError("no targets: --targets inductor,ort,tvm")
    for t in targets:
        try:
            parse_target(t)
        except ValueError as e:
            raise CampaignSetupError(str(e)) from e




