"""What a backward step costs: tests per minute on a target with and without one, side by side.

    .venv/bin/python bench/backward_cost.py --programs 30 --nodes 10

Each generator program that autograd accepts (core/backward.differentiable) is judged twice in a
row on one sandbox worker, as a campaign test would be (value search, the top rung, the ladder
on a disagreement): forward only, then with a backward on its call; which goes first alternates,
so that machine noise and the Inductor cache fall on both alike. Printed: tests, tests per
minute, median seconds per test, verdicts, for each kind, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter

from nnforge.core.backward import differentiable
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.oracle.oracle import Oracle
from nnforge.oracle.sandbox import WorkerPool


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--target", default="inductor")
    ap.add_argument("--seed", type=int, default=20_000)
    args = ap.parse_args(argv)
    seconds: dict[str, list[float]] = {"forward": [], "forward + backward": []}
    verdicts: dict[str, Counter] = {k: Counter() for k in seconds}
    with WorkerPool(1) as pool:
        oracle = Oracle(pool, [args.target])
        oracle.check(generate_case(GeneratorConfig(n_nodes=args.nodes, seed=args.seed - 1))[0])  # warm-up
        seed, done = args.seed, 0
        while done < args.programs:
            case, _ = generate_case(GeneratorConfig(n_nodes=args.nodes, seed=seed))
            seed += 1
            if not differentiable(case.program):
                continue
            pair = [("forward", case), ("forward + backward", case.with_(calls=tuple(c.with_backward() for c in case.calls)))]
            for kind, c in (pair if done % 2 == 0 else pair[::-1]):
                t0 = time.perf_counter()
                v = oracle.check(c).verdicts[0]
                seconds[kind].append(time.perf_counter() - t0)
                verdicts[kind][v.symptom.value] += 1
            done += 1
            if done % 10 == 0:
                print(f"  {done}/{args.programs} programs", file=sys.stderr, flush=True)
    print(f"{'calls':>20} {'tests':>6} {'tests/min':>10} {'median s':>9}  verdicts")
    rates = {}
    for kind, secs in seconds.items():
        rates[kind] = 60.0 * len(secs) / sum(secs) if secs else 0.0
        print(f"{kind:>20} {len(secs):>6} {rates[kind]:>10.1f} {statistics.median(secs):>9.2f}  "
              f"{dict(verdicts[kind])}")
    if rates["forward"]:
        print(f"with a backward: {rates['forward + backward'] / rates['forward']:.2f}x the tests per minute of forward only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
