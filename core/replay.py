"""Replaying an invocation sequence (core/calls.py): the arguments and state of each call.

The oracle's job, the mutators' eager validator and the repro writer all replay `calls`; they
must agree on what a step means, so the meaning lives here, once.
"""

from __future__ import annotations

from typing import Any

from nnforge.core.calls import CallStep, InputChange


class CallStepError(ValueError):
    """A call step that cannot apply to this program (e.g. it changes an input that is not a tensor)."""


def apply_state(step: CallStep, model: Any, module: Any) -> None:
    """Apply the step's mode, attribute, global and training-state changes before its call."""
    import torch

    from nnforge.core.backward import set_param_requires_grad, zero_grad

    if step.mode == "train":
        model.train()
    elif step.mode == "eval":
        model.eval()
    for path, value in step.set_attrs.items():
        *parents, last = path.split(".")
        obj = model
        for p in parents:
            obj = getattr(obj, p)
        current = getattr(obj, last, None)
        if isinstance(current, torch.Tensor) and not isinstance(value, torch.Tensor):
            value = torch.tensor(value, dtype=current.dtype)
        setattr(obj, last, value)
    for name, value in step.set_globals.items():
        setattr(module, name, value)
    if step.zero_grad:
        zero_grad(model)
    if step.param_requires_grad:
        try:
            set_param_requires_grad(model, step.param_requires_grad)
        except KeyError as e:
            raise CallStepError(f"call step changes requires_grad of a parameter the model lacks: {e}") from e


def changes_state(step: CallStep) -> bool:
    return (step.mode is not None or bool(step.set_attrs) or bool(step.set_globals) or step.zero_grad
            or bool(step.param_requires_grad))


def build_args(base: tuple[Any, ...], changes: tuple[InputChange, ...], seed: int) -> tuple[Any, ...]:
    """This call's arguments: copies of the base inputs with the step's changes applied."""
    import torch

    args = [copy_value(a) for a in base]
    for ch in changes:
        if not 0 <= ch.index < len(args) or not isinstance(args[ch.index], torch.Tensor):
            raise CallStepError(f"call step changes input {ch.index}, which is not a tensor input")
        x = args[ch.index]
        if ch.shape is not None:
            x = regenerate(x, tuple(ch.shape), seed * 31 + ch.index)
        if ch.dtype is not None:
            x = x.to(getattr(torch, ch.dtype))
        if ch.layout is not None:
            x = with_layout(x, ch.layout)
        if ch.requires_grad is not None:
            x = x.detach()
            if ch.requires_grad and (x.is_floating_point() or x.is_complex()):
                x.requires_grad_(True)
        args[ch.index] = x
    return tuple(args)


def copy_value(a: Any) -> Any:
    import torch

    if isinstance(a, torch.Tensor):
        c = _same_layout_copy(a.detach())
        return c.requires_grad_(a.requires_grad) if (c.is_floating_point() or c.is_complex()) else c
    if isinstance(a, (list, tuple)):
        return type(a)(copy_value(x) for x in a)
    if isinstance(a, dict):
        return {k: copy_value(v) for k, v in a.items()}
    return a


def _same_layout_copy(a: Any) -> Any:
    """A copy with `a`'s exact strides, offset and overlap: a strided slice or an expanded input
    is a layout the compiler must handle (TAXONOMY I1), and `clone` would make it contiguous."""
    import torch

    if a.is_contiguous() or a.layout != torch.strided or a.is_sparse or a.is_quantized or a.numel() == 0:
        return a.clone(memory_format=torch.preserve_format)
    try:
        storage = a.untyped_storage().clone()
        return torch.empty(0, dtype=a.dtype, device=a.device).set_(storage, a.storage_offset(), a.size(), a.stride())
    except Exception:  # an exotic tensor subclass: a dense copy is still the right values
        return a.clone(memory_format=torch.preserve_format)


def regenerate(x: Any, shape: tuple[int, ...], seed: int) -> Any:
    """New values of a new shape, drawn from the range the original values span."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if x.dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    lo = float(x.min()) if x.numel() else 0.0
    hi = float(x.max()) if x.numel() else 1.0
    if x.is_floating_point():
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(x.dtype).requires_grad_(x.requires_grad)
    return torch.randint(int(lo), int(hi) + 1, shape, generator=g).to(x.dtype)


def with_layout(x: Any, layout: str) -> Any:
    """Same values (except `expanded`, which repeats the first slice), different strides."""
    import torch

    if layout == "contiguous":
        return x.contiguous()
    if layout == "transposed" and x.dim() >= 2:
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "channels_last" and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    if layout == "strided" and x.dim() >= 1:
        buf = torch.zeros(*x.shape[:-1], x.shape[-1] * 2, dtype=x.dtype)
        buf[..., ::2] = x.detach()
        return buf[..., ::2].requires_grad_(x.requires_grad) if x.requires_grad else buf[..., ::2]
    if layout == "expanded" and x.dim() >= 1 and x.shape[0] > 0:
        return x.detach()[:1].expand(x.shape)
    if layout in ("transposed", "channels_last", "strided", "expanded"):
        return x  # the layout does not apply to a tensor of this rank
    raise CallStepError(f"unknown layout {layout!r}")
