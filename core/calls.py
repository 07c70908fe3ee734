"""The invocation sequence of a TestCase: what happens before each call of the model.

Stateful compiler bugs (stale guards, cached graphs) only show on a later call, after an
earlier one established state; a step is plain data so that the oracle, the reducer and the
repro writer all replay the same sequence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class InputChange:
    """How one positional input differs on this call from `make_inputs()`'s value."""

    index: int
    shape: tuple[int, ...] | None = None  # new shape: values are regenerated (same dtype)
    dtype: str | None = None  # cast to this dtype
    layout: str | None = None  # "contiguous" | "transposed" | "channels_last" | "strided" | "expanded"
    requires_grad: bool | None = None

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if v is not None}
        if self.shape is not None:
            d["shape"] = list(self.shape)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "InputChange":
        d = dict(d)
        if d.get("shape") is not None:
            d["shape"] = tuple(d["shape"])
        return cls(**d)


@dataclass(frozen=True)
class CallStep:
    """One call of the model, and the state changes applied just before it."""

    inputs: tuple[InputChange, ...] = ()
    reset_cache: bool = False  # torch._dynamo.reset() before this call (compiled runs only)
    mode: str | None = None  # "train" | "eval"
    grad_enabled: bool | None = None  # run under torch.set_grad_enabled(value)
    set_attrs: dict[str, Any] = field(default_factory=dict)  # model attribute -> JSON value
    set_globals: dict[str, Any] = field(default_factory=dict)  # program global -> JSON value
    # the call also runs a backward: its gradients are compared like its outputs (core/backward.py)
    backward: bool = False

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.inputs:
            d["inputs"] = [c.to_json() for c in self.inputs]
        if self.reset_cache:
            d["reset_cache"] = True
        if self.mode is not None:
            d["mode"] = self.mode
        if self.grad_enabled is not None:
            d["grad_enabled"] = self.grad_enabled
        if self.set_attrs:
            d["set_attrs"] = dict(self.set_attrs)
        if self.set_globals:
            d["set_globals"] = dict(self.set_globals)
        if self.backward:
            d["backward"] = True
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CallStep":
        unknown = set(d) - {"inputs", "reset_cache", "mode", "grad_enabled", "set_attrs", "set_globals", "backward"}
        if unknown:
            raise ValueError(f"unknown keys in call step: {sorted(unknown)}")
        return cls(
            inputs=tuple(InputChange.from_json(c) for c in d.get("inputs", [])),
            reset_cache=bool(d.get("reset_cache", False)),
            mode=d.get("mode"),
            grad_enabled=d.get("grad_enabled"),
            set_attrs=dict(d.get("set_attrs", {})),
            set_globals=dict(d.get("set_globals", {})),
            backward=bool(d.get("backward", False)),
        )


SINGLE_CALL: tuple[CallStep, ...] = (CallStep(),)
