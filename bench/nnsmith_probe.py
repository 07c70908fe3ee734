"""Runs inside a separate virtualenv that has `nnsmith` installed (never imported by NNForge).

Prints one JSON line: generation times (ms) and eager validity of nnsmith's own generator on the
same machine, so bench/generation.py can put both side by side.
Usage: NNSMITH_PYTHON bench/nnsmith_probe.py NODES COUNT
"""

import json
import statistics
import sys
import time


def main() -> None:
    nodes, count = int(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) > 3 and sys.argv[3] == "search":
        return search(nodes, count)
    import torch
    from nnsmith.graph_gen import model_gen
    from nnsmith.materialize import Model
    from nnsmith.narrow_spec import auto_opset

    model_type = Model.init("torch", backend_target="cpu")
    opset = auto_opset(model_type, None, vulops=True)
    times, valid, failed_gen = [], 0, 0
    for seed in range(count):
        t = time.perf_counter()
        try:
            gen = model_gen(opset=opset, method="symbolic-cinit", seed=seed, max_nodes=nodes, timeout_ms=10000)
            ir = gen.make_concrete()
        except Exception:
            failed_gen += 1
            continue
        times.append((time.perf_counter() - t) * 1000)
        try:
            model = model_type.from_gir(ir)
            model.make_oracle()  # eager run on random inputs
            valid += 1
        except Exception:
            pass
    times.sort()
    print(json.dumps({
        "nodes": nodes, "count": count, "generated": len(times), "failed_generation": failed_gen, "eager_valid": valid,
        "median_ms": statistics.median(times) if times else None,
        "p90_ms": times[int(0.9 * (len(times) - 1))] if times else None,
        "ops": len(opset),
    }))


def search(nodes: int, count: int) -> None:
    """nnsmith's value search on its own programs: share whose outputs end finite, and time."""
    import torch
    from nnsmith.graph_gen import model_gen
    from nnsmith.materialize import Model
    from nnsmith.narrow_spec import auto_opset

    model_type = Model.init("torch", backend_target="cpu")
    opset = auto_opset(model_type, None, vulops=True)
    times, finite, total, crashed = [], 0, 0, 0
    for seed in range(count):
        try:
            ir = model_gen(opset=opset, method="symbolic-cinit", seed=seed, max_nodes=nodes, timeout_ms=10000).make_concrete()
            model = model_type.from_gir(ir)
        except Exception:
            continue
        total += 1
        t = time.perf_counter()
        try:
            model.refine_weights()
        except Exception:
            # nnsmith 0.1.0 raises from its own recovery path when a weight turns non-finite
            # (`param.dtype.torch()` on a torch.dtype in SymbolNet.backward): a failed search
            crashed += 1
            times.append((time.perf_counter() - t) * 1000)
            continue
        times.append((time.perf_counter() - t) * 1000)
        try:
            oracle = model.make_oracle()
            finite += all(bool(__import__("numpy").isfinite(v).all()) for v in oracle.output.values())
        except Exception:
            pass
    print(json.dumps({"nodes": nodes, "programs": total, "outputs_finite": finite, "search_raised": crashed,
                      "rate": finite / max(1, total), "median_search_ms": statistics.median(times) if times else None}))


if __name__ == "__main__":
    main()
