"""The invocation sequence of a TestCase: what happens before each call of the model.

Stateful compiler bugs (stale guards, cached graphs) only show on a later call, after an
earlier one established state; a step is plain data so that the oracle, the reducer and the
repro writer all replay the same sequence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
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
    # training steps (core/backward.py): after the backward, the parameters' gradients go into
    # `.grad` and the run's optimizer ("sgd" | "adam", made on first use, kept for the sequence)
    # steps; `.grad` is cleared before the call; named parameters stop or start requiring grad
    # before the call; the backward runs a second time through the retained graph
    optimizer: str | None = None
    zero_grad: bool = False
    param_requires_grad: dict[str, bool] = field(default_factory=dict)
    retain_graph: bool = False

    def __post_init__(self) -> None:
        if self.optimizer is not None and self.optimizer not in OPTIMIZER_KINDS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; known: {', '.join(OPTIMIZER_KINDS)}")
        if (self.optimizer is not None or self.retain_graph) and not self.backward:
            raise ValueError("an optimizer step or a second backward needs the call's backward (\"backward\": true)")
        if self.backward and self.grad_enabled is False:
            raise ValueError("a call that runs a backward cannot run under no_grad (\"grad_enabled\": false)")

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
        if self.optimizer is not None:
            d["optimizer"] = self.optimizer
        if self.zero_grad:
            d["zero_grad"] = True
        if self.param_requires_grad:
            d["param_requires_grad"] = dict(self.param_requires_grad)
        if self.retain_graph:
            d["retain_graph"] = True
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CallStep":
        unknown = set(d) - STEP_KEYS
        if unknown:
            raise ValueError(f"unknown keys in call step: {sorted(unknown)}")
        return cls(
            inputs=tuple(InputChange.from_json(c) for c in d.get("inputs", [])),
            reset_cache=bool(d.get("reset_cache", False)),
            mode=d.get("mode"),
            grad_enabled=d.get("grad_enabled"),
            set_attrs=dict(d.get("set_attrs", {})),
            set_globals=dict(d.get("set_globals", {})),
            # (before stop 28 a no_grad call could say backward: it ran forward only, and reads so)
            backward=bool(d.get("backward", False)) and d.get("grad_enabled") is not False,
            optimizer=d.get("optimizer"),
            zero_grad=bool(d.get("zero_grad", False)),
            param_requires_grad={str(k): bool(v) for k, v in dict(d.get("param_requires_grad", {})).items()},
            retain_graph=bool(d.get("retain_graph", False)),
        )

    def with_backward(self) -> "CallStep":
        """The same call with a backward (out of no_grad: a backward needs the graph)."""
        return replace(self, backward=True, grad_enabled=None if self.grad_enabled is False else self.grad_enabled)

    def forward_only(self) -> "CallStep":
        """The same call without its backward and what needs it (optimizer step, second backward)."""
        return replace(self, backward=False, optimizer=None, retain_graph=False)


OPTIMIZER_KINDS = ("sgd", "adam")
STEP_KEYS = frozenset({"inputs", "reset_cache", "mode", "grad_enabled", "set_attrs", "set_globals", "backward",
                       "optimizer", "zero_grad", "param_requires_grad", "retain_graph"})


SINGLE_CALL: tuple[CallStep, ...] = (CallStep(),)
