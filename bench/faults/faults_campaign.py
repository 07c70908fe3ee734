"""The campaign half of `bench/faults.py`: one campaign per planted fault, judged as a user would.

Found means surfaced: a cluster in the campaign's table whose `repro.py`, run in a fresh process
with a clean environment, exits 1 with the fault planted and 0 without. Everything else the
fault caused is counted apart: findings whose case reruns as a bug with the fault and passes
without, yet reached no surfaced cluster ("left out"). Those reruns use the case folder's own
values (value search already chose them) in a warm worker pool per state, at most
`--max-rerun` of them per campaign, picked evenly over the campaign.

A missed fault gets its reason: never generated (the fault's wrong branch never ran: every
fault records its firings in a log named by the activation file), generated but judged pass (it
fired, yet no rerun finding shows it), or found but not surfaced (findings show it, no listed
cluster does). Each fault's row is written to `<out>/<fault>/result.json` as soon as it is
judged, and `--resume` keeps the rows already there for the same budget and targets.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import fault_hook
from harness import REPRO_TIMEOUT_S, clean_env, nnforge_exe, planted, print_table


@dataclass
class FaultResult:
    fault: fault_hook.Fault
    campaign: Path
    tests: int = 0
    clusters: int = 0
    found_clusters: list[str] = field(default_factory=list)
    first_found_min: float | None = None
    findings: int = 0
    rerun: int = 0
    triggered: int = 0  # of the reruns: bug with the fault, pass without
    left_out: int = 0  # of those: in no surfaced cluster
    fired: int = 0  # times the fault's wrong branch ran during the campaign
    note: str = ""

    def miss_reason(self) -> str:
        if self.found:
            return ""
        if self.fired == 0:
            return "never generated"
        if self.triggered == 0:
            return f"generated but judged pass (none of {self.rerun} findings rerun shows it)"
        return "found but not surfaced"

    @property
    def found(self) -> bool:
        return bool(self.found_clusters)

    def row(self) -> tuple:
        left = f"{self.left_out} of {self.triggered} triggered ({self.rerun}/{self.findings} rerun)"
        first = "-" if self.first_found_min is None else f"{self.first_found_min:.1f}"
        note = "; ".join(n for n in (self.miss_reason(), self.note) if n)
        return (self.fault.name, self.fault.layer, "yes" if self.found else "no", first, self.tests, self.fired,
                f"{len(self.found_clusters)}/{self.clusters}", left, note)


def run_repro(repro: Path, faults: list[str]) -> int:
    """`python repro.py` in a fresh confined process (as triage checks it), the named faults planted."""
    from nnforge.triage.pipeline import run_repro_once

    with planted(faults):
        code, _ = run_repro_once(repro, timeout_s=REPRO_TIMEOUT_S)
    return code


def run_campaign(fault: fault_hook.Fault, folder: Path, args: argparse.Namespace) -> int:
    targets = args.targets or fault.target
    cmd = [nnforge_exe(), "campaign", "--budget", f"{args.minutes * 60:.0f}s", "--targets", targets,
           "--workers", str(args.workers), "--llm", "none", "--seed", str(args.seed), "--plain", "-o", str(folder)]
    if not getattr(args, "value_bins", True):
        cmd.append("--no-value-bins")
    if getattr(args, "backward_share", None) is not None:
        cmd += ["--backward-share", str(args.backward_share)]
    if getattr(args, "pack", None) is not None:
        cmd += ["--pack", str(args.pack)]
    if getattr(args, "pack_mutants", None) is not None:
        cmd += ["--pack-mutants", str(args.pack_mutants)]
    log = folder.with_suffix(".log")
    fired_log(folder).unlink(missing_ok=True)
    with planted([fault.name], fired_log=fired_log(folder)), open(log, "w") as out:
        p = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=clean_env())
    return p.returncode


def fired_log(folder: Path) -> Path:
    return folder.with_suffix(".fired")


def surfaced_clusters(folder: Path) -> tuple[list[tuple[str, float | None]], set[str]]:
    """(cluster id, campaign seconds when first seen) of every cluster the summary lists."""
    from nnforge.agent.report_data import load_view
    from nnforge.agent.store import STORE_FILE

    view = load_view(folder / STORE_FILE, folder)
    # a store that predates repro checks lists every cluster; a newer one only reproduced ones
    checked = any(c.repro_status != "unchecked" for c in view.clusters)
    rows = [(c.cluster_id, c.first_seen_s) for c in view.clusters if c.listed or not checked]
    return rows, {cid for cid, _ in rows}


def rerun_findings(fault: fault_hook.Fault, folder: Path, exclude: set[str], limit: int) -> tuple[int, int, int, int]:
    """(findings, rerun, triggered, triggered outside `exclude` clusters)."""
    from nnforge.agent.store import STORE_FILE, StoreReader
    from nnforge.core.testcase import TestCase
    from nnforge.oracle.oracle import Oracle
    from nnforge.oracle.sandbox import WorkerPool

    with StoreReader(folder / STORE_FILE, read_only=True) as db:
        rows = db.finding_cases()
    total = len(rows)
    if len(rows) > limit:
        step = len(rows) / limit
        rows = [rows[int(i * step)] for i in range(limit)]
    cases = []
    for case_folder, target, digest in rows:
        try:
            cases.append((TestCase.load(case_folder), target, digest))
        except Exception:
            continue
    verdicts: dict[bool, list[bool]] = {}
    for on in (True, False):
        with planted([fault.name] if on else []), WorkerPool(size=2, timeout_s=120) as pool:
            bugs = []
            for case, target, _ in cases:
                r = Oracle(pool, [target]).check(case)
                bugs.append(r.symptom.is_bug)
            verdicts[on] = bugs
    triggered = [i for i in range(len(cases)) if verdicts[True][i] and not verdicts[False][i]]
    left = [i for i in triggered if cases[i][2] not in exclude]
    return total, len(cases), len(triggered), len(left)


def judge(fault: fault_hook.Fault, folder: Path, args: argparse.Namespace) -> FaultResult:
    from nnforge.agent.store import STORE_FILE, StoreError, StoreReader

    res = FaultResult(fault, folder)
    res.fired = fault_hook.fired_counts(fired_log(folder)).get(fault.name, 0)
    try:
        with StoreReader(folder / STORE_FILE, read_only=True) as db:
            res.tests = db.tests_count()
    except StoreError as e:
        res.note = f"no store: {e}"
        return res
    clusters, _ = surfaced_clusters(folder)
    res.clusters = len(clusters)
    for cid, first_s in sorted(clusters, key=lambda c: (c[1] is None, c[1] or 0.0)):
        repro = folder / "findings" / cid / "repro.py"
        if not repro.exists():
            continue
        if run_repro(repro, [fault.name]) == 1 and run_repro(repro, []) == 0:
            res.found_clusters.append(cid)
            if res.first_found_min is None and first_s is not None:
                res.first_found_min = first_s / 60.0
    try:
        res.findings, res.rerun, res.triggered, res.left_out = rerun_findings(
            fault, folder, set(res.found_clusters), args.max_rerun)
    except Exception as e:  # the table still gets this fault's row
        res.note = f"reruns failed: {type(e).__name__}: {e}"
    return res


HEADER = ("fault", "layer", "found", "minutes to first", "tests", "fired", "clusters showing it",
          "findings left out", "why missed / note")


def _stored_row(folder: Path, args: argparse.Namespace, fault: fault_hook.Fault) -> tuple | None:
    """The row a previous run judged for this fault with the same budget and targets, if any."""
    try:
        data = json.loads((folder / "result.json").read_text())
    except (OSError, ValueError):
        return None
    if (data.get("minutes") != args.minutes or data.get("targets") != (args.targets or fault.target)
            or data.get("value_bins", True) != getattr(args, "value_bins", True)
            or data.get("backward_share") != getattr(args, "backward_share", None)
            or data.get("pack") != getattr(args, "pack", None)
            or data.get("pack_mutants") != getattr(args, "pack_mutants", None) or len(data.get("row", ())) != len(HEADER)):
        return None
    return tuple(data["row"])


def run_benchmark(faults: list[fault_hook.Fault], args: argparse.Namespace) -> int:
    root = args.out or Path(tempfile.mkdtemp(prefix="nnforge-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    rows: list[tuple] = []
    print(f"{len(faults)} fault(s), {args.minutes:g} min each, campaigns under {root}", flush=True)
    for i, fault in enumerate(faults, 1):
        folder = root / fault.name
        stored = _stored_row(folder, args, fault) if getattr(args, "resume", False) else None
        if stored is not None:
            print(f"[{i}/{len(faults)}] {fault.name}: kept from {folder / 'result.json'}", flush=True)
            rows.append(stored)
            continue
        if folder.exists():
            shutil.rmtree(folder)
        t0 = time.time()
        print(f"[{i}/{len(faults)}] {fault.name} ({fault.layer}) on {args.targets or fault.target} ...", flush=True)
        rc = run_campaign(fault, folder, args)
        res = judge(fault, folder, args)
        if rc != 0:
            res.note = (res.note + f"; campaign exit {rc}").strip("; ")
        rows.append(res.row())
        (folder / "result.json").write_text(json.dumps(
            {"minutes": args.minutes, "targets": args.targets or fault.target, "seed": args.seed,
             "value_bins": getattr(args, "value_bins", True), "backward_share": getattr(args, "backward_share", None),
             "pack": getattr(args, "pack", None), "pack_mutants": getattr(args, "pack_mutants", None),
             "found_clusters": res.found_clusters, "row": list(res.row())}, indent=1))
        print(f"    found: {'yes' if res.found else 'no'}; {res.tests} tests; fired {res.fired}; clusters "
              f"{len(res.found_clusters)}/{res.clusters} show it; {time.time() - t0:.0f} s", flush=True)
        (root / "results.json").write_text(json.dumps({"header": HEADER, "rows": rows}, indent=1))
    print_table(HEADER, rows)
    found = sum(r[2] == "yes" for r in rows)
    print(f"\nrecall: {found}/{len(rows)} faults found in {args.minutes:g} min each")
    return 0
