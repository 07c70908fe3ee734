"""One compiler run per graph against Inductor's one run per kernel (oracle/kernel_unit.py, #19).

Compiles the same packs of generator programs twice, each time in a fresh process with a fresh
Inductor cache and one compile thread (as a campaign worker on a 2-core machine has it): once
with `NNFORGE_INDUCTOR_KERNEL_UNIT=one`, once with `each`. Prints the seconds torch.compile took
per pack (first call: tracing, lowering, code generation, the C++ compiler, loading), the kernels
each built, and checks that both runs computed the same outputs bit for bit.

    .venv/bin/python bench/kernel_unit.py --packs 6 --pack 4 --seed 2000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = "--child"


def _child(packs: int, pack: int, seed: int, out: Path) -> None:
    import time

    import torch

    from nnforge.generator.engine import GeneratorConfig
    from nnforge.generator.pack import pack_cases
    from nnforge.generator.seeds import generate_case
    from nnforge.oracle import kernel_unit
    from nnforge.oracle.program_loader import load_program
    from nnforge.oracle.torch_backends import configure_torch

    configure_torch()
    seconds, outputs = [], []
    for p in range(packs):
        cases = [generate_case(GeneratorConfig(n_nodes=10, seed=seed + 10 * p + k))[0] for k in range(pack)]
        module = load_program(pack_cases(cases).program)
        torch.manual_seed(0)
        model, inputs = module.Model(), module.make_inputs()
        torch._dynamo.reset()
        t0 = time.perf_counter()
        try:
            with torch.no_grad():
                result = torch.compile(model)(*inputs)
        except Exception as e:  # noqa: BLE001 - a pack that does not compile is reported, not fatal
            seconds.append(None)
            outputs.append(f"{type(e).__name__}")
            continue
        seconds.append(time.perf_counter() - t0)
        outputs.append([t for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)])
    torch.save(outputs, out)
    out.with_suffix(".json").write_text(json.dumps({"seconds": seconds, "stats": kernel_unit.stats()}))


def _same(a, b) -> bool:
    import torch

    if isinstance(a, str) or isinstance(b, str):
        return a == b

    def raw(t):  # the bytes, so NaNs and signed zeros count too
        return t.detach().reshape(-1).contiguous().view(torch.uint8)

    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and torch.equal(raw(x), raw(y))
                                    for x, y in zip(a, b))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packs", type=int, default=6)
    ap.add_argument("--pack", type=int, default=4, help="generator programs a pack, as a campaign's seed test (4)")
    ap.add_argument("--seed", type=int, default=2000)
    ap.add_argument(CHILD, nargs=2, metavar=("MODE", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.packs, args.pack, args.seed, Path(args.child[1]))
        return 0
    import torch

    runs = {}
    with tempfile.TemporaryDirectory(prefix="nnforge-kernel-unit-") as tmp:
        for mode in ("one", "each"):
            out = Path(tmp) / f"{mode}.pt"
            env = {**os.environ, "NNFORGE_INDUCTOR_KERNEL_UNIT": mode, "TORCHINDUCTOR_COMPILE_THREADS": "1",
                   "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / f"inductor-{mode}"), "OMP_NUM_THREADS": "1"}
            subprocess.run([sys.executable, __file__, "--packs", str(args.packs), "--pack", str(args.pack),
                            "--seed", str(args.seed), CHILD, mode, str(out)], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            runs[mode] = (json.loads(out.with_suffix(".json").read_text()), torch.load(out))
    one, each = runs["one"][0], runs["each"][0]
    print(f"{args.packs} packs of {args.pack} generator programs, 10 nodes, seed {args.seed}, fresh cache each\n")
    print("| pack | one unit s | one run per kernel s | ratio |\n|---|---|---|---|")
    for i, (a, b) in enumerate(zip(one["seconds"], each["seconds"])):
        ratio = f"{b / a:.2f}x" if a and b else "-"
        print(f"| {i} | {a if a is None else f'{a:.2f}'} | {b if b is None else f'{b:.2f}'} | {ratio} |")
    both = [(a, b) for a, b in zip(one["seconds"], each["seconds"]) if a and b]
    if both:
        print(f"| all | {sum(a for a, _ in both):.2f} | {sum(b for _, b in both):.2f} | "
              f"{sum(b for _, b in both) / sum(a for a, _ in both):.2f}x (median {statistics.median(b / a for a, b in both):.2f}x) |")
    print(f"\nunits built {one['stats']['units']} with {one['stats']['kernels']} kernels, "
          f"{one['stats']['fallbacks']} fell back to one run per kernel")
    same = all(_same(a, b) for a, b in zip(runs["one"][1], runs["each"][1]))
    print("outputs: " + ("bit for bit the same in both runs" if same else "DIFFER between the runs"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
