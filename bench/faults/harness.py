"""Shared by the fault benchmark's check and campaign halves: planting faults around a child
process, and running cases and repros the way a user would (fresh process, clean environment).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import fault_hook

FAULTS_DIR = Path(__file__).resolve().parent
TRIGGERS = FAULTS_DIR / "triggers"
NEAR_MISS = FAULTS_DIR / "near_miss"

REPRO_TIMEOUT_S = 300
RUN_TIMEOUT_S = 600


def nnforge_exe() -> str:
    exe = Path(sys.executable).parent / "nnforge"
    return str(exe) if exe.exists() else "nnforge"


def clean_env() -> dict[str, str]:
    """What a repro gets: the environment triage itself runs repro.py in."""
    from nnforge.triage.pipeline import repro_environment

    return repro_environment()


def lock_is_free() -> bool:
    """No benchmark run is planting faults right now."""
    import fcntl

    with open(FAULTS_DIR / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
    return True


class planted:
    """`with planted(["f"]):` — the faults named are on for every process started inside.

    The activation file is one per checkout, so a lock file keeps two benchmark runs from
    planting each other's faults: the second waits.
    """

    def __init__(self, names: list[str], fired_log: Path | None = None, fired_stderr: bool = False):
        self.names = list(names)
        self.fired_log = fired_log
        self.fired_stderr = fired_stderr
        self._lock = None

    def __enter__(self) -> "planted":
        import fcntl

        self._lock = open(FAULTS_DIR / ".lock", "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        fault_hook.install_pth()
        fault_hook.write_active(self.names, fired_log=self.fired_log, fired_stderr=self.fired_stderr)
        return self

    def __exit__(self, *exc: object) -> None:
        fault_hook.write_active([])
        if self._lock is not None:
            self._lock.close()


# -- check ---------------------------------------------------------------------------------------------------
def run_case(case: Path, target: str, faults: list[str], timeout_s: float = RUN_TIMEOUT_S) -> tuple[int, str]:
    """`nnforge run CASE --targets T` in a fresh process with `faults` planted: (exit code, output)."""
    work = Path(tempfile.mkdtemp(prefix="nnforge-fault-case-"))
    try:
        shutil.copytree(case, work / "case")
        with planted(faults):
            p = subprocess.run([nnforge_exe(), "run", str(work / "case"), "--targets", target, "--json"],
                               capture_output=True, text=True, timeout=timeout_s, env=clean_env())
        return p.returncode, p.stdout[-4000:] + p.stderr[-4000:]
    except subprocess.TimeoutExpired:
        return 124, "timeout"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def print_table(header: tuple[str, ...], rows: list[tuple]) -> None:
    cells = [tuple(str(c) for c in header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print()
    for j, r in enumerate(cells):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if j == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
