"""Value search benchmark on generator programs (vulnerable operators enabled).

For each program the sandboxed worker runs value search and the eager reference; we report the
share of programs whose every intermediate ends finite, and search time, and why the failures
failed (value_search.FAILURE_CLASSES: what the search saw at its last culprit, or, when random
draws show the op non-finite whatever the values, `diagnose`'s verdict). With --nnsmith, the
same figures for nnsmith's own search on nnsmith's own programs, in its separate virtualenv.
A program that eager PyTorch rejects whatever the values (a generator spec bug, or an eager
one) is counted apart, as "eager-invalid", and left out of the success share; so is a seed
the generator hangs or fails on (listed, with the error on stderr). The search budget
defaults to the product's (core/limits.py).

    .venv/bin/python bench/oracle.py --count 300
    .venv/bin/python bench/oracle.py --count 320 --value-bins all   # programs spread over every value bin
    .venv/bin/python bench/oracle.py --count 300 --backward         # every call also runs a backward
    .venv/bin/python bench/oracle.py --count 200 --nnsmith
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from nnforge.core.backward import differentiable
from nnforge.core.calls import CallStep
from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_cases
from nnforge.oracle.sandbox import WorkerPool

ROOT = Path(__file__).resolve().parent.parent
JOB = "nnforge.oracle.job:run_case"
DIAGNOSE_JOB = "nnforge.oracle.value_search.diagnose:diagnose_program"


GENERATION_TIMEOUT_S = 60.0


def _generate(args: tuple[int, int]) -> tuple[str, list]:
    nodes, seed = args
    case, _ = next(generate_cases(GeneratorConfig(n_nodes=nodes, seed=seed), 1))
    return case.program, [c.to_json() for c in case.calls]


def programs(nodes: int, count: int, seed0: int, hung: list[int],
             broken: list[int] | None = None) -> Iterator[tuple[int, str, list]]:
    """(seed, program, calls) for seeds seed0 .. seed0+count-1, each generated in a child
    process: a solver query that never returns costs that one seed (noted in `hung`), not the
    run; so does a generator error (noted in `broken`, with its message on stderr)."""
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(1)
    try:
        for seed in range(seed0, seed0 + count):
            job = pool.apply_async(_generate, ((nodes, seed),))
            try:
                program, calls = job.get(GENERATION_TIMEOUT_S)
            except multiprocessing.TimeoutError:
                hung.append(seed)
                pool.terminate()
                pool = ctx.Pool(1)
                continue
            except Exception as e:  # a generator bug: report it, measure the rest
                print(f"  generator failed on seed {seed}: {type(e).__name__}: {e}", file=sys.stderr)
                if broken is not None:
                    broken.append(seed)
                continue
            yield seed, program, calls
    finally:
        pool.terminate()


def classify_failure(pool: WorkerPool, program: str, search: dict | None) -> tuple[str, str]:
    """(failure class, operator) of a failed search: `diagnose`'s verdict when it finds the op
    non-finite for every draw, else what the search itself reported."""
    culprit = str((search or {}).get("culprit"))[:40]
    found = pool.call(DIAGNOSE_JOB, {"program": program, "seed": 0})
    if found.ok and found.value.get("failure"):
        return found.value["failure"], str(found.value["op"])
    if not search or "failure" not in search:
        return "search error" if search and search.get("error") else "unknown", culprit
    return str(search["failure"]), culprit


def measure(pool: WorkerPool, nodes: int, count: int, budget_ms: float, seed0: int, diagnose: bool = True,
            dump: Path | None = None, families: list[str] | None = None, backward: bool = False) -> dict:
    """`families`: value bins (oracle/value_bins.py) the programs take in turn; None: no bins.
    `backward`: every call also runs a backward; a gradient that is not finite at the values
    found counts as a failure of the search (the test could not be judged)."""
    searched = success = needed = needed_ok = crashed = invalid = grad_bad = not_differentiable = 0
    per_bin: dict[str, list[int]] = {}  # bin -> [programs searched, all finite, property kept]
    times: list[float] = []
    culprits: dict[str, int] = {}
    failures: dict[str, dict[str, int]] = {}
    hung: list[int] = []
    broken: list[int] = []
    for k, (seed, program, calls) in enumerate(programs(nodes, count, seed0, hung, broken)):
        if k and k % 50 == 0:
            print(f"  {nodes} nodes: {k} programs, {success}/{searched} all finite", file=sys.stderr, flush=True)
        family = families[k % len(families)] if families else None
        if backward:
            if not differentiable(program):  # the campaign gives these no backward step either
                not_differentiable += 1
                continue
            calls = [CallStep.from_json(c).with_backward().to_json() for c in (calls or [{}])]
        out = pool.call(JOB, {"program": program, "calls": calls, "targets": [], "value_bin": family,
                              "search": True, "value_search_budget_ms": budget_ms, "seed": 0})
        if not out.ok:
            crashed += 1
            continue
        s = out.value.get("search")
        if out.value["status"] == "invalid" and "gradient" in str(out.value.get("reason")):
            searched += 1  # values finite, a gradient not: the search did not make the test judgeable
            grad_bad += 1
            culprits["gradient: " + str(out.value.get("reason"))[:50]] = 1 + culprits.get(
                "gradient: " + str(out.value.get("reason"))[:50], 0)
            continue
        if out.value["status"] == "invalid":
            # eager raised on the program's own inputs (the search then stops at once, "program
            # raises"): a generator validity problem, counted apart from value search
            invalid += 1
            continue
        searched += 1
        ok = bool(s and s["success"])
        success += ok
        if family is not None:
            row = per_bin.setdefault(family, [0, 0, 0])
            row[0] += 1
            row[1] += ok
            row[2] += bool(ok and (out.value.get("values") or {}).get("kept"))
        times.append(s["elapsed_ms"] if s else 0.0)
        if s and not s["initially_finite"]:
            needed += 1
            needed_ok += ok
        if s and not ok:
            culprits[str(s.get("culprit"))[:60]] = culprits.get(str(s.get("culprit"))[:60], 0) + 1
        if not ok and dump is not None:
            dump.mkdir(parents=True, exist_ok=True)
            (dump / f"n{nodes}_seed{seed}.py").write_text(f"# culprit: {(s or {}).get('culprit')}\n{program}")
        if not ok and diagnose:
            kind, op = classify_failure(pool, program, s)
            failures.setdefault(kind, {})
            failures[kind][op] = failures[kind].get(op, 0) + 1
    times.sort()
    return {"nodes": nodes, "searched": searched, "success": success, "needed": needed, "needed_ok": needed_ok,
            "crashed": crashed, "invalid": invalid, "generator_hung": hung, "generator_failed": broken, "median_ms": statistics.median(times) if times else 0.0,
            "p90_ms": times[int(0.9 * (len(times) - 1))] if times else 0.0,
            "culprits": sorted(culprits.items(), key=lambda kv: -kv[1])[:8], "failures": failures,
            "per_bin": per_bin, "gradient_not_finite": grad_bad,
            "not_differentiable": not_differentiable}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--nodes", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--budget-ms", type=float, default=VALUE_SEARCH_BUDGET_MS)
    ap.add_argument("--seed", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads of the worker (OMP_NUM_THREADS). With more threads than idle "
                         "cores, OpenMP's spin-waits make small ops 10-100x slower on a shared machine")
    ap.add_argument("--no-diagnose", action="store_true",
                    help="skip the failure breakdown (it reruns each failed program on 24 random draws)")
    ap.add_argument("--dump", type=Path, default=None, metavar="DIR", help="write each failed program to DIR/n<nodes>_seed<seed>.py")
    ap.add_argument("--value-bins", default="none", metavar="all|none|BIN,...",
                    help="value bins the programs take in turn (oracle/value_bins.py); default none")
    ap.add_argument("--backward", action="store_true", help="every call also runs a backward (gradients must be finite)")
    ap.add_argument("--nnsmith", action="store_true")
    ap.add_argument("--nnsmith-venv", type=Path, default=ROOT / ".bench-venv-nnsmith")
    args = ap.parse_args()
    from nnforge.oracle.value_bins import FAMILIES, check_family

    families = (list(FAMILIES) if args.value_bins == "all" else None if args.value_bins == "none"
                else [check_family(b) for b in args.value_bins.split(",")])
    rows = []
    # A campaign worker has imported torch._dynamo long before (every inductor rung needs it); the
    # first backward of some ops imports it too, a one-off second that is not the search's doing.
    with WorkerPool(size=1, timeout_s=60, env={"OMP_NUM_THREADS": str(args.threads)},
                    preload=("torch", "torch._dynamo")) as pool:
        pool.warmup()
        for n in args.nodes:
            t = time.perf_counter()
            rows.append((measure(pool, n, args.count, args.budget_ms, args.seed, not args.no_diagnose, args.dump,
                                 families, args.backward),
                         time.perf_counter() - t))
    hdr = f"{'nodes':>5} {'programs':>8} {'all finite':>11} {'needed search':>14} {'repaired':>9} {'median ms':>10} {'p90 ms':>8}"
    print(hdr)
    print("-" * len(hdr))
    for r, _ in rows:
        rate = 100 * r["success"] / max(1, r["searched"])
        rep = f"{100 * r['needed_ok'] / r['needed']:.1f}%" if r["needed"] else "-"
        print(f"{r['nodes']:>5} {r['searched']:>8} {rate:>10.1f}% {r['needed']:>14} {rep:>9} {r['median_ms']:>10.2f} {r['p90_ms']:>8.2f}")
    for r, secs in rows:
        print(f"  {r['nodes']} nodes: {r['invalid']} eager-invalid, {r['crashed']} worker deaths, "
              f"{r['gradient_not_finite']} with a gradient not finite and {r['not_differentiable']} not differentiable "
              f"(--backward), "
              f"generator hung on seeds {r['generator_hung']}, failed on seeds {r['generator_failed']}, {secs:.0f} s; "
              f"unrepaired culprits: {r['culprits']}")
    if families:
        print("\nper value bin (programs take the bins in turn; 'kept': all finite with the bin's property kept):")
        print(f"{'nodes':>5} {'bin':>9} {'programs':>8} {'all finite':>11} {'kept':>7}")
        for r, _ in rows:
            for b in families:
                n, ok, kept = r["per_bin"].get(b, [0, 0, 0])
                print(f"{r['nodes']:>5} {b:>9} {n:>8} {100 * ok / max(1, n):>10.1f}% {100 * kept / max(1, n):>6.1f}%")
    if any(r["failures"] for r, _ in rows):
        print("\nfailure breakdown (class: programs; top operators):")
        for r, _ in rows:
            print(f"  {r['nodes']} nodes:")
            for kind, ops in sorted(r["failures"].items(), key=lambda kv: -sum(kv[1].values())):
                top = ", ".join(f"{op} {k}" for op, k in sorted(ops.items(), key=lambda kv: -kv[1])[:6])
                print(f"    {kind:<28} {sum(ops.values()):>4}  ({top})")
    if args.nnsmith:
        py = args.nnsmith_venv / "bin" / "python"
        print("\nnnsmith's own search (PracticalHybridSearch, its torch opset with vulnerable ops):")
        for n in args.nodes:
            if not py.exists():
                print("  nnsmith virtualenv missing: run bench/generation.py --nnsmith first to create it")
                break
            r = subprocess.run([str(py), str(ROOT / "bench" / "nnsmith_probe.py"), str(n), str(args.count), "search"],
                               capture_output=True, text=True)
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
            print(f"  {n} nodes: " + (lines[-1] if lines else f"did not run: {r.stderr.strip().splitlines()[-1:]}"))


if __name__ == "__main__":
    main()
