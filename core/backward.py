"""A call that asks for gradients: the loss it differentiates and the gradients it compares.

Much of torch.compile runs only in training: AOTAutograd's joint graph and partitioner, the
decompositions of `*_backward` ops, Inductor's backward kernels. A call step with `backward`
set makes every run of the call (eager, the float64 reference, each rung) do the same thing:
its floating-point tensor inputs become leaves that require grad, the loss is the sum of the
floating-point outputs weighted by fixed random cotangents (drawn from the call's seed, so every
run weights alike; the weighting is done in float64, so a float16 output's tangent is its
cotangent rounded once), and the gradients of every such input and of every parameter that
requires grad are what the call returned, beside its outputs.

Gradients are named `input <i>` and `param <name>`; an input or parameter the outputs do not
depend on has the gradient None. `autograd.grad` leaves `.grad` alone, so a call's backward
never accumulates into the next.

This module is plain code without nnforge imports: the repro script copies its functions in.
"""

from __future__ import annotations

from typing import Any

GRADIENT_LABEL = "gradients"


def with_grad_inputs(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[int, Any]]:
    """(what the model is called with, {position: leaf}): each floating-point tensor argument
    gets a fresh leaf that requires grad, and the model sees a copy of it (same values and
    strides), so that a program writing into its input in place stays valid."""
    import torch

    passed, leaves = [], {}
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            leaf = a.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
            leaves[i] = leaf
            a = leaf.clone(memory_format=torch.preserve_format)
        passed.append(a)
    return tuple(passed), leaves


def call_gradients(model: Any, leaves: dict[int, Any], out: Any, seed: int) -> dict[str, Any]:
    """{"input 0": grad, "param lin.weight": grad, ...} of the cotangent-weighted outputs, with
    respect to the inputs' leaves (`with_grad_inputs`) and the parameters; empty when no
    output depends on anything that requires grad."""
    import torch

    outs = [t for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    wrt = {f"input {i}": a for i, a in sorted(leaves.items())}
    wrt.update({f"param {n}": p for n, p in model.named_parameters() if p.requires_grad})
    if not outs or not wrt:
        return {}
    gen = torch.Generator().manual_seed(int(seed))
    loss = None
    for t in outs:
        cot = torch.randn(t.shape, generator=gen, dtype=torch.float64)
        term = (t.to(torch.float64) * cot).sum()
        loss = term if loss is None else loss + term
    grads = torch.autograd.grad(loss, list(wrt.values()), allow_unused=True)
    return {k: (g.detach().clone() if g is not None else None) for k, g in zip(wrt, grads)}


def gradient_name(path: str | None) -> str | None:
    """The gradient a comparison path points at ("['param w']" -> "param w")."""
    if not path:
        return None
    inner = path.strip("[]").strip("'\"")
    return inner or None
