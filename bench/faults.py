"""Fault-injection benchmark: which kinds of compiler bugs does NNForge catch, and how fast.

Known bugs (`bench/faults/planted_*.py`) are planted into the installed torch and TVM at
interpreter start by a post-import hook (`bench/faults/fault_hook.py`); a file, not the
environment, turns them on, so NNForge's sandboxed workers get them too. Each fault has a
trigger case (`bench/faults/triggers/<fault>/`) that fails with it and passes without, and one
near-miss case (`bench/faults/near_miss/`) passes with every fault on.

    .venv/bin/python bench/faults.py list                       # the catalogue
    .venv/bin/python bench/faults.py check [FAULT ...]          # trigger/near-miss/child-process facts
    .venv/bin/python bench/faults.py all --minutes 10           # a campaign per fault, the recall table
    .venv/bin/python bench/faults.py inductor_vec_floor_trunc --minutes 3 --targets inductor
    .venv/bin/python bench/faults.py together --targets inductor --minutes 20  # every inductor fault in one campaign
    .venv/bin/python bench/faults.py on FAULT [FAULT ...]       # plant by hand (then run nnforge yourself)
    .venv/bin/python bench/faults.py off                        # and take them out again

A fault counts as found when a cluster listed in the campaign's summary has a `repro.py` that
exits 1 with the fault planted and 0 without, each in a fresh process. The table also counts
the findings the fault triggered (their case reruns with a verdict other than pass with the
fault and passes without) that reached no listed cluster. Campaigns run one after another: the
machine has two cores and each campaign uses both.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "faults"))

import fault_hook  # noqa: E402
from harness import NEAR_MISS, TRIGGERS, clean_env, lock_is_free, planted, print_table, run_case  # noqa: E402

def reaches_child(fault: fault_hook.Fault) -> bool:
    """A child started as NNForge starts its workers (scrubbed env, temp cwd) has the fault applied."""
    code = (f"import sys, torch._dynamo, {fault.module}, fault_hook; "
            f"sys.exit(0 if {fault.name!r} in fault_hook.planted_in({fault.module!r}) else 1)")
    with planted([fault.name]), tempfile.TemporaryDirectory() as cwd:
        p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                           timeout=300)
    return p.returncode == 0


def absent_when_off(fault: fault_hook.Fault) -> bool:
    code = (f"import sys, {fault.module}; sys.exit(1 if 'fault_hook' in sys.modules else 0)")
    with planted([]):
        p = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=300)
    return p.returncode == 0


def cmd_check(names: list[str]) -> int:
    faults = fault_hook.load_catalogue()
    chosen = names or sorted(faults)
    rows, ok_all = [], True
    for name in chosen:
        f = faults[name]
        trig = TRIGGERS / name
        on_rc, on_out = run_case(trig, f.target, [name])
        off_rc, off_out = run_case(trig, f.target, [])
        near_rc, near_out = run_case(NEAR_MISS, f.target, [name])
        child = reaches_child(f)
        off_clean = absent_when_off(f)
        ok = on_rc == 1 and off_rc == 0 and near_rc == 0 and child and off_clean
        ok_all &= ok
        rows.append((name, f.layer, f.target, on_rc, off_rc, near_rc, child, off_clean, "ok" if ok else "FAIL"))
        if not ok:
            sys.stderr.write(f"--- {name}: with fault rc={on_rc}\n{on_out[-1500:]}\n--- without rc={off_rc}\n"
                             f"{off_out[-1500:]}\n--- near miss rc={near_rc}\n{near_out[-1500:]}\n")
        print(f"{name}: trigger with {on_rc} / without {off_rc}, near miss {near_rc}, child {child}, "
              f"off leaves nothing {off_clean}: {'ok' if ok else 'FAIL'}", flush=True)
    if not names:  # the near miss with every fault on at once
        for target in sorted({f.target for f in faults.values()}):
            rc, out = run_case(NEAR_MISS, target, sorted(n for n, f in faults.items() if f.target == target))
            ok_all &= rc == 0
            print(f"near miss on {target} with all its faults on: rc {rc}: {'ok' if rc == 0 else 'FAIL'}", flush=True)
            if rc != 0:
                sys.stderr.write(out[-3000:] + "\n")
    print_table(("fault", "layer", "target", "trigger on", "trigger off", "near miss", "child", "off clean", "check"), rows)
    return 0 if ok_all else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("what", nargs="+", help="list | check [FAULT...] | on FAULT... | off | all | together [FAULT...] | FAULT...")
    ap.add_argument("--minutes", type=float, default=10.0, help="campaign budget per fault (default 10)")
    ap.add_argument("--targets", default=None, help="campaign targets (default: the fault's own target)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="folder for the campaigns (default: a temp folder)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-value-bins", dest="value_bins", action="store_false",
                    help="campaigns draw every test's values the default way (value bins off)")
    ap.add_argument("--backward-share", type=float, default=None,
                    help="share of tests whose calls also run a backward (default: the campaign's own; 0: forward only)")
    ap.add_argument("--pack", type=int, default=None,
                    help="generator programs per torch.compile seed test (default: the campaign's own; 1: unpacked)")
    ap.add_argument("--pack-mutants", type=int, default=None,
                    help="single-call mutants per torch.compile mutant test (default: the campaign's own; 1: alone)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows of faults already judged under --out with the same budget and targets")
    ap.add_argument("--max-rerun", type=int, default=40,
                    help="findings per campaign rerun with and without the fault (default 40)")
    args = ap.parse_args(argv)
    verb, rest = args.what[0], args.what[1:]
    faults = fault_hook.load_catalogue()
    if verb == "list":
        print_table(("fault", "layer", "symptom", "target", "what"),
                    [(f.name, f.layer, f.symptom, f.target, f.summary) for f in faults.values()])
        return 0
    if verb == "check":
        return cmd_check(rest)
    if verb in ("on", "off") and not lock_is_free():
        print("a benchmark run holds bench/faults/.lock: planting by hand now would change its faults", file=sys.stderr)
        return 2
    if verb == "on":
        fault_hook.install_pth()
        fault_hook.write_active(rest)
        print(f"planted: {', '.join(rest)} (until `bench/faults.py off`)")
        return 0
    if verb == "off":
        fault_hook.write_active([])
        fault_hook.uninstall_pth()
        print("no fault planted")
        return 0
    if verb == "together":  # several faults planted at once in one campaign (bench/faults/together.py)
        from together import run_together

        names = rest or sorted(n for n, f in faults.items() if f.target == (args.targets or "inductor"))
        unknown = [n for n in names if n not in faults]
        if unknown:
            ap.error(f"unknown faults: {', '.join(unknown)} (see `bench/faults.py list`)")
        return run_together([faults[n] for n in names], args)
    if args.resume and args.out is None:
        ap.error("--resume needs --out: the folder of the run to resume")
    from faults_campaign import run_benchmark  # the campaign half, kept apart

    names = sorted(faults) if verb == "all" else args.what
    unknown = [n for n in names if n not in faults]
    if unknown:
        ap.error(f"unknown faults: {', '.join(unknown)} (see `bench/faults.py list`)")
    return run_benchmark([faults[n] for n in names], args)


if __name__ == "__main__":
    sys.exit(main())
