"""End-to-end oracle benchmark: throughput on inductor with a warm cache, and false alarms.

    .venv/bin/python bench/oracle_e2e.py                       # the issue's figures (500 programs)
    .venv/bin/python bench/oracle_e2e.py --count 40 --throughput 20   # a quick check

Part 1, throughput: `--throughput` generator programs through the `inductor` target only (its
ladder: eager backend, aot_eager, inductor), after a warm-up of `--warmup` programs that fills the
inductor cache; tests per minute per worker, and where the time goes. Stage times come from the
oracle itself: generation (here, in the parent), value search and the eager + float64 reference
(first worker job), and each rung (compile + run + compare, second worker job); "overhead" is the
rest of the wall time (IPC, pickling, the thread pool).

Part 2, false alarms: `--count` programs through every target (`--targets`, default inductor, ort,
tvm: their ladders cover every backend). torch 2.13 here is a release, so the oracle should report
only real bugs; every mismatch-like verdict is listed with its evidence (errors, float64 distances)
so a reader can judge whether any is caused by tolerance or precision. The cases are saved under
`--out` for `nnforge run`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.oracle.oracle import CaseResult, Oracle
from nnforge.oracle.sandbox import WorkerPool

MISMATCH_LIKE = {Symptom.MISMATCH, Symptom.NAN_MISMATCH}


def _cases(nodes: int, seeds: range, onnx_only: bool = False) -> list[tuple[int, TestCase, float]]:
    out = []
    for s in seeds:
        t0 = time.perf_counter()
        case, _ = generate_case(GeneratorConfig(n_nodes=nodes, seed=s, onnx_only=onnx_only))
        out.append((s, case, time.perf_counter() - t0))
    return out


def _run_all(oracle: Oracle, cases: list[tuple[int, TestCase, float]], workers: int,
             label: str) -> tuple[list[tuple[int, TestCase, float, CaseResult, float]], float]:
    done: list[tuple[int, TestCase, float, CaseResult, float]] = []
    lock = threading.Lock()

    def one(item: tuple[int, TestCase, float]) -> None:
        seed, case, gen_s = item
        t0 = time.perf_counter()
        res = oracle.check(case)
        with lock:
            done.append((seed, case, gen_s, res, time.perf_counter() - t0))
            if len(done) % 25 == 0:
                print(f"  {label}: {len(done)}/{len(cases)}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as ex:
        list(ex.map(one, cases))
    return done, time.perf_counter() - t0


def throughput(pool: WorkerPool, args: argparse.Namespace) -> None:
    oracle = Oracle(pool, ["inductor"], value_search_budget_ms=args.budget_ms, timeout_s=args.timeout_s)
    warm = _cases(args.nodes, range(args.seed - args.warmup, args.seed))
    _run_all(oracle, warm, args.workers, "warm-up")
    cases = _cases(args.nodes, range(args.seed, args.seed + args.throughput))
    gen_s = sum(c[2] for c in cases)
    done, wall = _run_all(oracle, cases, args.workers, "throughput")
    stages: dict[str, float] = defaultdict(float)
    per_test = []
    for _seed, _case, _g, res, elapsed in done:
        per_test.append(elapsed)
        stages["value search"] += res.timings.get("prepare_s", 0.0)
        stages["reference (eager + float64)"] += res.timings.get("reference_s", 0.0)
        for v in res.verdicts:
            for key, sec in v.timings.items():
                if key.endswith("_s") and key not in ("reference_s", "elapsed_s"):
                    stages[f"rung {key[:-2]} (compile + run + compare)"] += sec
    busy = sum(per_test)  # worker-seconds spent inside checks
    stages["overhead (IPC, pickling, queueing)"] = max(0.0, busy - sum(stages.values()))
    stages["generation (parent, serial)"] = gen_s
    total = sum(stages.values())
    print(f"\n== throughput: inductor, warm cache, {args.nodes}-node programs, {args.workers} workers ==")
    print(f"tests: {len(done)} in {wall:.1f} s wall -> {60 * len(done) / wall:.1f} tests/min, "
          f"{60 * len(done) / wall / args.workers:.1f} per worker (generation done beforehand: "
          f"{gen_s / len(cases) * 1000:.0f} ms per program)")
    print(f"median check {statistics.median(per_test):.2f} s, p90 {sorted(per_test)[int(0.9 * (len(per_test) - 1))]:.2f} s")
    print(f"{'stage':44}{'seconds':>10}{'share':>8}")
    for name, sec in sorted(stages.items(), key=lambda kv: -kv[1]):
        print(f"{name:44}{sec:>10.1f}{100 * sec / total:>7.1f}%")


def false_alarms(pool: WorkerPool, args: argparse.Namespace) -> None:
    targets = args.targets.split(",")
    oracle = Oracle(pool, targets, value_search_budget_ms=args.budget_ms, timeout_s=args.timeout_s)
    # ONNX-exportable programs, so that every target judges the same programs (as the campaign
    # does for ONNX targets); --all-ops lets inductor see the rest while ort/tvm say "invalid"
    cases = _cases(args.nodes, range(args.seed + 100_000, args.seed + 100_000 + args.count), not args.all_ops)
    done, wall = _run_all(oracle, cases, args.workers, "false alarms")
    out = args.out or Path(tempfile.mkdtemp(prefix="nnforge-falsealarms-"))
    counts: dict[str, Counter[str]] = {t: Counter() for t in targets}
    invalid_why: Counter[str] = Counter()
    listed: list[tuple[int, Any, str]] = []
    for seed, _case, _g, res, _e in sorted(done, key=lambda d: d[0]):
        for v in res.verdicts:
            counts[v.target][v.symptom.value] += 1
            if v.symptom is Symptom.INVALID:
                invalid_why[f"{v.target}: {(v.detail or v.exc_type or '?').splitlines()[0][:90]}"] += 1
            if v.symptom in MISMATCH_LIKE:
                folder = out / f"seed{seed}_{v.target}"
                res.case.save(folder)
                listed.append((seed, v, str(folder)))
    symptoms = sorted({s for c in counts.values() for s in c})
    print(f"\n== false alarms: {len(done)} programs ({args.nodes} nodes) on clean torch, {wall / 60:.1f} min ==")
    print(f"{'target':10}" + "".join(f"{s:>16}" for s in symptoms))
    for t in targets:
        print(f"{t:10}" + "".join(f"{counts[t][s]:>16}" for s in symptoms))
    if invalid_why:
        print("\nmost common reasons for `invalid` (the program or its values, not a bug):")
        for why, n in invalid_why.most_common(8):
            print(f"  {n:4}  {why}")
    print(f"\nmismatch-like verdicts: {len(listed)} (each listed; cases saved under {out})")
    for seed, v, folder in listed:
        ratio = (v.fp64_rmse_actual / v.fp64_rmse_eager
                 if v.fp64_rmse_actual is not None and v.fp64_rmse_eager else None)
        print(f"- seed {seed} {v.target} rung {v.rung}: {v.symptom.value}, max abs err {v.max_abs_err}, "
              f"max rel err {v.max_rel_err}, fp64 rmse target/eager {v.fp64_rmse_actual}/{v.fp64_rmse_eager}"
              f"{'' if ratio is None else f' (x{ratio:.3g})'}\n    {v.detail[:300]}\n    case: {folder}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=500, help="programs for the false-alarm part (0 skips it)")
    ap.add_argument("--throughput", type=int, default=100, help="programs for the throughput part (0 skips it)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--targets", default="inductor,ort,tvm")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget-ms", type=float, default=VALUE_SEARCH_BUDGET_MS, help="value search budget per program")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=500_000)
    ap.add_argument("--all-ops", action="store_true", help="false alarms on programs with non-ONNX operators too")
    ap.add_argument("--out", type=Path, default=None, help="where mismatch cases are saved")
    args = ap.parse_args()
    with WorkerPool(size=args.workers, timeout_s=args.timeout_s,
                    inductor_cache_dir=str(Path(tempfile.gettempdir()) / "nnforge-bench-inductor-cache")) as pool:
        if args.throughput:
            throughput(pool, args)
        if args.count:
            false_alarms(pool, args)


if __name__ == "__main__":
    main()
