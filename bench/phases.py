"""Where a test's seconds go, phase by phase, on generator programs and their mutants (#19).

Each program runs in a sandboxed worker through `oracle/phase_profile.py`: value search, the
eager reference, then every rung of the target's ladder alone (as a disagreement would make
the ladder run them), with torch.compile's own timers split into Dynamo, AOTAutograd, Inductor
lowering, code generation, the C++ compiler, loading, and running + comparing. The worker's
Inductor cache is the campaign's (warm after the first programs); the first `--warmup`
programs are run and left out of the table, as a long campaign would have paid them long ago.

    .venv/bin/python bench/phases.py --count 30 --nodes 10
    .venv/bin/python bench/phases.py --count 30 --nodes 10 --mutants   # every other program a mutant

Prints, per phase, the total and median seconds per test and its share of the whole, how many
times the C++ compiler ran and what one run costs, and per rung its share: what running only
the top rung saves on a test that passes.

(Named phases.py, not profile.py: a script's folder comes first on sys.path, and a `profile`
there shadows the standard library's, which torch._dynamo imports through cProfile.)
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.oracle.phase_profile import PHASES
from nnforge.oracle.sandbox import WorkerPool

JOB = "nnforge.oracle.phase_profile:profile_case"


def mutant_of(case, rng: random.Random):
    """One offline mutant of `case` (any category that applies), or None."""
    from nnforge.mutators.base import all_mutators

    options = [m for m in all_mutators().values() if not getattr(m, "uses_llm", False)]
    rng.shuffle(options)
    for m in options:
        if m.uses_probe:
            continue
        try:
            if m.applicable(case):
                out = m.mutate(case, rng, None)
                if out is not None:
                    return out
        except Exception:
            continue
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--target", default="inductor")
    ap.add_argument("--seed", type=int, default=500_000)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--mutants", action="store_true", help="every other program a mutant of the one before")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    per_test: list[dict[str, float]] = []
    rungs: dict[str, list[float]] = {}
    compiles: list[int] = []
    by_kind: dict[str, list[tuple[float, int]]] = {}  # kind -> (seconds, C++ compiler runs) per test
    kinds = {"seed": 0, "mutant": 0}
    t_start = time.perf_counter()
    with WorkerPool(size=1, timeout_s=600, preload=("torch", "torch._dynamo")) as pool:
        pool.warmup()
        k = 0
        while len(per_test) < args.count:
            case, _ = generate_case(GeneratorConfig(n_nodes=args.nodes, seed=args.seed + k))
            kind = "seed"
            if args.mutants and k % 2:
                m = mutant_of(case, rng)
                if m is not None:
                    case, kind = m, "mutant"
            k += 1
            out = pool.call(JOB, {"program": case.program, "calls": [c.to_json() for c in case.calls], "seed": 0,
                                  "target": args.target})
            if not out.ok or out.value.get("status") != "ok":
                print(f"  program {k}: {out.status} {out.exc_type or out.value.get('reason') if out.ok else ''}"[:160],
                      file=sys.stderr)
                continue
            if k <= args.warmup:
                continue
            per_test.append(out.value["phases"])
            compiles.append(int(out.value.get("cpp_compiles", 0)))
            by_kind.setdefault(kind, []).append((sum(out.value["phases"].values()), compiles[-1]))
            kinds[kind] += 1
            for r, s in out.value["rungs"].items():
                rungs.setdefault(r, []).append(s)
            if len(per_test) % 10 == 0:
                print(f"  {len(per_test)} tests profiled", file=sys.stderr, flush=True)
    total = sum(sum(t.values()) for t in per_test) or 1.0
    print(f"\n{len(per_test)} tests on {args.target} ({kinds['seed']} generator programs, {kinds['mutant']} mutants), "
          f"{args.nodes} nodes, {time.perf_counter() - t_start:.0f} s\n")
    print("| phase | total s | median s/test | share |\n|---|---|---|---|")
    for phase in PHASES:
        vals = [t.get(phase, 0.0) for t in per_test]
        print(f"| {phase} | {sum(vals):.1f} | {statistics.median(vals):.3f} | {100 * sum(vals) / total:.1f}% |")
    cpp_s = sum(t.get("c++ compile", 0.0) for t in per_test)
    if sum(compiles):
        print(f"\nC++ compiler runs: {sum(compiles)} ({statistics.median(compiles):.0f} per test, median), "
              f"{cpp_s / sum(compiles):.2f} s each on average")
    if len(by_kind) > 1:
        print("\n| kind | tests | median s/test | median C++ runs/test |\n|---|---|---|---|")
        for kind, rows in by_kind.items():
            print(f"| {kind} | {len(rows)} | {statistics.median(r[0] for r in rows):.2f} | "
                  f"{statistics.median(r[1] for r in rows):.0f} |")
    rung_total = sum(sum(v) for v in rungs.values()) or 1.0
    print("\n| rung | total s | median s/test | share of rung time |\n|---|---|---|---|")
    for r, v in rungs.items():
        print(f"| {r} | {sum(v):.1f} | {statistics.median(v):.3f} | {100 * sum(v) / rung_total:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
