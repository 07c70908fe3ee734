"""Packing: programs judged per minute when k generated programs share one compilation.

    .venv/bin/python bench/pack.py --rounds 4 --nodes 10 --ks 1 2 4 8            # 2 workers, as a campaign
    .venv/bin/python bench/pack.py --rounds 6 --ks 1 2 4 8 --workers 1 --per-round 1

Each round draws fresh generator programs for every k in turn (so machine noise falls on every
k alike), packs them (generator/pack.py) and judges the packs on the target as a campaign test
would be judged (value search, the top rung, the ladder on a disagreement), `--workers` packs at
a time on as many sandbox workers (`--per-round` packs per worker per k and round, one stream), whose
Inductor cache is warm from a first, unmeasured pack each. Printed per k: programs judged, judged
per minute (programs in valid packs over the streams' wall seconds), median seconds per program,
share of packs that could not be judged (a pack is invalid when any member is).

Why several workers by default: one worker alone leaves a core idle while it traces, and a pack's
kernels compile in parallel (Inductor's compile pool) on the cores a lone worker leaves free, so
on one worker packing looks better than it is in a campaign, whose workers already keep every
core busy. With `--workers` equal to the campaign's, what is measured is what packing saves.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.pack import pack_cases
from nnforge.generator.seeds import generate_case
from nnforge.oracle.oracle import Oracle
from nnforge.oracle.sandbox import WorkerPool


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--target", default="inductor")
    ap.add_argument("--seed", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2, help="packs judged at a time, one sandbox worker each (2)")
    ap.add_argument("--per-round", type=int, default=3, help="packs per worker for each k in each round (3)")
    args = ap.parse_args(argv)
    rows = {k: {"programs": 0, "judged": 0, "seconds": 0.0, "per_program": [], "packs": 0, "invalid": 0,
                "bugs": 0} for k in args.ks}
    next_seed = args.seed
    with WorkerPool(args.workers) as pool, ThreadPoolExecutor(args.workers) as threads:
        oracle = Oracle(pool, [args.target])

        def draw(k: int) -> object:
            nonlocal next_seed
            cases = [generate_case(GeneratorConfig(n_nodes=args.nodes, seed=next_seed + i))[0] for i in range(k)]
            next_seed += k
            return pack_cases(cases)

        def judge(case: object) -> tuple[object, float]:
            t0 = time.perf_counter()
            verdict = oracle.check(case).verdicts[0]
            return verdict, time.perf_counter() - t0

        list(threads.map(judge, [draw(2) for _ in range(args.workers)]))  # warm-up: imports, first compiles
        for r in range(args.rounds):
            for k in args.ks:
                cases = [draw(k) for _ in range(args.workers * args.per_round)]
                t0 = time.perf_counter()
                judged = list(threads.map(judge, cases))
                wall = time.perf_counter() - t0
                row = rows[k]
                row["seconds"] += wall
                for v, dt in judged:
                    row["packs"] += 1
                    row["programs"] += k
                    if v.symptom.value == "invalid":
                        row["invalid"] += 1
                    else:
                        row["judged"] += k
                        row["per_program"].append(dt / k)
                        row["bugs"] += int(v.is_bug)
            print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{args.workers} worker(s), {args.per_round} pack(s) per worker per k and round; judged/min over wall time")
    print(f"{'k':>3} {'programs':>9} {'judged':>7} {'judged/min':>11} {'median s/program':>17} {'invalid packs':>14} "
          f"{'bug packs':>10}")
    base = None
    for k in args.ks:
        row = rows[k]
        rate = 60.0 * row["judged"] / row["seconds"] if row["seconds"] else 0.0
        base = base or rate
        med = statistics.median(row["per_program"]) if row["per_program"] else float("nan")
        print(f"{k:>3} {row['programs']:>9} {row['judged']:>7} {rate:>11.1f} {med:>17.2f} "
              f"{row['invalid']:>7}/{row['packs']:<6} {row['bugs']:>10}   ({rate / base:.2f}x k=1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
