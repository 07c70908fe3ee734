"""Diagnosis: which operator is non-finite, and whether any values could repair it.

`first_nonfinite` and `checked_call` are one-shot checks (one run under the interceptor);
`diagnose` runs a program on many fresh draws to tell a culprit no search can repair (its
operands constant, or non-finite in every draw) from one the search merely failed on. It is
slow, for benchmarks and reports, not for every test.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_unflatten

from nnforge.oracle.safe_domain import LossMode, op_info
from nnforge.oracle.value_search.intercept import Interceptor, Stop, nonfinite_in, nonfinite_tree
from nnforge.oracle.value_search.run import SearchRun
from nnforge.oracle.value_search.search import ValueSearch


def _clone_tensors(inputs: tuple) -> tuple:
    flat, spec = tree_flatten(tuple(inputs))
    flat = [x.clone() if isinstance(x, torch.Tensor) else x for x in flat]
    return tree_unflatten(flat, spec)


def first_nonfinite(model: torch.nn.Module, inputs: tuple) -> str | None:
    """Name of the first operator (in execution order) whose result contains NaN or Inf,
    "output" if only the returned value does, None if the whole run is finite.

    Runs the model once under no_grad on copies of the inputs (so a forward that mutates its
    inputs leaves the caller's alone). Exceptions raised by the model propagate."""
    mode = Interceptor(LossMode())
    args = _clone_tensors(inputs)
    try:
        with torch.no_grad(), mode:
            out = model(*args)
    except Stop:
        return mode.culprit
    return "output" if nonfinite_tree(out) else None


def checked_call(model: torch.nn.Module, inputs: tuple) -> tuple[Any, str | None]:
    """Run the model to completion (as is: grad mode and inputs untouched) and return its
    output together with `first_nonfinite`'s answer for that same run."""
    mode = Interceptor(LossMode())
    mode.abort = False
    with mode:
        out = model(*inputs)
    culprit = mode.culprit
    if culprit is None and nonfinite_tree(out):
        culprit = "output"
    return out, culprit


# --------------------------------------------------------------------------- diagnosis


class _Probe(TorchFunctionMode):
    """Records, per operator call, whether its result was non-finite although its operands were
    finite, and a fingerprint of those operands (to tell a constant operand from a varying one)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, Any]] = []  # (op name, "bad" | "ok" | "skip", fingerprint)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        info = op_info(func)
        leaves = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        finite_in = not any(nonfinite_in(x) for x in leaves)
        before = _fingerprint(leaves) if finite_in else None
        out = func(*args, **kwargs)
        target = args[0] if out is None and info.inplace and args else out
        if not finite_in:
            self.calls.append((info.name, "skip", None))
        elif nonfinite_tree(target):
            self.calls.append((info.name, "bad", before))
        else:
            self.calls.append((info.name, "ok", None))
        return out


def _fingerprint(tensors: list[torch.Tensor]) -> tuple:
    parts = []
    for x in tensors:
        if x.layout != torch.strided or x.is_complex():
            parts.append((tuple(x.shape), str(x.dtype)))
            continue
        v = x.detach().to(torch.float64).flatten()
        ramp = torch.arange(1, v.numel() + 1, dtype=torch.float64)
        parts.append((tuple(x.shape), str(x.dtype), float(v.sum()), float((v * ramp).sum())))
    return tuple(parts)


def diagnose(model: torch.nn.Module, inputs: tuple, draws: int = 24, seed: int = 0) -> tuple[str, str] | None:
    """Whether a program is non-finite for *every* value, as far as random draws can tell.

    Runs the program on its own values and on `draws` fresh ones (inputs and weights resampled
    from the search's ranges, integer and boolean inputs included). An operator that is
    non-finite in every run where its operands were finite (at least three) cannot be repaired
    by any search: ("constant operand", op) when its operands were identical every time
    (`log(x - x)`, `rsqrt(isinf(x))`, `lgamma` of indices), ("non-finite in every draw", op)
    when they varied (`acosh(tanh(x))`, `std` with no degrees of freedom left, a pad value of
    inf; draws are evidence, not proof: a domain narrower than every draw lands here too).
    None otherwise.
    Slow (one full run per draw); meant for benchmarks and reports, not for every test. The
    model's parameters are left as they were."""
    cfg = ValueSearch(seed=seed)
    with torch.random.fork_rng(devices=[]), torch.inference_mode(False):
        run = SearchRun(cfg, model, tuple(inputs), time.perf_counter())
        try:
            runs = []
            for k in range(draws + 1):
                if k:
                    run.draws.sample(all_slots=True)
                probe = _Probe()
                try:
                    run.forward(searching=False, mode=probe)
                except Exception:
                    pass
                runs.append(probe.calls)
        finally:
            run.finish(False, None, 0, initially_finite=False)
    n_calls = max(len(r) for r in runs)
    for i in range(n_calls):
        seen = [r[i] for r in runs if i < len(r)]
        names = {c[0] for c in seen}
        if len(names) != 1:
            continue  # control flow differs between runs: positions are not comparable
        bad = [c for c in seen if c[1] == "bad"]
        if len(bad) >= 3 and not any(c[1] == "ok" for c in seen):
            constant = len({c[2] for c in bad}) == 1
            return ("constant operand" if constant else "non-finite in every draw"), bad[0][0]
    return None


def diagnose_program(payload: dict) -> dict:
    """Worker job (`nnforge.oracle.value_search.diagnose:diagnose_program`): `diagnose` on a program's
    own model and inputs, built as the oracle builds them (payload: program, seed)."""
    from nnforge.oracle.program_loader import load_program, unload_program

    module = load_program(payload["program"], name="program")
    try:
        seed = int(payload.get("seed", 0))
        torch.manual_seed(seed)
        model = module.Model()
        torch.manual_seed(seed)
        inputs = tuple(module.make_inputs())
        found = diagnose(model, inputs, seed=seed)
    finally:
        unload_program(module)
    return {"failure": found[0], "op": found[1]} if found else {"failure": None, "op": None}


