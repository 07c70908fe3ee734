"""Benchmark: a whole campaign on clean torch (all three targets), then nnsmith's own fuzzing loop.

Runs `nnforge campaign` for --minutes with targets inductor, ort, tvm and 2 workers (optionally
with --coverage), then reads the campaign's store and prints: tests run, tests per minute (per
worker too), the share of time per stage, the clusters found (one line each), worker RSS over
time (first / last / max and growth), and lines of torch's compiler packages covered over time.

Then, in the same run, nnsmith's own fuzzing loop against torch.compile (bench/nnsmith_fuzz.py,
in a separate virtualenv with nnsmith installed from the package registry) for
--nnsmith-minutes (default: the same minutes), one after the other so the two never compete for
cores, and prints both side by side: tests per minute (a per-minute rate, so runs of different
lengths compare) and, with --coverage, compiler lines covered (these grow with time: compare
them only for equal minutes). If nnsmith cannot be installed or cannot run with this torch, it
says why.

    .venv/bin/python bench/campaign.py                         # the issue's figures (30 + 30 minutes)
    .venv/bin/python bench/campaign.py --minutes 3 --coverage  # a quick check
    .venv/bin/python bench/campaign.py --minutes 30 --nnsmith-minutes 5  # nnsmith's rate from a shorter run
    .venv/bin/python bench/campaign.py --report-only DIR       # print the figures of a finished campaign
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nnforge.agent.report_data import CampaignView, fmt_duration, load_view  # noqa: E402


def nnforge_cmd() -> list[str]:
    script = Path(sys.executable).parent / "nnforge"
    return [str(script)] if script.exists() else [sys.executable, "-m", "nnforge.agent.cli"]


def campaign_supports(option: str) -> bool:
    r = subprocess.run(nnforge_cmd() + ["campaign", "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200", "TERM": "dumb"})
    return option in r.stdout


def run_campaign(out: Path, minutes: float, targets: str, workers: int, coverage: bool) -> tuple[int, float]:
    cmd = nnforge_cmd() + ["campaign", "--budget", f"{int(minutes * 60)}s", "--targets", targets,
                           "--workers", str(workers), "-o", str(out), "--plain", "--report-every", "120"]
    if coverage:
        cmd.append("--coverage")
    print("$ " + " ".join(cmd), flush=True)
    t = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    return rc, time.monotonic() - t


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
    return {"tests": view.tests, "tests_per_min": view.tests_per_min,
            "inductor_tests_per_min": per_target.get("inductor", 0) / minutes if minutes else 0.0,
            "covered_lines": cov[-1][1] if cov else None, "coverage": cov}


# -- nnsmith ------------------------------------------------------------------------------------------
def nnsmith_python(venv: Path, given: str | None) -> tuple[str | None, str]:
    """An interpreter with nnsmith (and coverage) installed, creating `venv` if needed; or (None, why)."""
    if given:
        return given, ""
    py = venv / "bin" / "python"
    if not py.exists():
        import torch

        torch_pin = f"torch=={torch.__version__.split('+')[0]}"
        print(f"creating {venv}: pip install {torch_pin} nnsmith[torch] coverage ...", file=sys.stderr, flush=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(py), "-m", "pip", "install", "-q", torch_pin, "nnsmith[torch]", "coverage"], check=True)
        except subprocess.CalledProcessError as e:
            return None, f"nnsmith could not be installed: {e}"
    return str(py), ""


def run_nnsmith(py: str, minutes: float, coverage: bool, cache_dir: Path) -> dict | str:
    cmd = [py, str(ROOT / "bench" / "nnsmith_fuzz.py"), str(int(minutes * 60))] + (["--coverage"] if coverage else [])
    print("$ " + " ".join(cmd), flush=True)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir)}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=minutes * 60 + 900)
    except subprocess.TimeoutExpired:
        return "nnsmith's loop did not finish (a test hung past its budget)"
    if r.returncode != 0 or not r.stdout.strip():
        tail = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        return f"nnsmith did not run with this torch: {tail}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--nnsmith-minutes", type=float, default=None,
                    help="how long nnsmith's loop runs (default: --minutes); tests/min is a rate, so comparable")
    ap.add_argument("--coverage", action="store_true", help="collect compiler line coverage (both tools)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--targets", default="inductor,ort,tvm")
    ap.add_argument("--out", type=Path, default=None, help="campaign folder (default: a new temp folder)")
    ap.add_argument("--no-nnsmith", action="store_true")
    ap.add_argument("--nnsmith-venv", type=Path, default=ROOT / ".bench-venv-nnsmith")
    ap.add_argument("--nnsmith-python", default=None, help="an interpreter that already has nnsmith (skips the venv)")
    ap.add_argument("--report-only", type=Path, default=None, help="only print the figures of this campaign folder")
    args = ap.parse_args()

    nnsmith_minutes = args.minutes if args.nnsmith_minutes is None else args.nnsmith_minutes
    if nnsmith_minutes <= 0:
        ap.error("--nnsmith-minutes must be positive")
    if args.report_only:
        print_campaign(load_view(args.report_only))
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="nnforge-bench-")) / "campaign"
    coverage = args.coverage
    if coverage and not campaign_supports("--coverage"):
        print("note: this `nnforge campaign` has no --coverage option; running without coverage", file=sys.stderr)
        coverage = False
    rc, wall = run_campaign(out, args.minutes, args.targets, args.workers, coverage)
    print(f"campaign exited with status {rc} after {wall:.0f} s (log: {out.parent / (out.name + '.log')})")
    ours = print_campaign(load_view(out))
    print(f"summary: {out / 'summary.md'}   report: {out / 'report.html'}")

    if args.no_nnsmith:
        return
    print(f"\n== nnsmith's own fuzzing loop, torch.compile (inductor), {nnsmith_minutes:g} minutes ==")
    py, why = nnsmith_python(args.nnsmith_venv, args.nnsmith_python)
    theirs: dict | str = why if py is None else run_nnsmith(py, nnsmith_minutes, args.coverage,
                                                            out.parent / "nnsmith-inductor")
    if isinstance(theirs, str):
        print(theirs)
        return
    print(f"nnsmith {theirs['nnsmith']} on torch {theirs['torch']}: {theirs['tests']} tests in {theirs['seconds']:.0f} s, "
          f"{theirs['bugs']} bug reports, {theirs['failed_generation']} failed generations")
    print(f"stage seconds       {theirs['stage_s']}")
    if theirs.get("timeline"):
        print("  " + "  ".join(f"{p['elapsed_s'] / 60:.1f}m:{p['covered_lines']}" for p in theirs["timeline"][::max(1, len(theirs["timeline"]) // 8)]))
    print("\n== side by side (same machine, one after the other) ==")
    print(f"{'':28}{'NNForge':>14}{'nnsmith':>14}")
    print(f"{'minutes run':28}{args.minutes:>14g}{nnsmith_minutes:>14g}")
    print(f"{'tests/min (all targets)':28}{ours['tests_per_min']:>14.1f}{'-':>14}")
    print(f"{'tests/min on inductor':28}{ours['inductor_tests_per_min']:>14.1f}{theirs['tests_per_min']:>14.1f}")
    print(f"{'processes running tests':28}{args.workers:>14}{1:>14}")
    if args.coverage:
        mine = "-" if ours["covered_lines"] is None else f"{ours['covered_lines']:.0f}"
        print(f"{'compiler lines covered':28}{mine:>14}{theirs.get('covered_lines') or '-':>14}")
        if nnsmith_minutes != args.minutes:
            print("  (lines covered grow with time: the two runs had different lengths)")


if __name__ == "__main__":
    main()
