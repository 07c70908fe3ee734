"""Generator benchmark: validity, ONNX export, speed, diversity, operator coverage.

Prints a table of figures; with --nnsmith, runs nnsmith's own generator side by side in a
separate virtualenv (created on first use from the package registry) and prints the ratio.

    .venv/bin/python bench/generation.py --count 1000            # the issue's figures
    .venv/bin/python bench/generation.py --count 200 --nnsmith   # quicker, with nnsmith beside it
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import torch

from nnforge.generator.engine import GeneratorConfig, GraphGenerator
from nnforge.generator.materialize import to_program
from nnforge.generator.selfcheck import run_program
from nnforge.generator.spec import all_ops

ROOT = Path(__file__).resolve().parent.parent


def instance_key(graph, node) -> tuple:
    ins = tuple((graph.values[i].dtype, tuple(graph.values[i].shape)) for i in node.inputs)
    return (node.op, json.dumps(node.attrs, sort_keys=True, default=repr), ins)


def measure(nodes: int, count: int, onnx_every: int, binning: bool = True) -> dict:
    times, valid, onnx_ok, onnx_tried, used = [], 0, 0, 0, Counter()
    instances_per_100: list[int] = []
    block: set = set()
    errors: Counter = Counter()
    for seed in range(count):
        gen = GraphGenerator(GeneratorConfig(n_nodes=nodes, seed=seed, binning=binning)).generate()
        times.append(gen.elapsed_ms)
        g = gen.graph
        used.update(g.ops())
        block.update(instance_key(g, n) for n in g.nodes)
        if (seed + 1) % 100 == 0:
            instances_per_100.append(len(block))
            block = set()
            print(f"  [{nodes} nodes, binning={binning}] {seed + 1}/{count} programs", file=sys.stderr, flush=True)
        program = to_program(g)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, inputs, _ = run_program(program)
            valid += 1
        except Exception as e:
            errors[f"{type(e).__name__}: {str(e)[:80]}"] += 1
            continue
        if onnx_every and seed % onnx_every == 0 and gen.onnx_exportable:
            onnx_tried += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.onnx.export(model, tuple(inputs), io.BytesIO(), dynamo=False, opset_version=17)
                onnx_ok += 1
            except Exception as e:
                errors[f"onnx {type(e).__name__}: {str(e)[:80]}"] += 1
    times.sort()
    return {
        "nodes": nodes, "count": count, "valid": valid, "onnx_ok": onnx_ok, "onnx_tried": onnx_tried,
        "median_ms": statistics.median(times), "p90_ms": times[int(0.9 * (len(times) - 1))],
        "instances_per_100": statistics.median(instances_per_100) if instances_per_100 else len(block),
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
    ap.add_argument("--nnsmith", action="store_true", help="run nnsmith's generator side by side")
    ap.add_argument("--nnsmith-venv", type=Path, default=ROOT / ".bench-venv-nnsmith")
    args = ap.parse_args()

    print(f"torch {torch.__version__}, {len(all_ops())} registered operators")
    rows = []
    for n in args.nodes:
        t = time.perf_counter()
        with_bins = measure(n, args.count, args.onnx_every, binning=True)
        without = measure(n, min(args.count, 300), 0, binning=False)
        rows.append((n, with_bins, without, time.perf_counter() - t))
    hdr = f"{'nodes':>5} {'programs':>8} {'eager valid':>12} {'onnx export':>12} {'median ms':>10} {'p90 ms':>8} " \
          f"{'inst/100 bins':>13} {'inst/100 none':>13} {'ratio':>6} {'ops used':>9}"
    print(hdr)
    print("-" * len(hdr))
    for n, w, wo, _ in rows:
        onnx = f"{100 * w['onnx_ok'] / w['onnx_tried']:.1f}%" if w["onnx_tried"] else "-"
        print(f"{n:>5} {w['count']:>8} {100 * w['valid'] / w['count']:>11.1f}% {onnx:>12} {w['median_ms']:>10.1f} "
              f"{w['p90_ms']:>8.1f} {w['instances_per_100']:>13} {wo['instances_per_100']:>13} "
              f"{w['instances_per_100'] / max(1, wo['instances_per_100']):>6.2f} {w['ops_used']:>4}/{len(all_ops())}")
    for n, w, _, secs in rows:
        if w["unused"]:
            print(f"  {n} nodes: operators never used: {', '.join(w['unused'])}")
        for e, k in w["errors"]:
            print(f"  {n} nodes: {k}x {e}")
        print(f"  {n} nodes: measured in {secs:.0f} s")
    if args.nnsmith:
        print("\nside by side with nnsmith (its symbolic-cinit generator, its own torch opset, eager validity)")
        print(f"{'nodes':>5} {'nnforge median ms':>18} {'nnsmith median ms':>18} {'ratio':>6} {'nnsmith valid':>14}")
        for n, w, _, _ in rows:
            ns = nnsmith_side_by_side(n, min(args.count, 300), args.nnsmith_venv)
            if isinstance(ns, str):
                print(f"{n:>5} {w['median_ms']:>18.1f}   {ns}")
            else:
                print(f"{n:>5} {w['median_ms']:>18.1f} {ns['median_ms']:>18.1f} {w['median_ms'] / ns['median_ms']:>6.2f} "
                      f"{ns['eager_valid']:>6}/{ns['generated']}")


if __name__ == "__main__":
    main()
