"""Eager PyTorch (the reference) and torch.compile's three layers as rungs.

Ladder for target `inductor`: `dynamo` (torch.compile backend "eager": only Dynamo's graph
capture) -> `aot_autograd` (backend "aot_eager": + AOTAutograd, functionalisation and
decompositions) -> `inductor` (+ Inductor's lowering and code generation). The first rung that
disagrees with eager names the guilty layer.

Target parameters (`inductor:dynamic=true,fullgraph=true,mode=max-autotune-no-cudagraphs`) go to
every torch.compile rung; `mode` only to Inductor (the other backends take no mode).
"""

from __future__ import annotations

from typing import Any, ClassVar

from nnforge.oracle.backend import Backend, TargetSpec, register_backend, register_target
from nnforge.oracle import kernel_unit


def _torch_version() -> str:
    import torch

    return torch.__version__


@register_backend
class EagerBackend(Backend):
    """Plain eager PyTorch: the reference every rung is compared with (not a rung of any target).

    While it runs it records, through a dispatch mode, the index outputs of argmax/argmin/max/min/
    sort/topk that saw ties (their index is unspecified, so they are not compared there) and
    whether any random op drew from torch's RNG (then only a backend that shares it can be compared).
    """

    name = "eager"
    torch_side_effects = True

    def __init__(self, record: bool = False, **params: Any):
        super().__init__(**params)
        self.record = record
        self.tie_masks: dict[int, dict[str, Any]] = {}
        self.grad_tie_masks: dict[int, dict[str, Any]] = {}  # per backward call: gradients that follow tied indices
        self.used_rng = False
        self._recorder: Any = None  # the last call's, so that its backward sees what its forward tainted

    @classmethod
    def version(cls) -> str:
        return _torch_version()

    def run_one(self, model: Any, args: tuple[Any, ...], call_index: int) -> Any:
        if not self.record:
            return model(*args)
        import torch

        from nnforge.oracle.compare import TieRecorder

        before = torch.get_rng_state()
        with TieRecorder() as rec:
            out = model(*args)
        self._recorder = rec
        # a seeded op that drew nothing (rrelu with training=False, dropout with p=0 in eval) is deterministic
        self.used_rng = self.used_rng or (rec.used_rng and not torch.equal(before, torch.get_rng_state()))
        self.tie_masks[call_index] = rec.masks_for(out)
        return out

    def gradients(self, model: Any, leaves: dict[int, Any], out: Any, call: Any, call_index: int) -> Any:
        rec = self._recorder if self.record else None
        if rec is None:
            return super().gradients(model, leaves, out, call, call_index)
        with rec:  # the backward of an index op on ties routes its gradient by the index chosen
            grads = super().gradients(model, leaves, out, call, call_index)
        self.grad_tie_masks[call_index] = rec.masks_for(grads)
        return grads


class TorchCompileBackend(Backend):
    """torch.compile with one of its backends; Dynamo's caches are dropped before each sequence."""

    compile_backend: ClassVar[str] = ""
    torch_side_effects = True
    stateful = True
    records_dynamo: ClassVar[bool] = True  # the job reads Dynamo's graph breaks and recompiles (dynamo_record.py)
    params = ("dynamic", "fullgraph", "mode")

    def __init__(self, **params: Any):
        super().__init__(**params)
        self._compiled: Any = None

    @classmethod
    def version(cls) -> str:
        return _torch_version()

    def compiler(self) -> Any:
        """What to pass as torch.compile's `backend` (a name or a callable)."""
        return self.compile_backend

    def compile_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"backend": self.compiler()}
        if self.options.get("dynamic") is not None:
            kw["dynamic"] = bool(self.options["dynamic"])
        if self.options.get("fullgraph"):
            kw["fullgraph"] = True
        return kw

    def begin(self, model: Any) -> None:
        import torch

        configure_torch()
        torch._dynamo.reset()
        self._compiled = self.wrap_compiled(model, torch.compile(model, **self.compile_kwargs()))

    def wrap_compiled(self, model: Any, compiled: Any) -> Any:
        """What runs each call, given torch.compile's result (test-only faults wrap it; repro.py
        calls this too, so a script reproduces on exactly what the oracle ran)."""
        return compiled

    def reset(self) -> None:
        import torch

        torch._dynamo.reset()

    def run_one(self, model: Any, args: tuple[Any, ...], call_index: int) -> Any:
        return self._compiled(*args)

    def compile_and_run(self, model: Any, calls: Any, *, reset_each_call: bool = False) -> Any:
        if not any(c.retain_graph for c in calls):
            return super().compile_and_run(model, calls, reset_each_call=reset_each_call)
        import torch._functorch.config as functorch_config

        # AOTAutograd donates saved buffers to the backward, and then refuses (by design, with
        # a message saying so) a second backward through the same graph; a sequence that asks
        # for one turns donation off, the documented way to make it valid (repro.py does too)
        with functorch_config.patch(donated_buffer=False):
            return super().compile_and_run(model, calls, reset_each_call=reset_each_call)


@register_backend
class DynamoBackend(TorchCompileBackend):
    name = "dynamo"
    compile_backend = "eager"


@register_backend
class AotAutogradBackend(TorchCompileBackend):
    name = "aot_autograd"
    compile_backend = "aot_eager"


@register_backend
class InductorBackend(TorchCompileBackend):
    name = "inductor"
    compile_backend = "inductor"

    def compile_kwargs(self) -> dict[str, Any]:
        kw = super().compile_kwargs()
        if self.options.get("mode"):
            kw["mode"] = str(self.options["mode"])
        return kw


def configure_torch() -> None:
    """Settings every compiled run needs to be comparable with eager."""
    import torch._inductor.config as inductor_config

    inductor_config.fallback_random = True  # random ops draw from torch's RNG, as eager does
    kernel_unit.install()  # one C++ compiler run per graph, not per kernel (NNFORGE_INDUCTOR_KERNEL_UNIT)


register_target(TargetSpec("inductor", ("dynamo", "aot_autograd", "inductor"),
                           doc="torch.compile with Inductor; blames Dynamo, AOTAutograd or Inductor"))
register_target(TargetSpec("aot_eager", ("dynamo", "aot_autograd"),
                           doc="torch.compile backend aot_eager; blames Dynamo or AOTAutograd"))
register_target(TargetSpec("eager", ("dynamo",), doc="torch.compile backend eager: Dynamo's capture alone"))
