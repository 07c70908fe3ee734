"""Generator benchmark: validity, ONNX export, speed, diversity, operator coverage.

Prints a table of figures; with --nnsmith, runs nnsmith's own generator side by side in a
separate virtualenv (created on first use from the package registry) and prints the ratio.

    .venv/bin/python bench/generation.py --count 1000            # the issue's figures
    .venv/bin/python bench/generation.py --count 200 --nnsmith   # quicker, with nnsmith beside it
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from nnforge.generator.engine import GeneratorConfig, GraphGenerator
from nnforge.generator.materialize import to_program
from nnforge.generator.spec import all_ops
from nnforge.oracle.sandbox import WorkerPool

# Appended to each program and run in a sandbox worker: the TorchScript ONNX exporter can die on a
# signal (a SIGFPE on some zero-size flattens), which would otherwise take the benchmark with it.
CHECK_ENTRY = """

def __nnforge_bench_check(export):
    import io, warnings
    torch.manual_seed(0)
    model = Model()
    inputs = make_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.no_grad():
                model(*inputs)
        except Exception as e:
            return "eager", f"{type(e).__name__}: {str(e)[:80]}"
        if not export:
            return "ok", ""
        try:
            torch.onnx.export(model, tuple(inputs), io.BytesIO(), dynamo=False, opset_version=17)
        except Exception as e:
            return "onnx", f"{type(e).__name__}: {str(e)[:80]}"
    return "ok", ""
"""


def check_in_sandbox(pool: WorkerPool, program: str, export: bool) -> tuple[str, str]:
    out = pool.call("nnforge.oracle.worker:exec_program",
                    {"program": program + CHECK_ENTRY, "entry": "__nnforge_bench_check", "args": [export]})
    if out.ok:
        return tuple(out.value)
    if out.status in ("segfault", "timeout", "oom"):
        return ("onnx" if export else "eager"), f"worker {out.status} ({out.signal})"
    return "eager", f"{out.exc_type}: {str(out.exc_message)[:80]}"

ROOT = Path(__file__).resolve().parent.parent


def instance_key(graph, node) -> tuple:
    ins = tuple((graph.values[i].dtype, tuple(graph.values[i].shape)) for i in node.inputs)
    return (node.op, json.dumps(node.attrs, sort_keys=True, default=repr), ins)


def measure(pool: WorkerPool, nodes: int, count: int, onnx_every: int, binning: bool = True,
            onnx_only: bool = False) -> dict:
    times, valid, onnx_ok, onnx_tried, used = [], 0, 0, 0, Counter()
    instances_per_100: list[int] = []
    values_per_100: list[int] = []
    block: set = set()
    values: set = set()  # (op, attribute, value) of integer attributes: what the solver chose
    dims_total = dims_one = 0
    errors: Counter = Counter()
    for seed in range(count):
        gen = GraphGenerator(GeneratorConfig(n_nodes=nodes, seed=seed, binning=binning, onnx_only=onnx_only)).generate()
        times.append(gen.elapsed_ms)
        g = gen.graph
        used.update(g.ops())
        block.update(instance_key(g, n) for n in g.nodes)
        values.update((n.op, k, n.attrs[k]) for n in g.nodes for k in n.solver_attrs)
        values.update(("input", d) for v in g.inputs + g.weights for d in g.values[v].shape)
        for v in g.inputs + g.weights:
            dims_total += len(g.values[v].shape)
            dims_one += sum(1 for d in g.values[v].shape if d == 1)
        if (seed + 1) % 100 == 0:
            instances_per_100.append(len(block))
            values_per_100.append(len(values))
            block, values = set(), set()
            print(f"  [{nodes} nodes, binning={binning}] {seed + 1}/{count} programs", file=sys.stderr, flush=True)
        program = to_program(g)
        export = bool(onnx_every and seed % onnx_every == 0 and gen.onnx_exportable)
        status, err = check_in_sandbox(pool, program, export)
        if status == "eager":
            errors[err] += 1
            continue
        valid += 1
        if export:
            onnx_tried += 1
            if status == "ok":
                onnx_ok += 1
            else:
                errors[f"onnx {err}"] += 1
    times.sort()
    return {
        "nodes": nodes, "count": count, "valid": valid, "onnx_ok": onnx_ok, "onnx_tried": onnx_tried,
        "median_ms": statistics.median(times), "p90_ms": times[int(0.9 * (len(times) - 1))],
        "instances_per_100": statistics.median(instances_per_100) if instances_per_100 else len(block),
        "values_per_100": statistics.median(values_per_100) if values_per_100 else len(values),
        "onnx_claimed": onnx_tried,
        "dims_one": dims_one / max(1, dims_total),
        "ops_used": len(used), "unused": sorted(set(all_ops()) - set(used)), "errors": errors.most_common(5),
    }


def nnsmith_side_by_side(nodes: int, count: int, venv: Path) -> dict | str:
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"creating {venv} with nnsmith from the package registry ...", file=sys.stderr)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(py), "-m", "pip", "install", "-q", "torch==" + torch.__version__.split("+")[0]], check=True)
            subprocess.run([str(py), "-m", "pip", "install", "-q", "nnsmith[torch]"], check=True)
        except subprocess.CalledProcessError as e:
            return f"nnsmith could not be installed: {e}"
    r = subprocess.run([str(py), str(ROOT / "bench" / "nnsmith_probe.py"), str(nodes), str(count)],
                       capture_output=True, text=True)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        return f"nnsmith did not run with this torch: {r.stderr.strip().splitlines()[-1:] or r.returncode}"
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--nodes", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--onnx-every", type=int, default=1, help="try ONNX export on every k-th program (0: never)")
    ap.add_argument("--onnx-count", type=int, default=300, help="programs generated with --onnx-only for the export rate")
    ap.add_argument("--nnsmith", action="store_true", help="run nnsmith's generator side by side")
    ap.add_argument("--nnsmith-venv", type=Path, default=ROOT / ".bench-venv-nnsmith")
    args = ap.parse_args()

    print(f"torch {torch.__version__}, {len(all_ops())} registered operators")
    rows = []
    pool = WorkerPool(size=1, timeout_s=120)
    pool.warmup()
    for n in args.nodes:
        t = time.perf_counter()
        with_bins = measure(pool, n, args.count, args.onnx_every, binning=True)
        without = measure(pool, n, args.count, 0, binning=False)
        onnx = measure(pool, n, args.onnx_count, 1, binning=True, onnx_only=True) if args.onnx_count else None
        rows.append((n, with_bins, without, onnx, time.perf_counter() - t))
    hdr = (f"{'nodes':>5} {'programs':>8} {'eager valid':>11} {'onnx claimed':>12} {'export ok':>9} {'onnx-only ok':>12} "
           f"{'median ms':>9} {'p90 ms':>7} {'inst/100':>8} {'(no bins)':>9} {'values/100':>10} {'(no bins)':>9} "
           f"{'ratio':>5} {'dims=1':>6} {'(no bins)':>9} {'ops used':>8}")
    pool.close()
    print(hdr)
    print("-" * len(hdr))
    for n, w, wo, ox, _ in rows:
        exp = f"{100 * w['onnx_ok'] / w['onnx_tried']:.1f}%" if w["onnx_tried"] else "-"
        oxs = f"{100 * ox['onnx_ok'] / max(1, ox['onnx_tried']):.1f}%" if ox else "-"
        print(f"{n:>5} {w['count']:>8} {100 * w['valid'] / w['count']:>10.1f}% {100 * w['onnx_claimed'] / w['count']:>11.1f}% "
              f"{exp:>9} {oxs:>12} {w['median_ms']:>9.1f} {w['p90_ms']:>7.1f} {w['instances_per_100']:>8} "
              f"{wo['instances_per_100']:>9} {w['values_per_100']:>10} {wo['values_per_100']:>9} "
              f"{w['values_per_100'] / max(1, wo['values_per_100']):>5.2f} {100 * w['dims_one']:>5.0f}% {100 * wo['dims_one']:>8.0f}% "
              f"{w['ops_used']:>4}/{len(all_ops())}")
    print("  inst/100: unique operator instances (op + attributes + input shapes) per 100 programs;"
          " values/100: unique values z3 chose per 100 programs: (op, integer attribute, value) and input dims;"
          " ratio: values/100 with binning over without; dims=1: share of input dims that are 1 (z3's favourite boundary); onnx claimed: programs whose every op claims export;"
          " onnx-only ok: export success on programs generated with --onnx-only")
    for n, w, wo, ox, secs in rows:
        if w["unused"]:
            print(f"  {n} nodes: operators never used: {', '.join(w['unused'])}")
        for e, k in w["errors"] + (ox["errors"] if ox else []):
            print(f"  {n} nodes: {k}x {e}")
        print(f"  {n} nodes: measured in {secs:.0f} s")
    if args.nnsmith:
        print("\nside by side with nnsmith (its symbolic-cinit generator, its own torch opset, eager validity)")
        print(f"{'nodes':>5} {'nnforge median ms':>18} {'nnsmith median ms':>18} {'ratio':>6} {'nnsmith valid':>14}")
        for n, w, _, _, _ in rows:
            ns = nnsmith_side_by_side(n, min(args.count, 300), args.nnsmith_venv)
            if isinstance(ns, str):
                print(f"{n:>5} {w['median_ms']:>18.1f}   {ns}")
            else:
                print(f"{n:>5} {w['median_ms']:>18.1f} {ns['median_ms']:>18.1f} {w['median_ms'] / ns['median_ms']:>6.2f} "
                      f"{ns['eager_valid']:>6}/{ns['generated']}")


if __name__ == "__main__":
    main()
