"""Several planted faults at once, one campaign: the morning list a user reads when the compiler
has many bugs, and which listed cluster is which bug.

Every fault named is planted for the whole campaign (the defaults otherwise). Afterwards each
cluster the summary lists is attributed: its `repro.py` runs in a fresh confined process (as
triage checks it, two at a time) with every fault planted, then with none, then once without
each fault it fired in the first run. The faults whose removal makes it pass are its cause. A cluster whose
repro fails with no fault planted matches none: a bug of the unmodified compiler, or a false
alarm, said as such. When the first run fired nothing removable, the faults are halved and
halved again (a group whose removal makes the repro pass holds a cause).

    .venv/bin/python bench/faults.py together --targets inductor --minutes 20   # every inductor-target fault
    .venv/bin/python bench/faults.py together --targets tvm --minutes 10
    .venv/bin/python bench/faults.py together F1 F2 --minutes 5 --targets inductor

Written to `<out>/together.json` and printed: per fault, whether it surfaced and in how many
listed clusters (the goal is exactly 1); per listed cluster, its title and attribution; and the
findings still waiting when the campaign ended (the goal is 0).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import fault_hook
from harness import clean_env, nnforge_exe, planted, print_table


def repro_runs(repros: list[Path], faults: list[str], workers: int = 2) -> list[tuple[int, set[str]]]:
    """(exit code, faults that fired) of each `python repro.py`, each in a fresh confined process,
    `workers` at a time, with the same faults planted for all of them."""
    from concurrent.futures import ThreadPoolExecutor

    from nnforge.triage.pipeline import run_repro_once

    def one(repro: Path) -> tuple[int, set[str]]:
        code, output = run_repro_once(repro)
        fired = {line.split(fault_hook.FIRED_MARK, 1)[1].strip() for line in output.splitlines()
                 if fault_hook.FIRED_MARK in line}
        return code, fired & set(faults)

    if not repros:
        return []
    with planted(faults, fired_stderr=True), ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        return list(ex.map(one, repros))


def attribute_all(repros: list[Path], faults: list[str], workers: int = 2) -> list[dict]:
    """Which planted faults each repro needs: {"all": rc, "none": rc, "fired", "causes", "runs", "how"}.

    The runs that share a planting go together: every repro with all faults, then with none,
    then, per fault that fired somewhere, those that fired it without it."""
    with_all = repro_runs(repros, faults, workers)
    with_none = repro_runs(repros, [], workers)
    out = []
    for (rc_all, fired), (rc_none, _) in zip(with_all, with_none):
        d = {"all": rc_all, "none": rc_none, "fired": sorted(fired), "causes": [], "runs": 2}
        if rc_all != 1:
            d["how"] = f"does not reproduce with the faults planted (exit {rc_all})"
        elif rc_none == 1:
            d["how"] = "fails with no fault planted: matches no fault"
        else:
            d["how"] = "removal of a fault that fired"
        out.append(d)
    for fault in sorted({f for d in out for f in d["fired"]}):
        todo = [i for i, d in enumerate(out) if fault in d["fired"] and d["how"].startswith("removal")]
        for i, (rc, _) in zip(todo, repro_runs([repros[i] for i in todo], [f for f in faults if f != fault], workers)):
            out[i]["runs"] += 1
            if rc != 1:
                out[i]["causes"].append(fault)
    for i, d in enumerate(out):  # fired nothing it needs: halve the whole set, one repro at a time
        if d["how"].startswith("removal") and not d["causes"]:
            d["how"] = "group removal"
            todo = [sorted(set(faults))]
            while todo:
                group = todo.pop()
                d["runs"] += 1
                if repro_runs([repros[i]], [f for f in faults if f not in group], 1)[0][0] == 1:
                    continue  # nothing in the group is needed
                if len(group) == 1:
                    d["causes"].append(group[0])
                else:
                    todo += [group[: len(group) // 2], group[len(group) // 2:]]
        d["causes"] = sorted(d["causes"])
    return out


def early_key_agreement(store: Path) -> dict:
    """How often a finding's early key (set when it was recorded) agrees with where its reduction
    ended: of the keys with two or more reduced findings, those whose reductions all reached one
    cluster; and of the reduced findings, those whose cluster is their key's most common one."""
    import sqlite3
    from collections import Counter, defaultdict

    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT pkey, signature_digest FROM findings WHERE status = 'triaged' "
                          "AND pkey IS NOT NULL AND signature_digest IS NOT NULL").fetchall()
    finally:
        db.close()
    by_key: dict[str, Counter] = defaultdict(Counter)
    for pkey, digest in rows:
        by_key[pkey][digest] += 1
    multi = {k: c for k, c in by_key.items() if sum(c.values()) >= 2}
    keys_per_cluster: Counter = Counter(d for c in by_key.values() for d in c)
    return {"reduced": len(rows), "early keys": len(by_key), "clusters": len(keys_per_cluster),
            "keys reduced twice or more": len(multi), "of those, one cluster": sum(1 for c in multi.values() if len(c) == 1),
            "reduced findings in their key's usual cluster": sum(c.most_common(1)[0][1] for c in by_key.values()),
            "clusters reached from several early keys": sum(1 for n in keys_per_cluster.values() if n > 1)}


def run_together(faults: list[fault_hook.Fault], args: argparse.Namespace) -> int:
    from nnforge.agent.report_data import load_view
    from nnforge.agent.store import STORE_FILE, StoreReader

    root = args.out or Path(tempfile.mkdtemp(prefix="nnforge-together-"))
    root.mkdir(parents=True, exist_ok=True)
    folder = root / "campaign"
    names = [f.name for f in faults]
    targets = args.targets or ",".join(sorted({f.target for f in faults}))
    cmd = [nnforge_exe(), "campaign", "--budget", f"{args.minutes * 60:.0f}s", "--targets", targets,
           "--workers", str(args.workers), "--llm", "none", "--seed", str(args.seed), "--plain", "-o", str(folder)]
    print(f"{len(names)} faults planted at once, {args.minutes:g} min on {targets}: {folder}", flush=True)
    t0 = time.time()
    with planted(names), open(root / "campaign.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=clean_env()).returncode
    campaign_s = time.time() - t0
    view = load_view(folder / STORE_FILE, folder)
    with StoreReader(folder / STORE_FILE, read_only=True) as db:
        by_status = dict(db.findings_by_status())
        tests = db.tests_count()
    listed = [c for c in view.clusters if c.listed]
    print(f"campaign exit {rc} after {campaign_s / 60:.1f} min: {tests} tests, {sum(by_status.values())} findings "
          f"({by_status}), {len(view.clusters)} clusters, {len(listed)} listed; attributing ...", flush=True)
    t1 = time.time()
    repros = [folder / "findings" / c.cluster_id / "repro.py" for c in listed]
    judged = attribute_all(repros, names, args.workers)
    clusters = [{"cluster": c.cluster_id, "title": c.title, "findings": c.count, **a} for c, a in zip(listed, judged)]
    for c in clusters:
        print(f"  {c['cluster']} {c['title'][:90]}: {', '.join(c['causes']) or c['how']} ({c['runs']} runs)", flush=True)
    print(f"attributed {len(clusters)} clusters in {time.time() - t1:.0f} s", flush=True)
    per_fault = []
    for name in names:
        mine = [c for c in clusters if name in c["causes"]]
        per_fault.append({"fault": name, "surfaced": bool(mine), "listed clusters": len(mine),
                          "clusters": [c["cluster"] for c in mine]})
    agreement = early_key_agreement(folder / STORE_FILE)
    result = {"faults": names, "targets": targets, "minutes": args.minutes, "campaign_exit": rc,
              "early_key_agreement": agreement,
              "tests": tests, "findings": by_status, "waiting": by_status.get("new", 0),
              "clusters": len(view.clusters), "listed": len(listed), "per_fault": per_fault,
              "listed_clusters": clusters}
    (root / "together.json").write_text(json.dumps(result, indent=1))
    print_table(("fault", "surfaced", "listed clusters", "cluster ids"),
                [(p["fault"], "yes" if p["surfaced"] else "no", p["listed clusters"], " ".join(p["clusters"]))
                 for p in per_fault])
    print()
    print_table(("cluster", "findings", "title", "attributed to"),
                [(c["cluster"], c["findings"], c["title"][:100], ", ".join(c["causes"]) or c["how"]) for c in clusters])
    surfaced = [p for p in per_fault if p["surfaced"]]
    print(f"\nfindings waiting at the end: {by_status.get('new', 0)} of {sum(by_status.values())}; "
          f"faults surfaced: {len(surfaced)}/{len(names)}; listed clusters per surfaced fault: "
          f"{[p['listed clusters'] for p in surfaced]}; listed clusters matching no fault: "
          f"{sum(1 for c in clusters if not c['causes'])}")
    print(f"early keys against reductions: {agreement}")
    return 0
