"""The clean slate's cost: programs judged per minute with a fork server (every test forked from a
warmed template, confined on its own) against workers that serve many tests (the old way).

    .venv/bin/python bench/slate.py --rounds 4 --per-round 3 --pack 8      # 2 workers, as a campaign

Both pools run side by side in one process, each with its own compile cache warmed by a first,
unmeasured pack per worker; each round draws fresh generator packs and judges the same packs on
both slates, one slate after the other, the order alternating from round to round, so machine
noise falls on both alike. Printed per slate: programs judged, programs per minute (programs in
judged packs over the slate's wall seconds), median seconds per program, and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.pack import pack_cases
from nnforge.generator.seeds import generate_case
from nnforge.oracle.oracle import Oracle
from nnforge.oracle.sandbox import WorkerPool

SLATES = ("fork", "reuse")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--pack", type=int, default=8, help="generator programs per test, as a campaign packs them (8)")
    ap.add_argument("--target", default="inductor")
    ap.add_argument("--seed", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--per-round", type=int, default=3, help="packs per worker per slate in each round (3)")
    args = ap.parse_args(argv)
    caches = {s: tempfile.mkdtemp(prefix=f"nnforge-bench-slate-{s}-") for s in SLATES}
    rows = {s: {"programs": 0, "seconds": 0.0, "per_program": [], "invalid": 0, "bugs": 0} for s in SLATES}
    pools = {s: WorkerPool(args.workers, slate=s, inductor_cache_dir=caches[s], warm=(args.target,)) for s in SLATES}
    next_seed = args.seed

    def draw() -> object:
        nonlocal next_seed
        cases = [generate_case(GeneratorConfig(n_nodes=args.nodes, seed=next_seed + i))[0] for i in range(args.pack)]
        next_seed += args.pack
        return pack_cases(cases)

    try:
        with ThreadPoolExecutor(args.workers) as threads:
            oracles = {s: Oracle(pools[s], [args.target]) for s in SLATES}
            for s in SLATES:
                print(f"  {s}: {pools[s].isolation.summary()}", file=sys.stderr)
                t0 = time.perf_counter()
                pools[s].warmup()
                list(threads.map(lambda c: oracles[s].check(c), [draw() for _ in range(args.workers)]))
                print(f"  {s}: warm-up {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
            for r in range(args.rounds):
                packs = [draw() for _ in range(args.workers * args.per_round)]
                order = SLATES if r % 2 == 0 else tuple(reversed(SLATES))
                for s in order:
                    def judge(case: object, s: str = s) -> tuple[object, float]:
                        t0 = time.perf_counter()
                        verdict = oracles[s].check(case).verdicts[0]
                        return verdict, time.perf_counter() - t0

                    t0 = time.perf_counter()
                    judged = list(threads.map(judge, packs))
                    rows[s]["seconds"] += time.perf_counter() - t0
                    for v, dt in judged:
                        if v.symptom.value == "invalid":
                            rows[s]["invalid"] += 1
                            continue
                        rows[s]["programs"] += args.pack
                        rows[s]["per_program"].append(dt / args.pack)
                        rows[s]["bugs"] += int(v.is_bug)
                print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        for pool in pools.values():
            pool.close()
        for path in caches.values():
            shutil.rmtree(path, ignore_errors=True)

    print(f"\nslate cost: {args.rounds} rounds x {args.workers * args.per_round} packs of {args.pack}, "
          f"target {args.target}, {args.workers} workers")
    print(f"{'slate':<8}{'programs':>10}{'programs/min':>14}{'median s/program':>18}{'invalid packs':>15}{'bugs':>6}")
    per_min = {}
    for s in SLATES:
        row = rows[s]
        per_min[s] = 60.0 * row["programs"] / row["seconds"] if row["seconds"] else 0.0
        med = statistics.median(row["per_program"]) if row["per_program"] else float("nan")
        print(f"{s:<8}{row['programs']:>10}{per_min[s]:>14.1f}{med:>18.3f}{row['invalid']:>15}{row['bugs']:>6}")
    if per_min["reuse"]:
        print(f"fork / reuse: {per_min['fork'] / per_min['reuse']:.2f}x programs per minute")
    return 0


if __name__ == "__main__":
    sys.exit(main())
