"""Mutators benchmark: validity, reach and (for sequences) statefulness, per mutator and category.

    .venv/bin/python bench/mutators.py [--seeds 200] [--nodes 6] [--workers 2]

On N float32 generator seeds (seeds that do not run in eager themselves are skipped and counted):
- validity: the fraction of mutants that run in eager, twice identically (mutators/validate.py);
  target >= 95% for every offline mutator;
- reach: of the valid mutants, the fraction that show their category's signal in the compiler more
  than their seed does, measured from TorchDynamo itself (mutators/reach.py: graph breaks and
  reasons, recompiles and guard failures, guards installed, ops/dtypes/symbolic inputs of the
  captured graphs; the rule per category is printed under the table);
- stateful: for sequence mutators, the fraction where the run with compiler state retained and the
  run with the cache reset before every call differ (a guard failure and recompile on a later call,
  or another graph running on some call); "w/o grad mode" leaves out guard failures that are only
  the grad mode flipping (seeds make their first call under no_grad; appended plain calls do not).
Everything runs in sandbox workers; probe-taking mutators get a probe, as the CLI gives them.
The LLM mutator is not measured here (it needs an endpoint); its fallback is these rules.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.console import Console
from rich.table import Table

from nnforge.core.testcase import TestCase
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.mutators.base import CATEGORIES, STATEFUL, all_mutators
from nnforge.mutators.reach import MEASURE_FN, REACH_RULES, reach, stateful_differs
from nnforge.mutators.validate import check_case, eager_probe, payload_for
from nnforge.oracle.sandbox import WorkerPool

STATE_RULES = ("g2_state_guards", "g1_changing_scalars", "f1_attribute_side_effects", "e1_globals_closures")
MODE_RULE = "k1_random_ops"  # its dropout variant reads self.training


def mode_reader(rule, case: TestCase, seed: int) -> TestCase | None:
    """A mutant of `case` whose forward reads self.training (a few draws of the dropout rule), or None."""
    for k in range(6):
        m = rule.mutate(case, random.Random(seed * 7 + k))
        if m is not None and "self.training" in m.program:
            return m
    return None


def measure(pool: WorkerPool, case: TestCase, reset_run: bool) -> dict[str, Any]:
    out = pool.call(MEASURE_FN, {**payload_for(case), "reset_run": reset_run})
    if not out.ok:
        return {"ok": False, "error": f"{out.status}: {out.exc_type or ''} {(out.exc_message or '')[:200]}"}
    return out.value


def one_seed(pool: WorkerPool, seed: int, case: TestCase, stats, failures, lock: threading.Lock) -> None:
    muts = all_mutators()
    probe = eager_probe(pool.call)
    if not check_case(pool.call, case).ok:
        with lock:
            stats["<seed>"]["invalid"] += 1
        return
    base = measure(pool, case, reset_run=False)
    with lock:
        stats["<seed>"]["valid"] += 1
        stats["<seed>"]["compile_error"] += int(not base.get("ok"))
    jobs: list[tuple[str, str, TestCase | None, bool]] = []  # (row, category, mutant, applicable)
    for name, m in sorted(muts.items()):
        if not m.applicable(case):
            continue
        jobs.append((name, m.category, m.mutate(case, random.Random(seed), probe if m.uses_probe else None), True))
    # seq_state needs attributes/globals a rule introduced, seq_mode a program that reads the mode: measure
    # them on such mutants, with the rule's own call sequence dropped (g1/g2 append calls that recompile by
    # themselves, which would be credited to the sequence mutator).
    first = muts[STATE_RULES[seed % len(STATE_RULES)]].mutate(case, random.Random(seed))
    if first is not None:
        first = first.with_(calls=case.calls)
        jobs.append(("seq_state (after a state rule)", STATEFUL, muts["seq_state"].mutate(first, random.Random(seed)), True))
    if not muts["seq_mode"].applicable(case):
        reader = mode_reader(muts[MODE_RULE], case, seed)
        if reader is not None:
            jobs.append(("seq_mode (after a dropout rule)", STATEFUL, muts["seq_mode"].mutate(reader, random.Random(seed)),
                         True))
    for row, category, mutant, _ in jobs:
        rec: dict[str, int] = defaultdict(int)
        rec["applicable"] = 1
        if mutant is None:
            rec["none"] = 1
        else:
            rec["made"] = 1
            res = check_case(pool.call, mutant)
            rec["valid"] = int(res.ok)
            if not res.ok:
                with lock:
                    failures[row].append(f"seed {seed}: {res.stage}: {res.error[:160]}")
            else:
                m_rec = measure(pool, mutant, reset_run=category == STATEFUL or len(mutant.calls) > 1)
                rec["measured"] = int(bool(m_rec.get("ok")))
                rec["compile_error"] = int(not m_rec.get("ok"))
                # a sequence mutant's seed is the program with its own sequence
                rec["reach"] = int(reach(category, m_rec, base))
                if category == STATEFUL:
                    rec["differs"] = int(stateful_differs(m_rec))
                    rec["differs_not_grad"] = int(stateful_differs(m_rec, ignore_grad_mode=True))
        with lock:
            for k, v in rec.items():
                stats[row][k] += v
            stats[row]["_category"] = category  # type: ignore[assignment]


def pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    stats: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    failures: dict[str, list[str]] = defaultdict(list)
    lock = threading.Lock()
    start = time.perf_counter()
    # The z3 generator is not thread-safe: make every seed first, then mutate and measure in threads.
    cases = [generate_case(GeneratorConfig(n_nodes=args.nodes, seed=s, dtypes=("float32",)))[0] for s in range(args.seeds)]
    with tempfile.TemporaryDirectory() as cache, WorkerPool(size=args.workers, timeout_s=60, inductor_cache_dir=cache) as pool:
        pool.warmup()
        done = [0]

        def seed_with_progress(s: int) -> None:
            one_seed(pool, s, cases[s], stats, failures, lock)
            with lock:
                done[0] += 1
                if done[0] % 10 == 0 or done[0] == args.seeds:
                    print(f"  {done[0]}/{args.seeds} seeds in {time.perf_counter() - start:.0f} s",
                          file=sys.stderr, flush=True)

        with ThreadPoolExecutor(max_workers=args.workers) as ex:
            list(ex.map(seed_with_progress, range(args.seeds)))
    elapsed = time.perf_counter() - start
    seeds = stats.pop("<seed>")
    console = Console(width=200)
    table = Table(title=f"mutators over {args.seeds} generator seeds ({seeds['valid']} valid seeds, "
                        f"{seeds['compile_error']} of them fail under Dynamo; {elapsed:.0f} s)")
    for col in ("category", "mutator", "applicable", "made", "valid", "validity", "reach", "stateful differs",
                "differs w/o grad mode", "compile err"):
        table.add_column(col, justify="left" if col in ("category", "mutator") else "right")
    order = {c: i for i, c in enumerate(CATEGORIES)}
    rows = sorted(stats.items(), key=lambda kv: (order[kv[1]["_category"]], kv[0]))
    per_cat: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, s in rows:
        cat = s["_category"]
        for k in ("made", "valid", "measured", "reach", "differs"):
            per_cat[cat][k] += s[k]
        table.add_row(cat, name, str(s["applicable"]), str(s["made"]), str(s["valid"]), pct(s["valid"], s["made"]),
                      pct(s["reach"], s["measured"]), pct(s["differs"], s["measured"]) if cat == STATEFUL else "",
                      pct(s["differs_not_grad"], s["measured"]) if cat == STATEFUL else "",
                      str(s["compile_error"]))
    console.print(table)
    cats = Table(title="per category")
    for col in ("category", "validity", "reach", "reach measured as"):
        cats.add_column(col, overflow="fold")
    for cat in CATEGORIES:
        c = per_cat.get(cat)
        if not c:
            continue
        cats.add_row(cat, pct(c["valid"], c["made"]), pct(c["reach"], c["measured"]), REACH_RULES[cat][0])
    console.print(cats)
    for name, lines in sorted(failures.items()):
        console.print(f"[bold]{name}[/bold] invalid mutants:")
        for line in lines[:5]:
            console.print(f"  {line}")


if __name__ == "__main__":
    main()
