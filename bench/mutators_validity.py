"""Per-mutator eager validity over generator seeds: how many mutants import, build and run every
call of their sequence in eager, twice identically (mutators/validate.py), in sandbox workers.

    .venv/bin/python bench/mutators_validity.py --seeds 50 [--nodes 6] [--chain 3]

Mutators that take a probe get one (an eager run in a worker), as the CLI gives them; their
candidates are filtered, so their validity is high by construction and "made" says how often a
candidate survived.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import defaultdict

from rich.console import Console
from rich.table import Table

from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.mutators.base import all_mutators, mutate_chain
from nnforge.mutators.validate import check_case, eager_probe
from nnforge.oracle.sandbox import WorkerPool


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=6)
    ap.add_argument("--chain", type=int, default=3, help="also measure chains of this many random mutators")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-probe", action="store_true", help="raw validity: give probe-taking mutators no probe")
    ap.add_argument("--all-dtypes", action="store_true", help="generator placeholders of every dtype, not only float32")
    args = ap.parse_args()
    muts = all_mutators()
    stats: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    failures: dict[str, list[str]] = defaultdict(list)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache, WorkerPool(size=args.workers, timeout_s=30, inductor_cache_dir=cache) as pool:
        pool.warmup()
        probe = eager_probe(pool.call)
        for seed in range(args.seeds):
            case, _ = generate_case(GeneratorConfig(n_nodes=args.nodes, seed=seed,
                                                   **({} if args.all_dtypes else {"dtypes": ("float32",)})))
            base = check_case(pool.call, case)
            if not base.ok:
                stats["<seed>"]["invalid"] += 1
                continue
            stats["<seed>"]["valid"] += 1
            for name, m in sorted(muts.items()):
                s = stats[name]
                if not m.applicable(case):
                    continue
                s["applicable"] += 1
                mutant = m.mutate(case, random.Random(seed), probe if m.uses_probe and not args.no_probe else None)
                if mutant is None:
                    s["none"] += 1
                    continue
                s["made"] += 1
                res = check_case(pool.call, mutant)
                s["valid" if res.ok else "invalid"] += 1
                if not res.ok:
                    failures[name].append(f"seed {seed}: {res.stage}: {res.error[:160]}")
            # seq_state needs attributes/globals a rule introduced: measure it on such mutants.
            rule = muts[("g2_state_guards", "g1_changing_scalars", "f1_attribute_side_effects", "e1_globals_closures")[seed % 4]]
            first = rule.mutate(case, random.Random(seed))
            mutant = muts["seq_state"].mutate(first, random.Random(seed)) if first is not None else None
            if mutant is not None:
                key = "<seq_state after a state rule>"
                res = check_case(pool.call, mutant)
                stats[key]["made"] += 1
                stats[key]["valid" if res.ok else "invalid"] += 1
                if not res.ok:
                    failures[key].append(f"seed {seed} {mutant.meta.get('chain')}: {res.stage}: {res.error[:160]}")
            if args.chain:
                mutant = mutate_chain(case, random.Random(1000 + seed), args.chain, probe=probe)
                res = check_case(pool.call, mutant)
                key = f"<chain of {args.chain}>"
                stats[key]["made"] += 1
                stats[key]["valid" if res.ok else "invalid"] += 1
                if not res.ok:
                    failures[key].append(f"seed {seed} {mutant.meta.get('chain')}: {res.stage}: {res.error[:160]}")
    table = Table(title=f"eager validity of mutants over {args.seeds} generator seeds ({time.perf_counter() - start:.0f} s)")
    for col in ("mutator", "category", "applicable", "made", "valid", "validity"):
        table.add_column(col, justify="left" if col in ("mutator", "category") else "right")
    for name, s in sorted(stats.items()):
        made = s["valid"] + s["invalid"]
        cat = muts[name].category if name in muts else ""
        applicable = s["applicable"] if name in muts else made
        table.add_row(name, cat, str(applicable), str(made), str(s["valid"]),
                      f"{100.0 * s['valid'] / made:.1f}%" if made else "-")
    console = Console()
    console.print(table)
    for name, lines in sorted(failures.items()):
        console.print(f"[bold]{name}[/bold]")
        for line in lines[:5]:
            console.print(f"  {line}")


if __name__ == "__main__":
    main()
