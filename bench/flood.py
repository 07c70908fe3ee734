"""Flood benchmark for the sandbox: a campaign whose only target kills its worker in mixed ways.

`faulty_chaos` (oracle/faulty.py) picks, per graph, a SIGSEGV, a hang, a memory blow-up, an exit,
a child process that outlives the call, or a pass; on top of that, a share of worker start-ups
exit before the worker says it is ready (`--startup-exits`, planted through a `.pth` line in the
virtualenv's site-packages for the run's length, as the fault benchmark plants its faults: the
workers' environment is scrubbed). The campaign must survive all of it, record
every test it made with a verdict, leave no process behind, and keep the parent's memory flat.

    .venv/bin/python bench/flood.py --tests 1000            # until 1000 tests are recorded
    .venv/bin/python bench/flood.py --minutes 5             # or for a fixed time

Prints a table: tests recorded and made, verdicts by symptom, worker restarts, processes left
behind (pids that appeared during the campaign and are still alive after it ended), and the
campaign process's RSS at its first and last samples (after a minute's warm-up) and its maximum.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from nnforge.agent.store import STORE_FILE, StoreError, StoreReader


NNFORGE = [sys.executable, "-m", "nnforge.agent.cli"]
STARTUP_PTH = "nnforge_flood_startup_exit.pth"


def plant_startup_exits(share: float, tally: Path) -> Path:
    """A `.pth` line that makes that share of NNForge worker start-ups exit at interpreter start
    (before the worker imports torch or says it is ready), leaving one file in `tally` each time.
    Only the worker's own interpreter is touched: not its sandbox launcher, not its children."""
    import sysconfig

    tally.mkdir(parents=True, exist_ok=True)
    line = ("import os, sys, random; (getattr(sys, 'orig_argv', [])[1:4] == ['-u', '-m', 'nnforge.oracle.worker']) and "
            f"random.random() < {share!r} and (os.path.isdir({str(tally)!r}) and "
            f"open(os.path.join({str(tally)!r}, str(os.getpid())), 'w').close(), os._exit(23))\n")
    pth = Path(sysconfig.get_paths()["purelib"]) / STARTUP_PTH
    pth.write_text(line)
    return pth


def pids() -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit()}


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, IndexError, ValueError):
        return None


FLOOD_TOKEN = "NNFORGE_FLOOD_RUN"  # in the campaign's environment; workers and all they start inherit it


def carries(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def left_behind(before: set[int], token: str) -> list[int]:
    """Processes this campaign started (they carry its token in their environment: the sandbox
    scrubs secrets, not this) that are still alive after it ended. Other processes started
    meanwhile on the machine do not count, whoever their parent is."""
    needle = f"{FLOOD_TOKEN}={token}".encode()
    return [pid for pid in sorted(pids() - before - {os.getpid()}) if rss_mb(pid) and carries(pid, needle)]


def recorded(folder: Path) -> int:
    try:
        with StoreReader(folder / STORE_FILE, read_only=True, timeout=5) as db:
            return db.tests_count()
    except StoreError:
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=int, default=1000, help="stop once this many tests are recorded (default 1000)")
    ap.add_argument("--minutes", type=float, default=120.0, help="at most this long (default 120)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per worker call: what a hang costs")
    ap.add_argument("--memory-mb", type=int, default=1500, help="worker memory limit: what a blow-up reaches")
    ap.add_argument("--startup-exits", type=float, default=0.05,
                    help="share of worker start-ups that exit before the worker is ready (default 0.05)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="nnforge-flood-")) / "camp"
    tally = Path(tempfile.mkdtemp(prefix="nnforge-flood-startup-"))
    pth = plant_startup_exits(args.startup_exits, tally) if args.startup_exits > 0 else None
    try:
        return _flood(args, out, tally)
    finally:
        if pth is not None:
            pth.unlink(missing_ok=True)


def _flood(args: argparse.Namespace, out: Path, tally: Path) -> int:
    before = pids()
    token = os.urandom(8).hex()
    env = {**os.environ, "NNFORGE_WORKER_MEMORY_MB": str(args.memory_mb), FLOOD_TOKEN: token}
    cmd = [*NNFORGE, "campaign", "--budget", f"{args.minutes * 60:.0f}s", "--targets", "faulty_chaos",
           "--workers", str(args.workers), "--timeout", str(args.timeout), "--nodes", "3", "--no-triage",
           "--llm", "none", "--plain", "-o", str(out)]
    out.parent.mkdir(parents=True, exist_ok=True)
    log = open(out.parent / "flood.log", "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    samples: list[tuple[float, float]] = []
    stopped = False  # by us, at the test count: the campaign then exits 130 ("interrupted")
    while proc.poll() is None:
        time.sleep(5)
        mb = rss_mb(proc.pid)
        if mb:
            samples.append((time.monotonic() - t0, mb))
        if recorded(out) >= args.tests:
            proc.send_signal(signal.SIGINT)  # a clean stop: drain, record, write the reports
            stopped = True
            break
    rc = proc.wait(timeout=600)
    wall = time.monotonic() - t0
    time.sleep(2)
    left = left_behind(before, token)
    with StoreReader(out / STORE_FILE) as db:
        tests, made, unrecorded = db.tests_count(), db.queue_count(), db.unrecorded_count()
        symptoms: Counter[str] = Counter()
        for by_symptom in db.verdict_counts_by_target().values():
            symptoms.update(by_symptom)
        last_stats = db.stats_rows()[-1:]
    warm = [mb for t, mb in samples if t >= 60] or [mb for _, mb in samples]
    rows = [
        ("campaign exit code", rc), ("wall seconds", f"{wall:.0f}"), ("tests recorded", tests),
        ("tests made (queued)", made),
        ("made but not recorded", f"{unrecorded}" + (" (in flight at the stop; --resume reruns them)"
                                                     if stopped and unrecorded <= args.workers else "")),
        ("verdicts", ", ".join(f"{k} {v}" for k, v in sorted(symptoms.items()))),
        ("worker restarts", last_stats[0].get("worker_restarts") if last_stats else "-"),
        ("worker start-ups that exited before ready", len(list(tally.iterdir()))),
        ("processes left behind", f"{len(left)}" + (f" ({left[:10]})" if left else "")),
        ("parent RSS first/last/max MB (after 1 min)",
         f"{warm[0]:.0f} / {warm[-1]:.0f} / {max(warm):.0f}" if warm else "-"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"\nflood campaign in {out}\n")
    print(f"| {'figure'.ljust(width)} | value |\n|{'-' * (width + 2)}|-------|")
    for k, v in rows:
        print(f"| {k.ljust(width)} | {v} |")
    clean_exit = rc == 0 or (stopped and rc == 130)
    lost = unrecorded > (args.workers if stopped else 0)  # beyond what was in flight at our stop
    return 0 if clean_exit and not left and not lost else 1


if __name__ == "__main__":
    sys.exit(main())
