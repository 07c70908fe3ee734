"""Success rate and speed of value search on random chains of NaN/Inf-prone operators.

Run by hand: `.venv/bin/python bench/value_search_chains.py --ops 10 --n 300`.
Each program is a random DAG: every step applies an operator to one or two earlier values
(inputs, a weight parameter, or intermediates); the output is the sum of the last values.
Programs are built as closures, not from generator specs, so the search sees them the way it
sees hand-written code.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS
from nnforge.oracle.value_search import ValueSearch, first_nonfinite

UNARY = {
    "log": torch.log, "log2": torch.log2, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal, "exp": torch.exp, "asin": torch.asin, "acos": torch.acos,
    "atanh": torch.atanh, "acosh": torch.acosh, "log1p": torch.log1p, "tan": torch.tan,
    "lgamma": torch.lgamma, "floor": torch.floor, "relu": torch.relu, "sin": torch.sin,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "exp2": torch.exp2, "sinh": torch.sinh,
    "cosh": torch.cosh, "neg": torch.neg, "abs": torch.abs, "round": torch.round,
    "softplus": torch.nn.functional.softplus, "digamma": torch.digamma,
    "mean_keep": lambda x: x.mean(-1, keepdim=True), "sum_keep": lambda x: x.sum(-1, keepdim=True),
    "square": torch.square,
}
BINARY = {
    "div": torch.div, "pow": torch.pow, "mul": torch.mul, "add": torch.add, "sub": torch.sub,
    "rdiv_scalar": lambda a, b: 1.0 / (a - b), "xlogy": torch.xlogy, "atan2": torch.atan2,
}


class Chain(torch.nn.Module):
    def __init__(self, steps, n_inputs: int, width: int, dtype) -> None:
        super().__init__()
        self.steps = steps
        self.n_inputs = n_inputs
        self.w = torch.nn.Parameter(torch.randn(width, width, dtype=dtype) / width**0.5)

    def forward(self, *xs):
        vals = list(xs) + [self.w]
        for kind, name, i, j in self.steps:
            if kind == "u":
                vals.append(UNARY[name](vals[i]))
            elif kind == "b":
                vals.append(BINARY[name](vals[i], vals[j]))
            else:
                vals.append(vals[i] @ vals[j])
        return sum(v.sum() for v in vals[-3:])


def make_program(rng: random.Random, n_ops: int, dtype):
    width = 4
    n_inputs = rng.randint(1, 3)
    steps = []
    n_vals = n_inputs + 1
    for _ in range(n_ops):
        r = rng.random()
        i = rng.randrange(n_vals)
        if r < 0.6:
            steps.append(("u", rng.choice(sorted(UNARY)), i, -1))
        elif r < 0.9:
            steps.append(("b", rng.choice(sorted(BINARY)), i, rng.randrange(n_vals)))
        else:
            steps.append(("m", "matmul", i, rng.randrange(n_vals)))
        n_vals += 1
    model = Chain(steps, n_inputs, width, dtype)
    scale = rng.choice([0.5, 1.0, 3.0])
    inputs = tuple(torch.randn(width, width, dtype=dtype) * scale for _ in range(n_inputs))
    return model, inputs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=10)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--budget-ms", type=float, default=VALUE_SEARCH_BUDGET_MS)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-iters", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--patience", type=int, default=12)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    import os
    vs = ValueSearch(budget_ms=args.budget_ms, max_iters=args.max_iters, lr=args.lr, patience=args.patience)
    vs.run(*make_program(rng, 3, dtype))  # warm-up
    initially_bad = ok = invalid = 0
    times, iters, methods, culprits = [], [], {}, {}
    for _ in range(args.n):
        model, inputs = make_program(rng, args.ops, dtype)
        res = vs.run(model, inputs)
        if res.iterations == 0 and (res.culprit or "").startswith("exception"):
            invalid += 1  # the random program itself is ill-shaped
        elif not res.initially_finite:
            initially_bad += 1
            times.append(res.elapsed_ms)
            iters.append(res.iterations)
            if res.success:
                ok += 1
                assert first_nonfinite(model, res.inputs) is None
                methods[res.method] = methods.get(res.method, 0) + 1
            else:
                culprits[res.culprit] = culprits.get(res.culprit, 0) + 1
    print(f"ops={args.ops} dtype={args.dtype} programs={args.n} invalid={invalid} initially non-finite={initially_bad}")
    if initially_bad:
        print(f"repaired: {ok}/{initially_bad} = {ok / initially_bad:.1%}  methods={methods}")
        print(f"time ms: median {statistics.median(times):.2f}  p90 {sorted(times)[int(0.9 * len(times))]:.2f}"
              f"  iterations median {statistics.median(iters)}")
        print("unrepaired culprits:", dict(sorted(culprits.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
