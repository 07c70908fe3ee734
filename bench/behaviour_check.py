"""Behaviour fingerprint: run it before and after a change that should change nothing.

    .venv/bin/python bench/behaviour_check.py --seeds 60 --cases 30

Prints two digests and a verdict table:
- the generator's output: every program (text and operator list) for seeds 0..N-1 at 6, 10 and
  20 nodes, hashed; a refactoring of the generator must leave it byte for byte;
- the verdicts of a fixed corpus: the first `--cases` generator programs at 10 nodes, each also
  with a backward step, judged by the oracle (value search on, its default budget) on
  `aot_eager` and on the planted `faulty_perturb:add`; the digest is over (case, target,
  symptom, rung, gradient), the table counts symptoms per target.

Two runs on one commit give the same digests unless a value search hit its time budget on a
loaded machine (the table then differs by a test or two, and the lines that differ say which).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter

from nnforge.core.backward import differentiable
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.oracle.oracle import Oracle
from nnforge.oracle.sandbox import WorkerPool

TARGETS = ("aot_eager", "faulty_perturb:add")


def generator_digest(seeds: int) -> str:
    h = hashlib.sha256()
    for nodes in (6, 10, 20):
        for s in range(seeds):
            case, _ = generate_case(GeneratorConfig(n_nodes=nodes, seed=s))
            h.update(case.program.encode())
            h.update(repr(case.meta.get("ops")).encode())
    return h.hexdigest()[:16]


def verdict_lines(cases: int) -> list[str]:
    lines = []
    with WorkerPool(1) as pool:
        oracle = Oracle(pool, list(TARGETS))
        for s in range(cases):
            case, _ = generate_case(GeneratorConfig(n_nodes=10, seed=s))
            variants = [("forward", case)]
            if differentiable(case.program):
                variants.append(("backward", case.with_(calls=tuple(c.with_backward() for c in case.calls))))
            for kind, c in variants:
                for v in oracle.check(c).verdicts:
                    lines.append(f"{s} {kind} {v.target} {v.symptom.value} {v.rung or '-'} {v.gradient or '-'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=60)
    ap.add_argument("--cases", type=int, default=30)
    ap.add_argument("--lines", action="store_true", help="print every verdict line (to diff two runs)")
    args = ap.parse_args(argv)
    print(f"generator digest ({args.seeds} seeds x 6/10/20 nodes): {generator_digest(args.seeds)}")
    lines = verdict_lines(args.cases)
    print(f"verdict digest ({len(lines)} verdicts): {hashlib.sha256(chr(10).join(lines).encode()).hexdigest()[:16]}")
    table = Counter((ln.split()[2], ln.split()[3]) for ln in lines)
    for (target, symptom), n in sorted(table.items()):
        print(f"  {target:>20} {symptom:>14} {n:>4}")
    if args.lines:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
