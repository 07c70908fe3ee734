"""Clustering precision and recall on planted faults (the clustering half of the triage benchmark).

Each planted fault (`faulty_crash:sin`, `faulty_perturb:add`, ...) is one true bug. For each we
generate programs that contain its op, judge each program on that fault's target only, record
the bugs as findings in a fresh campaign store, and run triage (optionally reducing each
finding first). Pairwise precision: the share of finding pairs put in one cluster that are one
fault; pairwise recall: the share of pairs of one fault that share a cluster.

    .venv/bin/python bench/triage_clusters.py --per-fault 6
    .venv/bin/python bench/triage_clusters.py --per-fault 4 --reduce --budget-s 40
    # a Dynamo fault of the fault benchmark, planted in a clone of its own:
    .venv/bin/python bench/faults.py on dynamo_module_int_setattr_not_replayed
    .venv/bin/python bench/triage_clusters.py --faults inductor --cases side_effects --per-fault 8 --reduce
    .venv/bin/python bench/faults.py off
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from nnforge.agent.cmd_triage import import_cases, triage_findings
from nnforge.agent.store import Store
from nnforge.core.settings import load_settings
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.oracle.sandbox import WorkerPool
from nnforge.triage.cluster import pairwise_precision_recall

FAULTS = ("faulty_crash:sin", "faulty_crash:exp", "faulty_perturb:add", "faulty_perturb:mul", "faulty_segv:relu",
          "faulty_lost_write")
OPS = ("sin", "exp", "add", "mul", "relu", "neg", "abs", "tanh", "sub", "cos")


def cases_with_op(op: str, count: int, seed0: int) -> list:
    out: dict[str, object] = {}
    seed = seed0
    while len(out) < count:
        case, _ = generate_case(GeneratorConfig(n_nodes=5, seed=seed, ops=OPS, dtypes=("float32",)))
        seed += 1
        if op in case.meta["ops"]:
            out.setdefault(case.case_id, case)
    return list(out.values())


def cases_with_side_effects(count: int, seed0: int) -> list:
    """Generator programs rewritten by the F1 mutator (a call counter, a list the module owns, a
    global list): the writes `faulty_lost_write` loses, carried by whatever ops each program has."""
    import random

    from nnforge.mutators.base import get_mutator

    mutator = get_mutator("f1_attribute_side_effects")
    out: dict[str, object] = {}
    seed = seed0
    while len(out) < count:
        case, _ = generate_case(GeneratorConfig(n_nodes=5, seed=seed, ops=OPS, dtypes=("float32",)))
        seed += 1
        mutant = mutator.mutate(case, random.Random(seed)) if mutator.applicable(case) else None
        if mutant is not None:
            out.setdefault(mutant.case_id, mutant)
    return list(out.values())


def cases_for(fault: str, count: int, seed0: int, kind: str = "auto") -> list:
    """Programs that can hit `fault`: with its op (`faulty_crash:sin`), or with side effects
    (`faulty_lost_write`, or any target with `--cases side_effects`, e.g. `inductor` with a fault
    of bench/faults.py planted by `bench/faults.py on FAULT`)."""
    if kind == "side_effects" or kind == "auto" and fault == "faulty_lost_write":
        return cases_with_side_effects(count, seed0)
    return cases_with_op(fault.split(":", 1)[1], count, seed0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-fault", type=int, default=6, help="programs per planted fault")
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--reduce", action="store_true", help="reduce every finding before clustering")
    ap.add_argument("--budget-s", type=float, default=40.0, help="time budget per reduction")
    ap.add_argument("--max-queries", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--cases", choices=("auto", "side_effects"), default="auto",
                    help="programs per fault: auto (with the fault's op; side effects for faulty_lost_write) or "
                         "side_effects (generator programs with the F1 rewrite, for a planted Dynamo fault)")
    args = ap.parse_args()

    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    settings = load_settings(value_search_budget_ms=100.0, llm_provider="none")
    work = Path(tempfile.mkdtemp(prefix="nnforge-bench-triage-"))
    camp = work / "camp"
    start = time.monotonic()
    with Store(camp) as store, WorkerPool(size=1, timeout_s=settings.worker_timeout_s,
                                          inductor_cache_dir=settings.inductor_cache_dir) as pool:
        for k, fault in enumerate(faults):
            inbox = work / "inbox" / fault.replace(":", "_")
            for i, case in enumerate(cases_for(fault, args.per_fault, args.seed + 10_000 * k, args.cases)):
                case.save(inbox / f"c{i:02d}")
            import_cases(store, pool, inbox, camp, [fault], settings)
        judged_s = time.monotonic() - start
        outcomes = triage_findings(store, pool, camp, settings=settings, reduce=args.reduce, budget_s=args.budget_s,
                                   max_queries=args.max_queries, use_llm=False)
        findings = [f for f in store.findings() if f.status == "triaged"]
        clusters = store.clusters()
    truth = {f.finding_id: f.target for f in findings}
    predicted = {f.finding_id: f.signature_digest for f in findings}
    precision, recall = pairwise_precision_recall(truth, predicted)
    per_fault = {fault: len({predicted[f] for f in truth if truth[f] == fault}) for fault in faults}
    figures = {
        "faults": len(faults), "cases": len(faults) * args.per_fault, "findings": len(findings),
        "failed_triage": sum(1 for o in outcomes if o.error), "clusters": len(clusters),
        "clusters_per_fault": per_fault, "pairwise_precision": round(precision, 4), "pairwise_recall": round(recall, 4),
        "reduced": args.reduce, "how": dict(Counter(o.how for o in outcomes if not o.error)),
        "judge_s": round(judged_s, 1), "total_s": round(time.monotonic() - start, 1), "campaign": str(camp),
    }
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "nnforge-test-inductor-cache"))
    main()
