"""Systems under test as plugins, and the targets (blame ladders) built from them.

A *backend* is one rung of a blame ladder: a way of running a model that adds exactly one layer
on top of the rung below it (Dynamo capture, then AOTAutograd, then Inductor; ONNX export, then
ORT kernels, then ORT's optimiser; ...). A *target* is what a user names on the command line
(`inductor`, `ort`, `tvm`): an ordered list of rungs, cheapest first, whose last rung is the
system the user cares about.

Every backend runs an invocation sequence, not a single call: stateful compiler bugs (stale
guards, cached graphs) only show on a later call. The base class owns that loop so that eager,
torch.compile, ORT and TVM all apply the state changes of a call the same way.

Backends live in their own modules (`torch_backends`, `onnx_backends`, `tvm_backends`, `faulty`)
and register themselves with `@register_backend`; `load_backends()` imports them all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from importlib import import_module
from typing import Any, Callable, ClassVar, Sequence

from nnforge.core.backward import call_gradients, run_step
from nnforge.core.python_state import python_state

BACKEND_MODULES = (
    "nnforge.oracle.torch_backends",
    "nnforge.oracle.onnx_backends",
    "nnforge.oracle.tvm_backends",
    "nnforge.oracle.faulty",
)


# -- what a backend is asked to run ----------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One call of the model, ready to run.

    `before` applies the call's state changes (train/eval, attributes, program globals) to the
    model; it runs before the compiler sees the call, exactly as it does for eager.
    """

    args: tuple[Any, ...]
    before: Callable[[Any], None] | None = None
    grad_enabled: bool | None = None
    reset_cache: bool = False
    seed: int = 0  # torch.manual_seed before the call: random ops agree with eager (fallback_random)
    program_globals: dict[str, Any] | None = None  # the program module's globals (its own copy for this run)
    backward: bool = False  # differentiate the outputs and return the gradients too (core/backward.py)
    optimizer: str | None = None  # then a training step with this run's optimizer of that kind
    retain_graph: bool = False  # the backward a second time through the retained graph


@dataclass(frozen=True)
class CallOutput:
    """What one call produced, detached and copied so later calls cannot change it.

    `args_after` and `state_after` catch lost in-place mutations of inputs and buffers, and
    `python_after` lost writes to module attributes and program globals (core/python_state.py);
    they are None for backends that cannot mutate Python-side state (ONNX Runtime, TVM).
    """

    outputs: Any
    args_after: tuple[Any, ...] | None = None
    state_after: dict[str, Any] | None = None
    python_after: dict[str, Any] | None = None
    elapsed_s: float = 0.0
    grads: dict[str, Any] | None = None  # a backward call's gradients by name ("input 0", "param w"); else None


class Unsupported(Exception):
    """The backend cannot express this program (an op, a dtype, an output type): not a bug."""


class RungSkipped(Exception):
    """The rung could not judge this program (e.g. ONNX's reference evaluator lacks an op)."""


class ExportFailed(Exception):
    """Exporting the model (to ONNX) raised: the exporter, not the runtime, is guilty."""


class CallFailed(Exception):
    """Call `call_index` of the sequence raised `error` (its traceback is kept on `error`)."""

    def __init__(self, call_index: int, error: BaseException, partial: list["CallOutput"] | None = None):
        super().__init__(f"call {call_index}: {type(error).__name__}: {error}")
        self.call_index = call_index
        self.error = error
        self.partial = list(partial or [])  # outputs of the calls before the failing one


# -- the plugin interface ----------------------------------------------------------------------
class Backend:
    """One rung. Subclasses set `name` and implement `run_one` (and `begin`/`reset` if stateful).

    Class attributes say what the oracle may expect from it:
    - `torch_side_effects`: it runs the Python model, so mutated inputs and module state after a
      call must match eager's too.
    - `stateful`: it caches compiled code across calls, so "state retained" and "cache reset
      before every call" are two different runs worth comparing.
    - `flat_outputs`: it returns a flat list of tensors (ONNX style), compared against the
      tensor leaves of eager's output.
    - `params`: the target parameters it understands (e.g. `dynamic`, `mode`, `op`).
    """

    name: ClassVar[str] = ""
    torch_side_effects: ClassVar[bool] = False
    stateful: ClassVar[bool] = False
    flat_outputs: ClassVar[bool] = False
    # computes float16/bfloat16 without wider accumulation: value-only misses there defer to later rungs
    imprecise_in_low_precision: ClassVar[bool] = False
    params: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **params: Any):
        self.options = {k: v for k, v in params.items() if k in self.params}

    # plugin hooks ---------------------------------------------------------------------------
    @classmethod
    def available(cls) -> bool:
        return True

    @classmethod
    def version(cls) -> str:
        return ""

    def begin(self, model: Any) -> None:
        """Prepare for a new sequence on a fresh model (e.g. wrap it in torch.compile)."""

    def reset(self) -> None:
        """Forget compiled state (torch._dynamo.reset()); only meaningful when `stateful`."""

    def run_one(self, model: Any, args: tuple[Any, ...], call_index: int) -> Any:
        raise NotImplementedError

    # the sequence loop ---------------------------------------------------------------------------
    def gradients(self, model: Any, leaves: dict[int, Any], out: Any, call: Call, call_index: int) -> Any:
        """A backward call's gradients (core/backward.py): the same for every backend that runs
        torch; the eager reference also records which of them follow indices of tied values."""
        return call_gradients(model, leaves, out, call.seed, twice=call.retain_graph)

    def compile_and_run(self, model: Any, calls: Sequence[Call], *, reset_each_call: bool = False) -> list[CallOutput]:
        """Run the whole invocation sequence on `model` (fresh, owned by this run).

        `reset_each_call`: drop compiled state before every call (the "cache reset" way of
        running a stateful case); otherwise state is retained except where a call asks for a
        reset. Raises CallFailed wrapping the first exception, with the call's index.
        """
        import torch

        results: list[CallOutput] = []
        try:
            self.begin(model)
        except BaseException as e:
            raise CallFailed(0, e) from e
        for i, call in enumerate(calls):
            try:
                if call.before is not None:
                    call.before(model)
                if i > 0 and (reset_each_call or call.reset_cache):
                    self.reset()
                torch.manual_seed(call.seed)
                # a backend that does not run the Python model (ONNX) judges the forward only
                step = call if self.torch_side_effects and call.grad_enabled is not False else replace(call, backward=False)
                start = time.perf_counter()
                out, grads, args = run_step(lambda *a: self.run_one(model, a, i), model, call.args, step, call.seed,
                                            gradients=lambda leaves, o: self.gradients(model, leaves, o, call, i))
                elapsed = time.perf_counter() - start
                if self.torch_side_effects:
                    results.append(CallOutput(snapshot(out), snapshot(args), snapshot(_module_state(model)),
                                              python_state(model, call.program_globals), elapsed, grads=grads))
                else:
                    results.append(CallOutput(snapshot(out), elapsed_s=elapsed))
            except CallFailed:
                raise
            except BaseException as e:
                raise CallFailed(i, e, results) from e
        return results


def snapshot(value: Any) -> Any:
    """A detached copy of a (nested) output, so that aliasing and later mutation cannot change it."""
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.layout != torch.strided:
            return t.clone()
        return t.clone(memory_format=torch.contiguous_format) if not t.is_contiguous() else t.clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple: keep its type
        return type(value)(*(snapshot(v) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(snapshot(v) for v in value) if type(value) in (tuple, list) else tuple(snapshot(v) for v in value)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    return value


def _module_state(model: Any) -> dict[str, Any]:
    try:
        return dict(model.state_dict(keep_vars=False))
    except Exception:  # a program whose state_dict is broken: nothing to compare
        return {}


# -- registries ------------------------------------------------------------------------------------
_BACKENDS: dict[str, type[Backend]] = {}


@dataclass(frozen=True)
class TargetSpec:
    """A target: the rungs of its blame ladder, cheapest first (the last is the system under test)."""

    name: str
    rungs: tuple[str, ...]
    hidden: bool = False  # test-only targets, used only when named explicitly
    default_param: str | None = None  # `target:value` means `target:<default_param>=value`
    family: str = "torch"  # "torch" (runs Python), "onnx" (needs an exported graph)
    doc: str = ""
    # rungs that are preconditions, not the system under test: where one of them fails (an ONNX
    # export that crashes or disagrees with eager in onnx.reference), the test is invalid for the
    # target ("not exportable"), never a finding against it
    gate_rungs: tuple[str, ...] = ()


_TARGETS: dict[str, TargetSpec] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make the backend available as a rung under `cls.name`."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no `name`")
    if cls.name in _BACKENDS and _BACKENDS[cls.name] is not cls:
        raise ValueError(f"backend name {cls.name!r} is taken by {_BACKENDS[cls.name].__name__}")
    _BACKENDS[cls.name] = cls
    return cls


def register_target(spec: TargetSpec) -> TargetSpec:
    if spec.name in _TARGETS and _TARGETS[spec.name] != spec:
        raise ValueError(f"target {spec.name!r} is already registered")
    _TARGETS[spec.name] = spec
    return spec


def load_backends() -> None:
    """Import every backend module so their registrations run (cheap: no compiler is imported)."""
    for mod in BACKEND_MODULES:
        import_module(mod)


def backend_class(name: str) -> type[Backend]:
    load_backends()
    try:
        return _BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; known: {sorted(_BACKENDS)}") from None


def target_names(include_hidden: bool = False) -> list[str]:
    load_backends()
    return [n for n, s in _TARGETS.items() if include_hidden or not s.hidden]


@dataclass(frozen=True)
class Target:
    """A resolved target string such as `inductor:dynamic=true,mode=max-autotune`."""

    spec: TargetSpec
    params: dict[str, Any] = field(default_factory=dict)
    text: str = ""

    @property
    def name(self) -> str:
        return self.text or self.spec.name

    def ladder(self, only: Sequence[str] | None = None) -> list[Backend]:
        """The rungs as backend instances, cheapest first (restricted to `only` if given)."""
        rungs = [r for r in self.spec.rungs if only is None or r in only]
        return [backend_class(r)(**self.params) for r in rungs]


def parse_target(text: str) -> Target:
    """`name` or `name:k=v,k2=v2` or `name:value` (for targets with a default parameter)."""
    load_backends()
    name, _, rest = text.strip().partition(":")
    if name not in _TARGETS:
        raise ValueError(f"unknown target {name!r}; known: {', '.join(target_names(include_hidden=True))}")
    spec = _TARGETS[name]
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            if spec.default_param is None:
                raise ValueError(f"target {name!r} takes key=value parameters, got {item!r}")
            key, value = spec.default_param, item
        params[key.strip()] = _parse_value(value.strip())
    allowed = {p for r in spec.rungs for p in backend_class(r).params}
    unknown = set(params) - allowed
    if unknown:
        raise ValueError(f"target {name!r} does not understand {sorted(unknown)}; it takes {sorted(allowed)}")
    return Target(spec=spec, params=params, text=text.strip())


def _parse_value(value: str) -> Any:
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value
