"""What one C++ compile of an Inductor kernel costs, and how much of it is fixed (#19).

Inductor compiles each CPU kernel module on its own: one `g++` run per module, each including
`cpp_prefix.h` (ATen's vectorised types), which Inductor precompiles into a header of about
150 MB. This benchmark compiles a few generator programs with torch.compile in a fresh cache,
catches the command line of each kernel compile, and replays the last one four ways, side by
side, `--repeat` times each:

- the kernel as Inductor compiles it (with its precompiled header);
- an empty translation unit with the same flags and header: the fixed cost of one compile;
- the kernel and the empty unit without the precompiled header;
- the kernel without `-g1` (the line tables Inductor asks for unless
  `AOT_INDUCTOR_ENABLE_LINE_TABLES=0`): what debug information costs a fuzzer that never reads it.

    .venv/bin/python bench/cxx_cost.py --programs 4 --repeat 5

Prints the median seconds of each, and how many compiler runs the programs needed. What
packing can and cannot save follows from it: a pack of k programs still compiles about as many
kernel modules as its members would alone (disjoint graphs do not fuse), each paying the fixed
cost. This replays Inductor's own builds, one per kernel; campaign workers build a graph's
kernels in one run (oracle/kernel_unit.py, measured by bench/kernel_unit.py), so they pay the
fixed part once a graph.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case


def _compile_programs(n: int, seed: int, work: Path) -> list[str]:
    """The g++ command lines Inductor ran for `n` generator programs (fresh cache, one thread)."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor")
    import torch
    import torch._inductor.config as inductor_config
    import torch._inductor.cpp_builder as cpp_builder

    from nnforge.oracle.program_loader import load_program

    inductor_config.compile_threads = 1  # compiles in this process, so the builder below sees them
    commands: list[str] = []
    build = cpp_builder.CppBuilder.build

    def recording_build(self, *a, **k):
        commands.append(self.get_command_line())
        return build(self, *a, **k)

    cpp_builder.CppBuilder.build = recording_build
    cwd = os.getcwd()
    os.chdir(work)
    try:
        for k in range(n):
            case, _ = generate_case(GeneratorConfig(n_nodes=10, seed=seed + k))
            module = load_program(case.program)
            torch.manual_seed(0)
            model, inputs = module.Model(), module.make_inputs()
            with torch.no_grad():
                torch._dynamo.reset()
                torch.compile(model)(*inputs)
    finally:
        os.chdir(cwd)
        cpp_builder.CppBuilder.build = build
    return commands


def _timed(cmd: list[str], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def _variants(command: str, work: Path) -> dict[str, list[str]]:
    """The kernel command, the same with an empty source and/or without the header, and without `-g1`."""
    args = shlex.split(command)
    source = next(a for a in args if a.endswith(".cpp"))
    out = args.index("-o")
    args[out + 1] = str(work / "kernel.so")
    empty = work / "empty.cpp"
    empty.write_text('extern "C" void nnforge_empty() {}\n')

    def without_header(a: list[str]) -> list[str]:
        i = a.index("-include")
        return a[:i] + a[i + 2:]

    on_empty = [str(empty) if a == source else a for a in args]
    return {"kernel, precompiled header": args, "empty unit, precompiled header": on_empty,
            "kernel, no precompiled header": without_header(args), "empty unit, no precompiled header": without_header(on_empty),
            "kernel, precompiled header, no -g1": [a for a in args if a != "-g1"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=730_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nnforge-cxx-") as tmp:
        work = Path(tmp)
        commands = _compile_programs(args.programs, args.seed, work)
        kernels = [c for c in commands if ".main.cpp" in c and "-include" in c]
        if not kernels:
            print("no kernel compile with a precompiled header was seen (all cached, or no C++ kernel)", file=sys.stderr)
            return 1
        header = shlex.split(kernels[-1])[shlex.split(kernels[-1]).index("-include") + 1]
        gch = Path(header + ".gch")
        size = f"{gch.stat().st_size / 2**20:.0f} MB" if gch.is_file() else "not found"
        print(f"{args.programs} programs: {len(commands)} compiler runs ({len(kernels)} kernel modules, the rest "
              f"one-off: the precompiled headers, ISA probes); precompiled header {size}")
        print(f"\n| compile ({args.repeat} runs each) | median s |\n|---|---|")
        for label, cmd in _variants(kernels[-1], work).items():
            print(f"| {label} | {_timed(cmd, args.repeat):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
