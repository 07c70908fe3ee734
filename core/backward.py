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
never accumulates into the next, unless the call is a training step: then its parameter
gradients are added to `.grad` and an optimizer steps (`optimizer_step`). Each run of a sequence
(eager, the reference, each rung, each on its own model) has its own optimizer, made on first
use and kept for the sequence, so momentum and Adam's moments carry compiled state's effects
into later calls, where the parameters are compared after every call. A call with
`retain_graph` runs its backward twice through the same graph; the second gradients are
compared too ("param w (second backward)").

This module is plain code without nnforge imports: the repro script copies its functions in.
"""

from __future__ import annotations

import re
import weakref
from typing import Any

GRADIENT_LABEL = "gradients"
SECOND_BACKWARD = " (second backward)"
# The optimizers of a training sequence. Adam's eps is large on purpose: with the usual 1e-8 its
# first step is lr * sign(g), so a gradient that is 0 up to rounding would move a parameter by a
# full step one way in eager and the other way compiled; with 1e-2 the step is smooth in g.
OPTIMIZER_SETTINGS = {"sgd": {"lr": 0.01, "momentum": 0.9}, "adam": {"lr": 0.001, "eps": 0.01}}
_OPTIMIZERS: Any = weakref.WeakKeyDictionary()  # model -> {kind: its optimizer in this run}
# Forms autograd refuses in the forward once an input requires grad: operators without a
# derivative, and reductions of floats asked for an integer result. Read from the program's text
# (a cheap screen, before any test runs): a program holding one is given no backward step.
NOT_DIFFERENTIABLE = re.compile(r"\b(heaviside|floor_divide)\b|//|"
                                r"\b(sum|prod|cumsum|cumprod|nansum)\([^)]*dtype=torch\.(u?int\d*|bool|long|short|char)\b")


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


def call_gradients(model: Any, leaves: dict[int, Any], out: Any, seed: int, twice: bool = False) -> dict[str, Any]:
    """{"input 0": grad, "param lin.weight": grad, ...} of the cotangent-weighted outputs, with
    respect to the inputs' leaves (`with_grad_inputs`) and the parameters; empty when no
    output depends on anything that requires grad. `twice`: the backward runs again through
    the retained graph, and its gradients are added under names ending in SECOND_BACKWARD."""
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
    grads = torch.autograd.grad(loss, list(wrt.values()), allow_unused=True, retain_graph=twice)
    named = {k: (g.detach().clone() if g is not None else None) for k, g in zip(wrt, grads)}
    if twice:
        again = torch.autograd.grad(loss, list(wrt.values()), allow_unused=True)
        named.update({k + SECOND_BACKWARD: (g.detach().clone() if g is not None else None) for k, g in zip(wrt, again)})
    return named


def optimizer_step(model: Any, gradients: dict[str, Any], kind: str) -> None:
    """A training step after a call's backward: its parameter gradients are added to `.grad`
    (so that calls without `zero_grad` accumulate, as training loops do) and the model's
    optimizer of `kind` steps."""
    import torch

    per_model = _OPTIMIZERS.setdefault(model, {})
    if kind not in per_model:
        make = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[kind]
        per_model[kind] = make(list(model.parameters()), **OPTIMIZER_SETTINGS[kind])
    for name, p in model.named_parameters():
        g = gradients.get(f"param {name}")
        if g is not None:
            p.grad = g.detach().clone().to(p.dtype) if p.grad is None else p.grad + g.to(p.dtype)
    per_model[kind].step()


def zero_grad(model: Any) -> None:
    for p in model.parameters():
        p.grad = None


def set_param_requires_grad(model: Any, wanted: dict[str, bool]) -> None:
    """Freeze or unfreeze parameters before a call: a name is a parameter ("lin.weight") or a
    submodule whose parameters all change ("lin"); a name the model lacks is an error."""
    params = dict(model.named_parameters())
    for name, flag in wanted.items():
        hit = [p for n, p in params.items() if n == name or n.startswith(name + ".")]
        if not hit:
            raise KeyError(f"the model has no parameter or submodule with parameters named {name!r}")
        for p in hit:
            p.requires_grad_(bool(flag))


def run_step(fn: Any, model: Any, args: tuple[Any, ...], step: Any, seed: int,
             gradients: Any = None) -> tuple[Any, dict[str, Any] | None, tuple[Any, ...]]:
    """One call of a sequence as `step` asks (anything with CallStep's `backward`,
    `grad_enabled`, `optimizer` and `retain_graph`): the forward in its grad mode, or the
    forward, its backward and its training step. Returns (output, gradients or None, the
    arguments `fn` was called with). `gradients(leaves, out)` takes the backward when the caller
    must see it taken (the eager reference records tied indices); by default `call_gradients`.
    The oracle's backends (oracle/backend.py) and the probes that replay a sequence outside the
    oracle (mutators/reach.py, mutators/validate.py) all run a call through this."""
    import torch

    if not step.backward:
        with torch.set_grad_enabled(torch.is_grad_enabled() if step.grad_enabled is None else step.grad_enabled):
            return fn(*args), None, args
    args, leaves = with_grad_inputs(args)
    with torch.enable_grad():
        out = fn(*args)
        grads = (gradients(leaves, out) if gradients is not None
                 else call_gradients(model, leaves, out, seed, twice=step.retain_graph))
    if step.optimizer is not None:
        optimizer_step(model, grads or {}, step.optimizer)
    return out, grads, args


def differentiable(program: str) -> bool:
    """Whether a backward step may be added to this program (see NOT_DIFFERENTIABLE)."""
    forward = program.split("def forward", 1)[-1].split("\ndef make_inputs", 1)[0]
    return NOT_DIFFERENTIABLE.search(forward) is None


def gradient_name(path: str | None) -> str | None:
    """The gradient a comparison path points at ("['param w']" -> "param w")."""
    if not path:
        return None
    inner = path.strip("[]").strip("'\"")
    return inner or None
