"""Benchmark: an NNForge campaign beside NNSmith HEAD's own fuzzing loop, on torch.compile (Inductor).

Two runs on the same machine, one after the other (never at the same time, so they never compete
for cores), each for the same loop budget (--minutes; --nnsmith-minutes for NNSmith's):

1. NNForge: `nnforge campaign --targets inductor --nodes 10 --workers 2 --llm none --plain
   --budget B` (plus `--pack K`, `--mutant-share P`, `--backward-share S` and `--no-triage` when
   given, `--coverage` when asked: NNSmith's side has no coverage figure). Its detailed figures
   follow (stages, clusters, worker RSS over time, ...), read from its store, with where its
   workers' seconds went: per kind of test (plain programs, mutants, each with or without a
   backward) and on no test at all (triage's reductions, the triage reserve, start-up). NNSmith's
   loop runs plain programs only and triages nothing, so that split says what the ratio compares.
2. NNSmith HEAD, unmodified, through its own command line (hydra):
   `python -m nnsmith.cli.fuzz model.type=torch backend.type=pt2 backend.target=cpu
   mgen.max_nodes=10 fuzz.time=Bs fuzz.root=... hydra.run.dir=...` (pt2's default backend is
   Inductor; --nnsmith-override KEY=VALUE adds hydra overrides). It runs in a virtualenv of its
   own, bench/.nnsmith-head/venv (git-ignored), made on first use: HEAD of the bare mirror
   (--nnsmith-mirror, default $NNSMITH_HEAD_MIRROR or /work/.mirror/ise-uiuc+nnsmith/repo) is
   exported with `git archive` to bench/.nnsmith-head/src, `pip install torch==<this torch>`
   goes first, then nnsmith from that folder with its core requirements (z3-solver, hydra-core,
   hydra-colorlog, multipledispatch, appdirs, numpy) under a constraints file that pins torch,
   so pip never replaces it. The venv is remade when the mirror's HEAD moves. Its topset cache
   (the per-operator dtype test nnsmith runs on the backend before its first test; built once,
   then loaded) and Inductor cache live in bench/.nnsmith-head/ too, as NNForge's Inductor cache
   lives in ~/.cache/nnforge. If the mirror is missing, the install fails or nnsmith dies, the
   benchmark says exactly why and still prints NNForge's figures.

How each figure is measured, for both tools alike:
- tests: completed tests. NNSmith: its loop logs `Timing: gen: ..., eval: ...` once per completed
  test (after generation, compile and comparison, bug or not; a model it fails to make is not a
  test); the benchmark reads its stdout line by line and timestamps each, and cross-checks the
  count against the hydra log (fuzz.log). NNForge: rows of the store's `tests` table, their
  `created` time. Where the store has the `programs` column (`--pack K`: K generator programs in
  one test), NNForge's rates count programs, not tests, and the table says so; an NNSmith test is
  one model.
- tests/min: over the steady part, from the first completed test to the last; "incl. start-up"
  divides by the time from process launch to the last test instead. Both tools start their loop
  budget after their start-up, so each process runs longer than B.
- per core: NNSmith runs its loop in 1 process, NNForge in --workers sandboxed workers; the table
  also gives the cores each process tree kept busy on average (CPU seconds / wall seconds: the
  rusage of the reaped tree, or the /proc samples where those saw more; a lower bound), since
  torch and Inductor's C++ compiles may use more than one, and another load on the machine
  fewer (the table gives the load average at each launch and end).
- time to first test: from process launch to its first completed test (NNSmith's includes its
  topset dtype test when the cache is cold; the table says whether it was).
- peak RSS: the summed RSS of the process tree (the process and all its descendants), sampled
  every second from /proc (shared pages count once per process: an upper bound). When it passes
  --mem-cap-gb (default 6) the whole tree is killed and the table says when; the figures are
  those up to the kill. A process still running --startup-allowance minutes past its budget is
  killed too.

    .venv/bin/python bench/campaign.py                                   # 30 + 30 minutes
    .venv/bin/python bench/campaign.py --minutes 2 --nnsmith-minutes 2   # a short check
    .venv/bin/python bench/campaign.py --minutes 10 --pack 4             # NNForge packs 4 programs a test
    .venv/bin/python bench/campaign.py --minutes 10 --mutant-share 0 --backward-share 0 --no-triage
                                                         # NNForge on plain programs only, as NNSmith's loop
    .venv/bin/python bench/campaign.py --setup-only                      # only make NNSmith HEAD's venv
    .venv/bin/python bench/campaign.py --only nnsmith --nnsmith-minutes 3
    .venv/bin/python bench/campaign.py --report-only DIR                 # the figures of a finished campaign
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nnforge.agent.report_data import CampaignView, fmt_duration, load_view  # noqa: E402
from nnforge.agent.store import STORE_FILE, StoreReader  # noqa: E402

NNSMITH_HOME = ROOT / "bench" / ".nnsmith-head"
DEFAULT_MIRROR = os.environ.get("NNSMITH_HEAD_MIRROR", "/work/.mirror/ise-uiuc+nnsmith/repo")
# nnsmith's requirements/core.txt at HEAD (its setup.cfg's install_requires): what its fuzz loop imports.
NNSMITH_CORE_REQS = ["z3-solver>=4.11.0", "hydra-core>=1.2.0", "hydra-colorlog>=1.2.0", "multipledispatch>=0.6.0",
                     "appdirs>=1.4.4", "numpy"]
# Patches applied to the exported copy of NNSmith HEAD (never to the mirror), printed when applied. None is
# needed with torch 2.13: keep it that way unless HEAD cannot run at all without one.
NNSMITH_PATCHES: list[tuple[str, str]] = []  # (why, unified diff against the exported tree)


# -- process trees: RSS and CPU sampled from /proc, a memory cap ----------------------------------------------------
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, int, float]]:
    """pid -> (ppid, rss bytes, cpu seconds) of every process we can read."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()  # fields after "pid (comm)"
        try:
            ppid, utime, stime, rss_pages = int(rest[1]), int(rest[11]), int(rest[12]), int(rest[21])
        except (IndexError, ValueError):
            continue
        out[int(name)] = (ppid, rss_pages * _PAGE, (utime + stime) / _TICK)
    return out


def tree_pids(root: int, table: dict[int, tuple[int, int, float]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in seen:
            seen.append(pid)
            todo.extend(children.get(pid, ()))
    return seen


def kill_tree(root: int) -> None:
    """SIGKILL the process, its process group and every descendant (sandboxed workers may sit in
    sessions of their own)."""
    pids = tree_pids(root, _proc_table())
    try:
        os.killpg(root, signal.SIGKILL)  # started with start_new_session: its group is its pid
    except OSError:
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@dataclass
class TreeSample:
    peak_rss: int = 0
    peak_at_s: float = 0.0
    cpu_s: float = 0.0
    capped_at_s: float | None = None  # launch-relative time the cap killed the tree
    capped_rss: int = 0
    series: list[tuple[float, int]] = field(default_factory=list)  # (s since launch, tree RSS)


class TreeSampler(threading.Thread):
    """Every second: the summed RSS and CPU time of `root`'s tree; kills the tree past `cap` bytes."""

    def __init__(self, root: int, t0: float, cap: int):
        super().__init__(daemon=True)
        self.root, self.t0, self.cap = root, t0, cap
        self.s = TreeSample()
        self._cpu: dict[int, float] = {}  # per pid, the most CPU seen (exited processes keep theirs)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            table = _proc_table()
            pids = tree_pids(self.root, table)
            if not pids:
                break
            rss = sum(table[p][1] for p in pids)
            for p in pids:
                self._cpu[p] = max(self._cpu.get(p, 0.0), table[p][2])
            self.s.cpu_s = sum(self._cpu.values())
            now = time.monotonic() - self.t0
            self.s.series.append((now, rss))
            if rss > self.s.peak_rss:
                self.s.peak_rss, self.s.peak_at_s = rss, now
            if rss > self.cap and self.s.capped_at_s is None:
                self.s.capped_at_s, self.s.capped_rss = now, rss
                kill_tree(self.root)
                break
            self._halt.wait(1.0)

    def stop(self) -> None:
        self._halt.set()


@dataclass
class Launch:
    rc: int | None
    wall_s: float
    t0_epoch: float  # time.time() at launch
    tree: TreeSample
    killed_over_time: bool
    log: Path
    load: tuple[float, float]  # the machine's 1-minute load average at launch and at the end


def launch(cmd: list[str], *, env: dict[str, str], log: Path, cap_bytes: int, hard_limit_s: float,
           on_line=None, cwd: Path | None = None) -> Launch:
    """Run `cmd` in a session of its own, its output to `log` (each line also to on_line(s since
    launch, line)), its tree sampled every second; killed past the cap or `hard_limit_s`."""
    print("$ " + " ".join(cmd), flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    t0_epoch, t0 = time.time(), time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    with open(log, "w", buffering=1) as logf:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, cwd=cwd, start_new_session=True, text=True, errors="replace", bufsize=1)
        sampler = TreeSampler(p.pid, t0, cap_bytes)
        sampler.start()

        def read() -> None:
            assert p.stdout is not None
            for line in p.stdout:
                logf.write(line)
                if on_line is not None:
                    on_line(time.monotonic() - t0, line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        over_time = False
        try:
            p.wait(timeout=hard_limit_s)
        except subprocess.TimeoutExpired:
            over_time = True
            kill_tree(p.pid)
            p.wait()
        except BaseException:  # ^C, or SIGTERM (main turns it into SystemExit): never leave the tree behind
            kill_tree(p.pid)
            raise
        wall = time.monotonic() - t0
        kill_tree(p.pid)  # leftovers (its compile workers) once it is gone
        sampler.stop()
        sampler.join(timeout=5)
        reader.join(timeout=10)
    # CPU of the tree: what the waited-for processes used (rusage of our reaped children, theirs included),
    # or what the samples saw (orphans that nobody waited for), whichever is more: a lower bound either way
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    sampler.s.cpu_s = max(sampler.s.cpu_s, reaped)
    return Launch(rc=p.returncode, wall_s=wall, t0_epoch=t0_epoch, tree=sampler.s, killed_over_time=over_time,
                  log=log, load=(load, os.getloadavg()[0]))


# -- the figures of one side -------------------------------------------------------------------------------------
@dataclass
class Side:
    name: str
    budget_min: float
    cores: int
    tests: int = 0
    programs: int | None = None  # when a test may hold several programs (NNForge with the programs column)
    first_s: float | None = None  # launch -> first completed test
    last_s: float | None = None  # launch -> last completed test
    bugs: int = 0
    bugs_label: str = ""
    run: Launch | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def counted(self) -> int:
        return self.programs if self.programs is not None else self.tests

    def rate_steady(self) -> float | None:
        if self.first_s is None or self.last_s is None or self.last_s - self.first_s < 1.0 or self.counted < 2:
            return None
        # the first test's programs finished at first_s: count what came after
        first_n = self.counted / self.tests if self.tests else 1  # programs per test, on average
        return (self.counted - first_n) / ((self.last_s - self.first_s) / 60.0)

    def rate_from_launch(self) -> float | None:
        if self.last_s is None or self.last_s < 1.0:
            return None
        return self.counted / (self.last_s / 60.0)


def fmt_s(s: float | None) -> str:
    return "-" if s is None else f"{s:.0f} s" if s < 120 else f"{s:.0f} s ({s / 60:.1f} min)"


def fmt_mb(b: int) -> str:
    return f"{b / 2**20:.0f} MB"


# -- NNForge -----------------------------------------------------------------------------------------------------
def nnforge_cmd() -> list[str]:
    script = Path(sys.executable).parent / "nnforge"
    return [str(script)] if script.exists() else [sys.executable, "-m", "nnforge.agent.cli"]


def campaign_options() -> str:
    r = subprocess.run(nnforge_cmd() + ["campaign", "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200", "TERM": "dumb"})
    return r.stdout


def run_nnforge(out: Path, args: argparse.Namespace, cap: int) -> tuple[Side, bool]:
    """The campaign, measured; and whether it ran with coverage."""
    help_text = campaign_options()
    cmd = nnforge_cmd() + ["campaign", "--budget", f"{round(args.minutes * 60)}s", "--targets", args.targets,
                           "--nodes", str(args.nodes), "--workers", str(args.workers), "--llm", "none",
                           "-o", str(out), "--plain", "--report-every", "120"]
    side = Side("NNForge", args.minutes, args.workers)
    coverage = args.coverage
    if coverage and "--coverage" not in help_text:
        side.notes.append("this `nnforge campaign` has no --coverage option: ran without coverage")
        coverage = False
    if coverage:
        cmd.append("--coverage")
    share_flag = "--mutant-share" if "--mutant-share" in help_text else "--mutate-prob"  # its old name (a share of tests)
    mix = (("--pack", args.pack), ("--pack-mutants", args.pack_mutants), (share_flag, args.mutant_share),
           ("--backward-share", args.backward_share),
           ("--no-triage", True if args.no_triage else None))
    for flag, value in mix:
        if value is None:
            continue
        if flag not in help_text:
            side.notes.append(f"this `nnforge campaign` has no {flag} option: not passed")
            continue
        cmd += [flag] if value is True else [flag, str(value)]
        if flag not in ("--pack", "--pack-mutants"):
            side.notes.append(f"ran with {flag}{'' if value is True else ' ' + str(value)}: not the default mix")
    hard = args.minutes * 60 + args.startup_allowance * 60
    side.run = launch(cmd, env=dict(os.environ), log=out.parent / f"{out.name}.log", cap_bytes=cap, hard_limit_s=hard)
    print(f"campaign exited with status {side.run.rc} after {side.run.wall_s:.0f} s (log: {side.run.log})")
    db_path = out / STORE_FILE
    if db_path.is_file():
        with StoreReader(db_path, read_only=True) as db:
            n, programs, (first, last), bugs = db.tests_count(), db.programs_total(), db.created_span(), db.findings_count()
        side.tests = n
        if programs is not None:
            side.programs = programs
        if first is not None:
            side.first_s, side.last_s = first - side.run.t0_epoch, last - side.run.t0_epoch
        side.bugs, side.bugs_label = bugs, "findings"
    else:
        side.notes.append(f"no store at {db_path}: the campaign did not start (see its log)")
    return side, coverage


def sample(points: list[tuple[float, float]], n: int = 8) -> list[tuple[float, float]]:
    if len(points) <= n:
        return points
    step = (len(points) - 1) / (n - 1)
    return [points[round(i * step)] for i in range(n)]


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope (value per minute) of the second half: steady growth, not warm-up."""
    pts = points[len(points) // 2:]
    if len(pts) < 2:
        return 0.0
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den > 0 else 0.0


def print_campaign(view: CampaignView) -> dict:
    minutes = view.elapsed_s / 60.0
    print(f"\n== NNForge campaign {view.folder} ({view.status or '?'}) ==")
    print(f"duration            {fmt_duration(view.elapsed_s)}   targets {', '.join(view.targets)}   workers {view.workers}")
    print(f"tests run           {view.tests}  ({view.bugs} bug verdicts, {view.invalid} invalid)")
    print(f"tests per minute    {view.tests_per_min:.1f}  ({view.tests_per_min_per_worker:.1f} per worker)")
    if view.programs > view.tests:
        print(f"programs judged     {view.programs}  ({view.programs / minutes if minutes else 0:.1f} per minute)")
    per_target = {r.key: r.tests for r in view.by_target}
    for t in view.targets:
        n = per_target.get(t, 0)
        print(f"  on {t:<14}  {n} tests, {n / minutes if minutes else 0:.1f}/min")
    total = sum(view.stage_seconds.values())
    if total:
        print("share of time per stage (summed over tests)")
        for s, v in view.stage_seconds.items():
            print(f"  {s:<10} {100 * v / total:5.1f}%   {1000 * v / max(1, view.tests):7.0f} ms per test")
    print(f"clusters found      {len(view.clusters)}  (findings: {view.findings['total']}, "
          f"{view.findings.get('new', 0)} not triaged)")
    for c in view.clusters:
        print(f"  {c.cluster_id[:12]}  x{c.count:<3} {c.title}")
    comp = view.compiler
    if comp is not None and comp.tests:
        print(f"torch.compile tests {comp.tests}: {comp.with_graph_breaks} with graph breaks "
              f"({len(comp.graph_breaks)} top reasons), {comp.with_recompiles} with recompiles")
        for r in comp.graph_breaks[:3]:
            print(f"  gb x{r.tests:<4} {r.reason[:110]}")
        for r in comp.recompiles[:3]:
            print(f"  rc x{r.tests:<4} {r.reason[:110]}")
    print_worker_time(view)
    h = view.health()
    print(f"worker health       {h['worker_restarts']} restarts, {h['timeouts']} timeouts, {h['segfaults']} segfaults")
    rss = view.series.get("rss_mb", [])
    if rss:
        warm = next((v for m, v in rss if m >= rss[-1][0] / 4), rss[0][1])  # after start-up and first compiles
        print(f"worker RSS (MB)     first {rss[0][1]:.0f}, after a quarter {warm:.0f}, last {rss[-1][1]:.0f}, "
              f"max {max(v for _, v in rss):.0f}; growth since the first quarter {rss[-1][1] - warm:+.0f} MB; "
              f"second-half slope {slope_per_min(rss):+.1f} MB/min")
        print("  " + "  ".join(f"{m:.1f}m:{v:.0f}" for m, v in sample(rss)))
    cov = view.series.get("covered_lines", [])
    if cov:
        print(f"lines covered       {cov[-1][1]:.0f} (torch/_dynamo, _inductor, _functorch)")
        print("  " + "  ".join(f"{m:.1f}m:{v:.0f}" for m, v in sample(cov)))
    return {"covered_lines": cov[-1][1] if cov else None}


def print_worker_time(view: CampaignView) -> None:
    """Where the workers' seconds went, per kind of test, and what they spent on nothing the store
    times (triage's reductions on the shared workers, the triage reserve, start-up, idling): the
    ratio to NNSmith, which runs plain programs only and triages nothing, is read through this."""
    db_path = Path(view.folder) / STORE_FILE
    if not db_path.is_file():
        return
    with StoreReader(db_path, read_only=True) as db:
        kinds = db.worker_time_by_kind()
    if not kinds:
        return
    capacity = view.elapsed_s * max(1, view.workers)
    tested = sum(k[3] for k in kinds)
    print(f"worker time by kind of test ({view.workers} workers x {fmt_duration(view.elapsed_s)} = {capacity:.0f} worker-s)")
    print(f"  {'kind':<20} {'tests':>6} {'programs':>9} {'worker-s':>9} {'share':>6} {'s/program':>10}")
    for kind, n, programs, secs in kinds:
        print(f"  {kind:<20} {n:>6} {programs:>9} {secs:>9.0f} {100 * secs / capacity:>5.1f}% "
              f"{secs / max(1, programs):>10.2f}")
    other = max(0.0, capacity - tested)
    busy = view.health().get("busy_s")
    if busy is None:  # a store from before workers' busy seconds were kept
        print(f"  {'no test (triage, reserve, start-up, idle)':<46} {other:>9.0f} {100 * other / capacity:>5.1f}%")
        return
    held = max(0.0, busy - tested)  # triage's reductions (its repro.py runs are processes of their own)
    idle = max(0.0, capacity - max(busy, tested))
    print(f"  {'no test, a worker held (triage reductions)':<46} {held:>9.0f} {100 * held / capacity:>5.1f}%")
    print(f"  {'no worker held (start-up, reserve, idle)':<46} {idle:>9.0f} {100 * idle / capacity:>5.1f}%")


# -- NNSmith HEAD: its own virtualenv, from the mirror --------------------------------------------------------------
def _git(mirror: str, *args: str) -> str:
    return subprocess.run(["git", "-C", mirror, *args], capture_output=True, text=True, check=True).stdout.strip()


def _pep440_version(describe: str) -> str:
    """`v0.1.0-25-gbc0af42` -> `0.1.0.post25` (setuptools_scm needs git metadata, which an export lacks)."""
    m = re.match(r"v?(\d+(?:\.\d+)*)(?:[-.]?(rc\d+))?-(\d+)-g[0-9a-f]+$", describe)
    if not m:
        return "0.0.0"
    base = m.group(1) + (m.group(2) or "")
    return base if m.group(3) == "0" else f"{base}.post{m.group(3)}"


def _run_logged(cmd: list[str], log, env: dict[str, str] | None = None) -> None:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd[:6])} ...` exited with status {r.returncode}")


def setup_nnsmith_head(home: Path, mirror: str, given_python: str | None) -> tuple[str | None, dict | str]:
    """(python, info) with NNSmith HEAD installed in home/venv, or (None, why not)."""
    if given_python:
        return given_python, {"commit": "?", "version": "?", "src": None, "patched": []}
    if not Path(mirror).exists():
        return None, f"NNSmith HEAD's mirror {mirror} does not exist (set --nnsmith-mirror or NNSMITH_HEAD_MIRROR)"
    try:
        commit = _git(mirror, "rev-parse", "HEAD")
        describe = _git(mirror, "describe", "--tags", "--long", "--always", "HEAD")  # untagged: the sha, version 0.0.0
        date = _git(mirror, "log", "-1", "--format=%cs", "HEAD")
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        err = getattr(e, "stderr", "") or str(e)
        return None, f"cannot read HEAD of the mirror {mirror}: {err.strip()}"
    import torch

    torch_pin = f"torch=={torch.__version__.split('+')[0]}"
    version = _pep440_version(describe)
    src, venv, py = home / "src", home / "venv", home / "venv" / "bin" / "python"
    stamp = home / "installed.json"
    info = {"commit": commit, "describe": describe, "date": date, "version": version, "torch_pin": torch_pin,
            "src": str(src), "patched": [why for why, _ in NNSMITH_PATCHES]}
    want = {k: info[k] for k in ("commit", "torch_pin", "patched")}
    if stamp.is_file() and py.exists():
        try:
            if {k: json.loads(stamp.read_text()).get(k) for k in want} == want:
                return str(py), info
        except (OSError, ValueError):
            pass
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / "install.log"
    print(f"setting up NNSmith HEAD {commit[:12]} ({describe}, {date}) in {venv}; log: {log_path}", flush=True)
    stamp.unlink(missing_ok=True)
    with open(log_path, "w") as log:
        try:
            shutil.rmtree(src, ignore_errors=True)
            src.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", mirror, "archive", "--format=tar", commit], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
            for why, diff in NNSMITH_PATCHES:
                print(f"patching the exported copy (not the mirror): {why}\n{diff}", flush=True)
                subprocess.run(["patch", "-p1", "-d", str(src)], input=diff.encode(), stdout=log,
                               stderr=subprocess.STDOUT, check=True)
            if not py.exists():
                _run_logged([sys.executable, "-m", "venv", str(venv)], log)
            pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check"]
            _run_logged(pip + [torch_pin], log)  # first: nothing after it may choose torch
            constraints = home / "constraints.txt"
            constraints.write_text(torch_pin + "\n")
            env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION": version}
            _run_logged(pip + ["-c", str(constraints), str(src)] + NNSMITH_CORE_REQS, log, env=env)
            check = subprocess.run([str(py), "-c", "import torch, nnsmith, nnsmith.cli.fuzz, nnsmith.backends.pt2; "
                                    "print(torch.__version__, nnsmith.__version__)"], capture_output=True, text=True)
            if check.returncode != 0:
                tail = (check.stderr.strip().splitlines() or ["?"])[-1]
                raise RuntimeError(f"the installed nnsmith does not import: {tail}")
            if check.stdout.split()[0].split("+")[0] != torch_pin.split("==")[1]:
                raise RuntimeError(f"pip replaced torch: the venv has torch {check.stdout.split()[0]}")
        except (subprocess.CalledProcessError, RuntimeError, OSError) as e:
            tail = ""
            try:
                tail = "; last lines of the log: " + " | ".join(log_path.read_text().strip().splitlines()[-3:])
            except OSError:
                pass
            return None, f"NNSmith HEAD could not be installed: {e}{tail}"
    stamp.write_text(json.dumps({**want, "version": version}))
    return str(py), info


TIMING = re.compile(r"Timing: gen: ([\d.]+)ms, eval: ([\d.]+)ms")


def run_nnsmith_head(py: str, info: dict, out: Path, args: argparse.Namespace, cap: int) -> Side:
    minutes = args.nnsmith_minutes
    side = Side("NNSmith HEAD", minutes, 1)
    home = args.nnsmith_home
    topset_dir = home / "cache"  # XDG_CACHE_HOME: appdirs puts nnsmith-<version>/ (the topset cache) under it
    inductor_cache = home / "inductor-cache"
    if args.nnsmith_fresh_topset:
        shutil.rmtree(topset_dir, ignore_errors=True)
    topsets = list(topset_dir.glob("nnsmith-*/TorchModelCPU_pt2_*.yaml"))
    fuzz_root, hydra_dir = out / "fuzz", out / "hydra"
    shutil.rmtree(out, ignore_errors=True)  # nnsmith asks on stdin before reusing fuzz.root
    out.mkdir(parents=True)
    cmd = [py, "-m", "nnsmith.cli.fuzz", "model.type=torch", "backend.type=pt2", "backend.target=cpu",
           f"mgen.max_nodes={args.nodes}", f"fuzz.time={round(minutes * 60)}s", f"fuzz.root={fuzz_root}",
           f"hydra.run.dir={hydra_dir}"] + list(args.nnsmith_override)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(topset_dir),
           "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), "TERM": "dumb"}
    env.pop("VIRTUAL_ENV", None)
    seen: dict[str, float] = {}
    times: list[float] = []
    gen_ms: list[float] = []
    eval_ms: list[float] = []
    failed_make = [0]

    def on_line(t: float, line: str) -> None:
        m = TIMING.search(line)
        if m:
            times.append(t)
            gen_ms.append(float(m.group(1)))
            eval_ms.append(float(m.group(2)))
        elif "`make_testcase` failed" in line:
            failed_make[0] += 1
        for key, marker in (("topset_built", "Inferring topset from scratch"), ("topset_loaded", "Loading topset from"),
                            ("loop", "Test success info supressed")):
            if marker in line and key not in seen:
                seen[key] = t

    hard = minutes * 60 + args.startup_allowance * 60
    side.run = r = launch(cmd, env=env, log=out / "stdout.log", cap_bytes=cap, hard_limit_s=hard, on_line=on_line,
                          cwd=out)
    side.tests = len(times)
    if times:
        side.first_s, side.last_s = times[0], times[-1]
    side.bugs = len(list(fuzz_root.glob("bug-*"))) if fuzz_root.is_dir() else 0
    side.bugs_label = "bug reports (folders)"
    hydra_log = hydra_dir / "fuzz.log"
    if hydra_log.is_file():
        n_log = sum(1 for line in open(hydra_log, errors="replace") if TIMING.search(line))
        if n_log != side.tests:
            side.notes.append(f"fuzz.log counts {n_log} tests, its stdout {side.tests}")
    topset = ("cold: built this run" if "topset_built" in seen else "warm: loaded from cache" if "topset_loaded" in seen
              else "cached" if topsets else "?")
    print(f"nnsmith {info.get('version')} (HEAD {str(info.get('commit'))[:12]}) exited with status {r.rc} after "
          f"{r.wall_s:.0f} s; log: {r.log}")
    print(f"start-up            loop started {fmt_s(seen.get('loop'))} after launch; topset {topset}"
          + (f" (dtype test took {seen.get('loop', r.wall_s) - seen['topset_built']:.0f} s)" if "topset_built" in seen else ""))
    print(f"tests               {side.tests} completed, {side.bugs} bug reports, {failed_make[0]} models it failed to make")
    if gen_ms:
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        print(f"per test (median)   generate {med(gen_ms):.0f} ms, compile + run + compare {med(eval_ms):.0f} ms; "
              f"sums: {sum(gen_ms) / 1000:.0f} s / {sum(eval_ms) / 1000:.0f} s")
    if r.tree.series:
        pts = [(t / 60.0, b / 2**20) for t, b in r.tree.series]
        print(f"tree RSS (MB)       max {max(v for _, v in pts):.0f}; second-half slope {slope_per_min(pts):+.1f} MB/min")
        print("  " + "  ".join(f"{m:.1f}m:{v:.0f}" for m, v in sample(pts)))
    side.notes.append(f"topset {topset}")
    if info.get("patched"):
        side.notes.append("NNSmith's exported copy was patched: " + "; ".join(info["patched"]))
    if r.tree.capped_at_s is None and not r.killed_over_time and r.rc not in (0, None):
        tail = [ln for ln in r.log.read_text(errors="replace").strip().splitlines() if ln.strip()][-3:]
        side.notes.append(f"nnsmith exited with status {r.rc}: " + " | ".join(t.strip()[:200] for t in tail))
    if "loop" not in seen and r.tree.capped_at_s is None:
        side.notes.append("its loop never started (see its log)")
    return side


# -- the table ---------------------------------------------------------------------------------------------------
def print_table(a: Side, b: Side | None, why_not: str) -> None:
    print("\n== side by side (same machine, one after the other) ==")
    count_what = "programs" if a.programs is not None else "tests"

    def ratio(x: float | None, y: float | None) -> str:
        return "-" if x is None or y is None or y == 0 else f"{x / y:.2f}x"

    def num(x: float | None, nd: int = 1) -> str:
        return "-" if x is None else f"{x:.{nd}f}"

    rows: list[tuple[str, str, str, str]] = []

    def row(label: str, fa, fb, va=None, vb=None) -> None:
        both = b is not None and a.run is not None and b.run is not None
        rows.append((label, fa(a), fb(b) if b is not None else "-", ratio(va(a), vb(b)) if va and both else ""))

    def cap(s: Side) -> str:
        if s.run is None:
            return "-"
        if s.run.tree.capped_at_s is not None:
            return f"HIT at {s.run.tree.capped_at_s:.0f} s ({fmt_mb(s.run.tree.capped_rss)}): killed"
        return "killed: over time" if s.run.killed_over_time else "not hit"

    def busy(s: Side) -> float | None:
        return None if s.run is None or s.run.wall_s <= 0 else s.run.tree.cpu_s / s.run.wall_s

    row("loop budget (minutes)", lambda s: f"{s.budget_min:g}", lambda s: f"{s.budget_min:g}")
    row("process wall time", lambda s: fmt_s(s.run.wall_s if s.run else None), lambda s: fmt_s(s.run.wall_s if s.run else None))
    row("tests done", lambda s: str(s.tests), lambda s: str(s.tests), lambda s: s.tests, lambda s: s.tests)
    if a.programs is not None:
        row("programs in them", lambda s: str(s.programs), lambda s: f"{s.tests} (1 a test)",
            lambda s: s.programs, lambda s: s.tests)
    row(f"{count_what}/min (after 1st test)", lambda s: num(s.rate_steady()), lambda s: num(s.rate_steady()),
        Side.rate_steady, Side.rate_steady)
    row(f"{count_what}/min incl. start-up", lambda s: num(s.rate_from_launch()), lambda s: num(s.rate_from_launch()),
        Side.rate_from_launch, Side.rate_from_launch)
    row("cores (workers / processes)", lambda s: str(s.cores), lambda s: str(s.cores))
    per_core = lambda s: None if s.rate_steady() is None else s.rate_steady() / s.cores  # noqa: E731
    row(f"{count_what}/min per core", lambda s: num(per_core(s)), lambda s: num(per_core(s)), per_core, per_core)
    row("cores busy (CPU s / wall s, >=)", lambda s: num(busy(s), 2), lambda s: num(busy(s), 2))
    row("time to first test", lambda s: fmt_s(s.first_s), lambda s: fmt_s(s.first_s),
        lambda s: s.first_s, lambda s: s.first_s)
    row("peak RSS (process tree)", lambda s: fmt_mb(s.run.tree.peak_rss) if s.run else "-",
        lambda s: fmt_mb(s.run.tree.peak_rss) if s.run else "-",
        lambda s: s.run.tree.peak_rss if s.run else None, lambda s: s.run.tree.peak_rss if s.run else None)
    row("  reached at", lambda s: fmt_s(s.run.tree.peak_at_s) if s.run else "-",
        lambda s: fmt_s(s.run.tree.peak_at_s) if s.run else "-")
    row("memory cap", cap, cap)
    load = lambda s: "-" if s.run is None else f"{s.run.load[0]:.1f} / {s.run.load[1]:.1f}"  # noqa: E731
    row("load avg at launch / end", load, load)
    row("bugs", lambda s: f"{s.bugs} {s.bugs_label}", lambda s: f"{s.bugs} {s.bugs_label}")
    w0 = max(len(r[0]) for r in rows) + 2
    w1 = max(14, max(len(r[1]) for r in rows) + 2)
    w2 = max(14, max(len(r[2]) for r in rows) + 2)
    print(f"{'':{w0}}{'NNForge':>{w1}}{'NNSmith HEAD':>{w2}}  NNForge/NNSmith")
    for label, x, y, z in rows:
        print(f"{label:{w0}}{x:>{w1}}{y:>{w2}}  {z}")
    if a.programs is not None:
        print(f"({count_what}: NNForge's rates count generator programs (the store's tests.programs), "
              "NNSmith's its tests, one model each)")
    elif a.run is not None:
        print("(tests: this NNForge's store has no programs column; one program a test on both sides)")
    for s in (a, b):
        if s is not None:
            for n in s.notes:
                print(f"note ({s.name}): {n}")
    if b is None:
        print(f"note (NNSmith HEAD): not measured: {why_not}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="NNForge's campaign budget (default 30)")
    ap.add_argument("--nnsmith-minutes", type=float, default=None, help="NNSmith's fuzz.time (default: --minutes)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--targets", default="inductor", help="NNForge's targets (default inductor, as NNSmith's pt2)")
    ap.add_argument("--nodes", type=int, default=10, help="operators per model, both tools (default 10)")
    ap.add_argument("--pack", type=int, default=None, help="passed to `nnforge campaign --pack K`")
    ap.add_argument("--pack-mutants", type=int, default=None, help="passed to `nnforge campaign --pack-mutants K`")
    ap.add_argument("--mutant-share", "--mutate-prob", type=float, default=None,
                    help="passed to `nnforge campaign` (0: plain generator programs only, as NNSmith runs; "
                         "a checkout older than --mutant-share gets it as --mutate-prob)")
    ap.add_argument("--backward-share", type=float, default=None, help="passed to `nnforge campaign`")
    ap.add_argument("--no-triage", action="store_true", help="`nnforge campaign --no-triage` (NNSmith triages nothing)")
    ap.add_argument("--coverage", action="store_true", help="NNForge's campaign with compiler line coverage")
    ap.add_argument("--mem-cap-gb", type=float, default=6.0, help="kill a process tree whose RSS passes this (6)")
    ap.add_argument("--startup-allowance", type=float, default=10.0,
                    help="minutes a process may run past its budget (start-up, drain) before it is killed (10)")
    ap.add_argument("--out", type=Path, default=None, help="folder for both runs (default: a new temp folder)")
    ap.add_argument("--only", choices=("nnforge", "nnsmith"), default=None, help="run one side only")
    ap.add_argument("--no-nnsmith", action="store_true", help="same as --only nnforge")
    ap.add_argument("--setup-only", action="store_true", help="only make NNSmith HEAD's venv, then stop")
    ap.add_argument("--nnsmith-mirror", default=DEFAULT_MIRROR, help="bare git repository of NNSmith (its HEAD is used)")
    ap.add_argument("--nnsmith-home", type=Path, default=NNSMITH_HOME, help="where its src/, venv/ and caches live")
    ap.add_argument("--nnsmith-python", default=None, help="an interpreter that already has NNSmith HEAD (no venv)")
    ap.add_argument("--nnsmith-override", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra hydra override for nnsmith.cli.fuzz (repeatable)")
    ap.add_argument("--nnsmith-fresh-topset", action="store_true", help="drop NNSmith's topset cache first (cold start)")
    ap.add_argument("--report-only", type=Path, default=None, help="only print the figures of this campaign folder")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so a run's process tree is killed with us

    args.nnsmith_minutes = args.minutes if args.nnsmith_minutes is None else args.nnsmith_minutes
    if args.minutes <= 0 or args.nnsmith_minutes <= 0:
        ap.error("--minutes and --nnsmith-minutes must be positive")
    if args.no_nnsmith:
        args.only = "nnforge"
    if args.report_only:
        print_campaign(load_view(args.report_only))
        return
    cap = int(args.mem_cap_gb * 2**30)

    py, info = None, "not asked for (--only nnforge)"
    if args.only != "nnforge" or args.setup_only:
        py, info = setup_nnsmith_head(args.nnsmith_home, args.nnsmith_mirror, args.nnsmith_python)
        if py is None:
            print(f"NNSmith HEAD: {info}", flush=True)
        else:
            print(f"NNSmith HEAD {info['version']} ({str(info['commit'])[:12]}) ready: {py}", flush=True)
        if args.setup_only:
            sys.exit(0 if py else 1)

    base = args.out or Path(tempfile.mkdtemp(prefix="nnforge-bench-"))
    ours: Side | None = None
    if args.only != "nnsmith":
        out = base / "campaign"
        print(f"\n== NNForge campaign, {args.minutes:g} minutes ==", flush=True)
        ours, _ = run_nnforge(out, args, cap)
        if (out / STORE_FILE).is_file():
            print_campaign(load_view(out))
            print(f"summary: {out / 'summary.md'}   report: {out / 'report.html'}")

    theirs: Side | None = None
    why_not = info if isinstance(info, str) else ""
    if args.only != "nnforge" and py is not None:
        print(f"\n== NNSmith HEAD's own fuzz loop (nnsmith.cli.fuzz), pt2 / Inductor, {args.nnsmith_minutes:g} minutes ==",
              flush=True)
        theirs = run_nnsmith_head(py, info if isinstance(info, dict) else {}, base / "nnsmith", args, cap)
    print_table(ours or Side("NNForge", args.minutes, args.workers, notes=["not run (--only nnsmith)"]), theirs, why_not)


if __name__ == "__main__":
    main()
