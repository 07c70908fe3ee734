"""Is a mutant valid? It imports, builds, runs every call of its sequence in eager, twice, identically.

`run_eager(payload)` is the trusted function a sandbox worker runs on the untrusted mutant (the
caller passes `VALIDATE_FN` to the oracle's `WorkerPool.call`; this module imports nothing of the
oracle: mutators sit to its left). It uses only the standard library and torch. Running the
whole sequence twice on two fresh module copies with the same seeds and comparing the results
bit for bit catches what "well defined in eager" rules out: unseeded randomness, dependence on
object ids or on state that leaks between loads.

Call steps are applied the way the oracle applies them (inputs regenerated for a new shape from
the original values' range, casts, layouts, requires_grad; mode, attributes, globals, grad mode).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

from nnforge.core.calls import SINGLE_CALL, CallStep
from nnforge.core.backward import run_step
from nnforge.core.replay import apply_state, build_args
from nnforge.core.testcase import TestCase

VALIDATE_FN = "nnforge.mutators.validate:run_eager"
_counter = itertools.count(1)


@dataclass(frozen=True)
class EagerCheck:
    """The parent's view of one validation: ok, or where and why the mutant failed."""

    ok: bool
    stage: str = ""  # "import" | "contract" | "model" | "inputs" | "call N" | "determinism" | "worker"
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "stage": self.stage, "error": self.error}


def payload_for(case: TestCase, seed: int = 0) -> dict[str, Any]:
    return {"program": case.program, "calls": [c.to_json() for c in case.calls], "seed": seed}


def check_case(call: Callable[..., Any], case: TestCase, seed: int = 0, timeout_s: float | None = None) -> EagerCheck:
    """Validate `case` through `call` (a WorkerPool's `call`); never runs the program here."""
    out = call(VALIDATE_FN, payload_for(case, seed), timeout_s=timeout_s)
    if not out.ok:
        return EagerCheck(False, "worker", f"{out.status}: {out.exc_type or ''} {out.exc_message or ''}".strip())
    v = out.value
    return EagerCheck(bool(v["ok"]), v.get("stage", ""), v.get("error", ""))


class EagerProbe:
    """A Probe (case -> runs in eager?) whose `check` also says where and why a case failed.

    Mutators that try candidates (shape changes in a call sequence) only need the bool; the LLM
    mutator sends the failure back to the model, so it uses `check`.
    """

    def __init__(self, call: Callable[..., Any], seed: int = 0, timeout_s: float | None = None) -> None:
        self.call = call
        self.seed = seed
        self.timeout_s = timeout_s

    def check(self, case: TestCase) -> EagerCheck:
        return check_case(self.call, case, self.seed, self.timeout_s)

    def __call__(self, case: TestCase) -> bool:
        return self.check(case).ok


def eager_probe(call: Callable[..., Any], seed: int = 0, timeout_s: float | None = None) -> EagerProbe:
    """A Probe for mutators that need to try candidates, built on a WorkerPool's `call`."""
    return EagerProbe(call, seed, timeout_s)


# -- inside the worker -----------------------------------------------------------------------------------------
def run_eager(payload: dict[str, Any]) -> dict[str, Any]:
    """payload: program, calls ([CallStep json]), seed. Returns {"ok", "stage", "error", "calls"}."""
    import torch

    seed = int(payload.get("seed", 0))
    steps = tuple(CallStep.from_json(s) for s in payload.get("calls") or []) or SINGLE_CALL
    runs = []
    for _ in range(2):
        stage = "import"
        try:
            module = _load(payload["program"])
            stage = "contract"
            if not hasattr(module, "Model") or not hasattr(module, "make_inputs"):
                raise TypeError("the program must define `class Model` and `def make_inputs()`")
            stage = "model"
            torch.manual_seed(seed)
            model = module.Model()
            stage = "inputs"
            torch.manual_seed(seed)
            base = module.make_inputs()
            if not isinstance(base, tuple):
                raise TypeError(f"make_inputs() must return a tuple, got {type(base).__name__}")
            outs = []
            for i, step in enumerate(steps):
                stage = f"call {i}"
                args = build_args(base, step.inputs, seed * 1000 + i)
                apply_state(step, model, module)
                torch.manual_seed(seed + i)
                out, grads, _ = run_step(model, model, args, step, seed + i)
                outs.append(_detach(out if grads is None else (out, grads)))
            runs.append(outs)
        except Exception as e:  # the mutant is invalid; say where
            return {"ok": False, "stage": stage, "error": f"{type(e).__name__}: {str(e)[:500]}", "calls": len(steps)}
        finally:
            sys.modules.pop(getattr(locals().get("module"), "__name__", ""), None)
    if not _same(runs[0], runs[1]):
        return {"ok": False, "stage": "determinism", "error": "two eager runs with the same seeds differ",
                "calls": len(steps)}
    return {"ok": True, "stage": "", "error": "", "calls": len(steps)}


def _load(source: str) -> Any:
    name = f"mutant_{os.getpid()}_{next(_counter)}"
    path = os.path.join(os.getcwd(), name + ".py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:  # the code objects keep what they need; a check run outside a sandbox leaves no litter
        os.unlink(path)


def _detach(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, (list, tuple)):
        return [_detach(o) for o in out]
    if isinstance(out, dict):
        return {k: _detach(v) for k, v in out.items()}
    return out


def _same(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
        return torch.equal(a, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b) or (a != a and b != b)
    except Exception:
        return repr(a) == repr(b)
