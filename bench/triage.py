"""Triage benchmark. Section `reduce`: how far the reducer shrinks generator programs with a planted
fault, and what it costs (sandbox queries, seconds).

For each seed, a generator program (default config, --nodes operators) gets a planted fault on
an operator it contains: `faulty_crash:<op>` for even seeds, `faulty_perturb:<op>` for odd ones
(the op is the first of the program's operators, from the middle outwards, whose fault fires).
The reducer then runs with the default passes; we report per case ops and lines before -> after,
queries, seconds, whether the final check verified and whether the signature survived, and the
medians.

    .venv/bin/python bench/triage.py --count 20
    .venv/bin/python bench/triage.py --section reduce --count 40 --nodes 16

Other sections (clustering precision/recall) register in SECTIONS with the same shape:
a function (args) -> list of result rows, printed by `print_table`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.oracle.oracle import Oracle
from nnforge.oracle.sandbox import WorkerPool
from nnforge.triage.reducer import Reducer
from nnforge.triage.signature import signature_of


def _fault_target(pool: Any, case: Any, kind: str, tries: int) -> tuple[str, Any, Any] | None:
    """(target, verdict, case with values) for the first op of `case` whose planted fault fires."""
    ops = list(dict.fromkeys(case.meta.get("ops", [])))
    mid = len(ops) // 2
    order = sorted(range(len(ops)), key=lambda i: abs(i - mid))
    for i in order[:tries]:
        target = f"{kind}:{ops[i]}"
        result = Oracle(pool, [target]).check(case)
        v = result.verdicts[0]
        if v.is_bug and v.symptom.value != "invalid":
            return target, v, result.case
    return None


def reduction_section(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with WorkerPool(size=1, timeout_s=args.timeout_s) as pool:
        pool.warmup()
        for seed in range(args.seed, args.seed + args.count):
            case, _ = generate_case(GeneratorConfig(seed=seed, n_nodes=args.nodes))
            kind = "faulty_crash" if seed % 2 == 0 else "faulty_perturb"
            found = _fault_target(pool, case, kind, args.tries)
            if found is None:
                rows.append({"seed": seed, "target": f"{kind}:-", "skipped": "no planted fault fired"})
                continue
            target, verdict, case = found
            t0 = time.perf_counter()
            res = Reducer(pool, target, timeout_s=args.timeout_s, max_queries=args.max_queries,
                          time_budget_s=args.budget_s).reduce(case, verdict)
            # Crash signatures must survive reduction; wrong-output signatures key on the reduced
            # program by design, so for them only the same-bug check (verified) applies.
            same_sig = (signature_of(verdict, case).digest == signature_of(res.verdict, res.case).digest
                        if verdict.symptom.value not in ("mismatch", "nan_mismatch") else None)
            rows.append({"seed": seed, "target": target, "symptom": verdict.symptom.value,
                         "ops": (res.before["ops"], res.after["ops"]), "lines": (res.before["lines"], res.after["lines"]),
                         "queries": res.queries, "seconds": round(time.perf_counter() - t0, 2),
                         "verified": res.verified, "same_signature": same_sig, "exhausted": res.exhausted})
            print(_row_text(rows[-1]), flush=True)
    return rows


def _row_text(r: dict[str, Any]) -> str:
    if "skipped" in r:
        return f"{r['seed']:>5}  {r['target']:<28} skipped: {r['skipped']}"
    return (f"{r['seed']:>5}  {r['target']:<28} {r['symptom']:<9} ops {r['ops'][0]:>3} -> {r['ops'][1]:<3} "
            f"lines {r['lines'][0]:>3} -> {r['lines'][1]:<3} {r['queries']:>4} q {r['seconds']:>7.2f} s "
            f"{'verified' if r['verified'] else 'NOT VERIFIED'}{' SIGNATURE CHANGED' if r['same_signature'] is False else ''}"
            f"{' (out of ' + r['exhausted'] + ')' if r['exhausted'] else ''}")


def print_reduction_summary(rows: list[dict[str, Any]]) -> None:
    done = [r for r in rows if "skipped" not in r]
    print(f"\nreduced {len(done)} of {len(rows)} cases ({len(rows) - len(done)} skipped: no fault fired)")
    if not done:
        return
    ops_ratio = [r["ops"][1] / max(r["ops"][0], 1) for r in done]
    lines_ratio = [r["lines"][1] / max(r["lines"][0], 1) for r in done]
    print(f"{'':<28}{'median':>10}{'mean':>10}{'max':>10}")
    for name, xs in (("ops before", [r["ops"][0] for r in done]), ("ops after", [r["ops"][1] for r in done]),
                     ("ops after/before", ops_ratio), ("lines before", [r["lines"][0] for r in done]),
                     ("lines after", [r["lines"][1] for r in done]), ("lines after/before", lines_ratio),
                     ("sandbox queries", [r["queries"] for r in done]), ("seconds", [r["seconds"] for r in done])):
        print(f"{name:<28}{statistics.median(xs):>10.2f}{statistics.mean(xs):>10.2f}{max(xs):>10.2f}")
    crashes = [r for r in done if r["same_signature"] is not None]
    print(f"verified (same bug after reduction): {sum(r['verified'] for r in done)}/{len(done)}; "
          f"crash signature kept: {sum(bool(r['same_signature']) for r in crashes)}/{len(crashes)}")


SECTIONS: dict[str, tuple[Callable[[argparse.Namespace], list[dict[str, Any]]],
                          Callable[[list[dict[str, Any]]], None]]] = {
    "reduce": (reduction_section, print_reduction_summary),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--section", choices=sorted(SECTIONS), action="append", help="default: every section")
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--tries", type=int, default=4, help="operators tried per program until a fault fires")
    p.add_argument("--max-queries", type=int, default=300)
    p.add_argument("--budget-s", type=float, default=300.0)
    p.add_argument("--timeout-s", type=float, default=60.0)
    args = p.parse_args()
    for name in args.section or sorted(SECTIONS):
        run, summarise = SECTIONS[name]
        print(f"== {name} ==")
        summarise(run(args))


if __name__ == "__main__":
    main()
