"""Value bins: the values a test runs on are spread out the way its shapes and attributes are.

The generator bins shapes and attributes so that the solver does not hand back only its lazy
boundary values; without the same care for values, every test runs on one distribution
(floats from N(0, 1), integers from [-8, 8], booleans half set), and bugs that need other
values never show: an integer max that starts from 0 is right on every row that holds a
positive value, a rounding bug needs exact halves, a reduction bug needs ties.

A *family* is what a test draws (and what the campaign's scheduler learns about): `positive`,
`ties`, `constant`, ... Each family says, per kind of tensor (float, integer, bool), which *bin*
a leaf of that kind gets. A bin has three parts:

- `draw`: fresh values with the bin's property (the test's starting values);
- `project`: the property, enforced after every change value search makes (a one-sign input
  stays one-signed, a constant stays constant, a grid of halves stays on the grid); bins that
  are only a starting point (tiny or large magnitudes) project nothing, so the search may move
  them as far as finiteness needs;
- `holds`: whether a tensor has the property, which is what the record and the report say.

Not every leaf of a test gets the family's bin: each input and float parameter does with
probability `LEAF_SHARE` (one of them always), the others stay `normal`, so a bug that needs
one all-positive operand beside an ordinary one is in reach. Buffers are left as the program
made them: they are running statistics and counters whose values a program relies on.

Special values (inf, NaN, -0.0) are no bin: value search exists to keep them out, and the K1
mutators write them where an operator's definition makes them meaningful.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from nnforge.core.dtypes import INT_DTYPE_RANGES, from_torch, input_int_range

NORMAL = "normal"
LEAF_SHARE = 0.75  # chance that a leaf other than the chosen one takes the test's family
SIGN_FLOOR = 1e-3  # a one-signed float stays at least this far from 0 (log, division stay finite)


@dataclass(frozen=True)
class ValueBin:
    """One way to choose a tensor's values (see the module docstring)."""

    name: str
    kind: str  # "float" | "int" | "bool"
    property: str  # what holds of every tensor drawn from it, in words ("all positive")
    draw: Callable[[torch.Tensor, torch.Generator], torch.Tensor]  # like -> fresh values (same dtype)
    # float values -> in the bin (integer inputs: applied to the float master, then rounded)
    project: Callable[[torch.Tensor], torch.Tensor] | None = None
    holds: Callable[[torch.Tensor], bool] = lambda t: True
    fold: Callable[[torch.Tensor], torch.Tensor] | None = None  # a resampled draw -> in the bin (default: project)
    # The projection may also be applied to what value search's optimiser moves (a sign bound
    # can: it blocks no small step). Grids, ties and constants must leave it free, or every
    # step shorter than the grid would be rounded away.
    bounds_master: bool = False

    @property
    def constrains(self) -> bool:
        return self.project is not None

    def into_bin(self, values: torch.Tensor) -> torch.Tensor:
        """A draw made elsewhere (value search resamples from its own ranges) moved into the bin."""
        f = self.fold or self.project
        return values if f is None else f(values)


# ------------------------------------------------------------------------------- helpers


def _normal(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(like.shape, dtype=torch.float64, generator=gen)


def _pick(gen: torch.Generator, options: list[Any]) -> Any:
    return options[int(torch.randint(0, len(options), (1,), generator=gen))]


def _as(like: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` in like's dtype and strides."""
    out = torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device=like.device)
    out.copy_(values.to(like.dtype) if like.dtype != torch.bool else values.bool())
    return out


def _int_limits(like: torch.Tensor) -> tuple[int, int]:
    return INT_DTYPE_RANGES[from_torch(like.dtype)]


def _float_cap(like: torch.Tensor) -> float:
    """The largest magnitude a 'large' draw uses: far from 1, well inside the dtype."""
    return 1e3 if like.dtype in (torch.float16,) else 1e4


def _all(t: torch.Tensor, pred: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    return t.numel() == 0 or bool(pred(t.detach()).all())


def _distinct(t: torch.Tensor) -> int:
    return int(torch.unique(t.detach().flatten()).numel()) if t.numel() else 0


def _few_distinct(t: torch.Tensor) -> bool:
    """Ties: at most 3 distinct values, or a quarter of the elements, whichever is more."""
    return _distinct(t) <= max(3, t.numel() // 4)


def _constant(t: torch.Tensor) -> bool:
    return _distinct(t) <= 1


def _fill_mean(t: torch.Tensor) -> torch.Tensor:
    if t.numel() == 0:
        return t
    return torch.full_like(t, float(t.detach().double().mean()))


def _fill_first(t: torch.Tensor) -> torch.Tensor:
    if t.numel() == 0:
        return t
    return torch.full_like(t, float(t.detach().flatten()[0]))


TIE_STEP = 0.5  # ties: floats on a grid this coarse, within a narrow range, repeat often
GRID_STEP = 0.5  # grid: exact integers and halves (rounding, floor and ceil boundaries)


def _on_grid(step: float) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda t: torch.round(t / step) * step


def _is_on_grid(step: float) -> Callable[[torch.Tensor], bool]:
    return lambda t: _all(t, lambda v: torch.remainder(v.double(), step) == 0)


# ------------------------------------------------------------------------------- the bins

BINS: dict[str, ValueBin] = {}


def _bin(b: ValueBin) -> ValueBin:
    BINS[f"{b.kind}:{b.name}"] = b
    return b


def _int_small(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    lo, hi = input_int_range(from_torch(like.dtype))
    return torch.randint(lo, hi + 1, like.shape, generator=gen)


def _int_positive(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    hi = max(1, input_int_range(from_torch(like.dtype))[1])
    return torch.randint(1, hi + 1, like.shape, generator=gen)


def _int_negative(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    lo, _ = input_int_range(from_torch(like.dtype))  # (bin_for gives unsigned dtypes `tiny` instead)
    return torch.randint(lo, 0, like.shape, generator=gen)


def _int_limits_draw(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Near one end of the dtype (8-16 bit), or far from 0 for wide dtypes, whose ends no
    program can touch without overflowing in eager first."""
    d_lo, d_hi = _int_limits(like)
    if d_hi - d_lo <= 65535:
        side = _pick(gen, ["low", "high"]) if d_lo < 0 else "high"
        lo, hi = (d_lo, d_lo + 15) if side == "low" else (d_hi - 15, d_hi)
        return torch.randint(lo, hi + 1, like.shape, generator=gen)
    span = 1 << 15
    return torch.randint(-span, span + 1, like.shape, generator=gen)


def _int_tiny(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    d_lo, _ = _int_limits(like)
    return torch.randint(0 if d_lo >= 0 else -1, 2, like.shape, generator=gen)


def _int_ties(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    lo, hi = input_int_range(from_torch(like.dtype))
    picks = torch.randint(lo, hi + 1, (3,), generator=gen)
    return picks[torch.randint(0, 3, like.shape, generator=gen)]


def _int_constant(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    lo, hi = input_int_range(from_torch(like.dtype))
    return torch.full(like.shape, int(torch.randint(lo, hi + 1, (1,), generator=gen)))


for _b in (
    ValueBin(NORMAL, "int", "drawn from the default small range", _int_small),
    ValueBin("positive", "int", "all positive", _int_positive, project=lambda t: t.clamp_min(1),
             holds=lambda t: _all(t, lambda v: v > 0), bounds_master=True),
    ValueBin("negative", "int", "all negative", _int_negative,
             project=lambda t: t.clamp_max(-1), holds=lambda t: _all(t, lambda v: v < 0), bounds_master=True),
    ValueBin("tiny", "int", "all in {-1, 0, 1}", _int_tiny, holds=lambda t: _all(t, lambda v: v.abs() <= 1)),
    ValueBin("large", "int", "near the dtype's limits (8-16 bit) or far from 0", _int_limits_draw),
    ValueBin("ties", "int", "few distinct values (ties)", _int_ties, holds=_few_distinct),
    ValueBin("constant", "int", "all equal", _int_constant, project=_fill_mean, holds=_constant, fold=_fill_first),
):
    _bin(_b)


def _float_positive(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return _normal(like, gen).abs() + SIGN_FLOOR


def _float_tiny(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return _normal(like, gen) * _pick(gen, [1e-2, 1e-3, 1e-4])


def _float_large(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    cap = _float_cap(like)
    return _normal(like, gen) * _pick(gen, [cap / 100, cap / 10, cap])


def _float_ties(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Three values of the grid of halves, repeated: every element ties with about a third."""
    picks = _on_grid(TIE_STEP)(torch.empty(3, dtype=torch.float64).uniform_(-1.5, 1.5, generator=gen))
    return picks[torch.randint(0, 3, like.shape, generator=gen)]


def _float_constant(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.full(like.shape, float(torch.randn((), dtype=torch.float64, generator=gen)), dtype=torch.float64)


def _float_grid(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-8, 9, like.shape, generator=gen).double() * GRID_STEP


for _b in (
    ValueBin(NORMAL, "float", "drawn from N(0, 1)", lambda like, gen: _normal(like, gen)),
    ValueBin("positive", "float", "all positive", _float_positive, project=lambda t: t.clamp_min(SIGN_FLOOR),
             holds=lambda t: _all(t, lambda v: v > 0), fold=lambda t: t.abs().clamp_min(SIGN_FLOOR),
             bounds_master=True),
    ValueBin("negative", "float", "all negative", lambda like, gen: -_float_positive(like, gen),
             project=lambda t: t.clamp_max(-SIGN_FLOOR), holds=lambda t: _all(t, lambda v: v < 0),
             fold=lambda t: -t.abs().clamp_min(SIGN_FLOOR), bounds_master=True),
    ValueBin("tiny", "float", "magnitudes of 1e-2 to 1e-4", _float_tiny),
    ValueBin("large", "float", "magnitudes of 1e1 to 1e4", _float_large),
    ValueBin("ties", "float", "few distinct values (ties on a grid of halves)", _float_ties,
             project=_on_grid(TIE_STEP), holds=_few_distinct, fold=lambda t: _on_grid(TIE_STEP)(t.clamp(-1.5, 1.5))),
    ValueBin("constant", "float", "all equal", _float_constant, project=_fill_mean, holds=_constant,
             fold=_fill_first),
    ValueBin("grid", "float", "exact integers and halves", _float_grid, project=_on_grid(GRID_STEP),
             holds=_is_on_grid(GRID_STEP)),
):
    _bin(_b)


def _bool_draw(p: float | None) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    def draw(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        if p is None:  # constant: all set or none, one or the other
            return torch.full(like.shape, bool(torch.randint(0, 2, (1,), generator=gen)))
        return torch.rand(like.shape, generator=gen, dtype=torch.float64) < p
    return draw


for _b in (
    ValueBin(NORMAL, "bool", "about half set", _bool_draw(0.5)),
    ValueBin("positive", "bool", "all true", _bool_draw(1.0), holds=lambda t: _all(t, lambda v: v)),
    ValueBin("negative", "bool", "all false", _bool_draw(0.0), holds=lambda t: _all(t, lambda v: ~v)),
    ValueBin("tiny", "bool", "mostly false", _bool_draw(0.1)),
    ValueBin("constant", "bool", "all equal", _bool_draw(None), holds=_constant),
):
    _bin(_b)

# Families: what a test draws. A family without a bin for some kind leaves that kind normal.
FAMILIES: tuple[str, ...] = (NORMAL, "positive", "negative", "tiny", "large", "ties", "constant", "grid")


def kind_of(t: torch.Tensor) -> str | None:
    if t.dtype == torch.bool:
        return "bool"
    if t.is_floating_point():
        return "float"
    if t.is_complex():
        return None
    return "int" if from_torch(t.dtype) in INT_DTYPE_RANGES else None


def bin_for(family: str, t: torch.Tensor) -> ValueBin:
    """The bin a leaf like `t` gets in `family` (normal where the family has none for its kind)."""
    kind = kind_of(t)
    if kind is None:
        raise ValueError(f"no value bin for a {t.dtype} tensor")
    if kind == "int" and family == "negative" and _int_limits(t)[0] >= 0:
        family = "tiny"  # an unsigned dtype has no negative values: its smallest ones instead
    return BINS.get(f"{kind}:{family}") or BINS[f"{kind}:{NORMAL}"]


def check_family(name: str) -> str:
    if name not in FAMILIES:
        raise ValueError(f"unknown value bin {name!r}: one of {', '.join(FAMILIES)}")
    return name


# ------------------------------------------------------------------------------- a test's plan


@dataclass
class ValuePlan:
    """Which bin each leaf of one test got: inputs by flat position, parameters by name."""

    family: str
    inputs: dict[int, ValueBin] = field(default_factory=dict)
    params: dict[str, ValueBin] = field(default_factory=dict)
    # the values before the bin's draw: where value search starts again when it cannot make the
    # program finite from the bin's values (the program's own make_inputs() and weights)
    original_inputs: tuple = ()
    original_params: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def binned(self) -> bool:
        return bool(self.inputs or self.params)

    def restore_originals(self, model: torch.nn.Module) -> tuple:
        """Put the program's own weights back; its own inputs are returned."""
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in self.original_params.items():
                params[name].copy_(value)
        return self.original_inputs

    def leaves(self) -> dict[str, str]:
        """Leaf -> bin name, for the record (`input 0`, `param w3`); normal leaves left out."""
        out = {f"input {i}": b.name for i, b in sorted(self.inputs.items()) if b.name != NORMAL}
        out.update({f"param {n}": b.name for n, b in sorted(self.params.items()) if b.name != NORMAL})
        return out


def _flat_tensors(inputs: tuple) -> list[tuple[int, torch.Tensor]]:
    from torch.utils._pytree import tree_flatten

    flat, _ = tree_flatten(tuple(inputs))
    return [(i, x) for i, x in enumerate(flat) if isinstance(x, torch.Tensor) and x.numel() and kind_of(x)]


def apply_family(family: str, model: torch.nn.Module, inputs: tuple, seed: int) -> tuple[tuple, ValuePlan]:
    """Draw the test's starting values from `family`: the new inputs (same structure, dtypes
    and strides), the model's float parameters rewritten in place, and the plan value search
    keeps to. `normal` changes nothing: the program's own `make_inputs()` values stand."""
    from torch.utils._pytree import tree_flatten, tree_unflatten

    check_family(family)
    plan = ValuePlan(family, original_inputs=tuple(inputs))
    if family == NORMAL:
        return tuple(inputs), plan
    rng = random.Random(f"{seed}:{family}")
    gen = torch.Generator().manual_seed(seed)
    leaves: list[tuple[str, Any, torch.Tensor]] = [("input", i, x) for i, x in _flat_tensors(inputs)]
    leaves += [("param", n, p) for n, p in model.named_parameters() if p.is_floating_point() and p.numel()]
    if not leaves:
        return tuple(inputs), plan
    eligible = [k for k, (_, _, t) in enumerate(leaves) if bin_for(family, t).name != NORMAL]
    chosen = rng.choice(eligible) if eligible else -1  # one leaf always takes the family, where one can
    flat, spec = tree_flatten(tuple(inputs))
    for k, (where, key, t) in enumerate(leaves):
        b = bin_for(family, t) if (k == chosen or rng.random() < LEAF_SHARE) else bin_for(NORMAL, t)
        if b.name == NORMAL:
            continue
        fresh = _as(t, b.draw(t, gen))
        if where == "input":
            plan.inputs[key] = b
            flat[key] = fresh.requires_grad_(t.requires_grad) if fresh.is_floating_point() else fresh
        else:
            plan.params[key] = b
            plan.original_params[key] = t.detach().clone()
            with torch.no_grad():
                t.copy_(fresh)
    return tuple(tree_unflatten(flat, spec)), plan


def plan_holds(plan: ValuePlan, model: torch.nn.Module, inputs: tuple) -> dict[str, bool]:
    """Per binned leaf, whether its values still have the bin's property (after value search)."""
    flat = dict(_flat_tensors(inputs))
    params = dict(model.named_parameters())
    out = {}
    for i, b in plan.inputs.items():
        if i in flat:
            out[f"input {i}"] = bool(b.holds(flat[i]))
    for n, b in plan.params.items():
        if n in params:
            out[f"param {n}"] = bool(b.holds(params[n]))
    return out


# ------------------------------------------------------------------------------- what values show


def describe_tensor(t: torch.Tensor) -> list[str]:
    """Properties of a tensor's values that bugs depend on, in words ('all positive', 'all
    equal'); empty when the values have none of them. Read from the values, not from a bin, so
    that what a report says holds of the values the repro really runs on."""
    if not isinstance(t, torch.Tensor) or not t.numel() or kind_of(t) is None or t.numel() < 2:
        return []
    v = t.detach()
    if v.dtype == torch.bool:
        n = int(v.sum())
        return ["all true"] if n == v.numel() else ["all false"] if n == 0 else []
    out = []
    if _constant(v):
        return ["all equal"]
    if bool((v > 0).all()):
        out.append("all positive")
    elif bool((v < 0).all()):
        out.append("all negative")
    elif bool((v >= 0).all()):
        out.append("none negative")
    if v.numel() >= 8 and _distinct(v) <= 3:
        out.append(f"{_distinct(v)} distinct values")
    if v.is_floating_point() and bool(torch.isfinite(v).all()):
        if _is_on_grid(GRID_STEP)(v):
            out.append("exact integers and halves")
        m = float(v.abs().max())
        if m < 1e-2:
            out.append("magnitudes below 1e-2")
        elif m >= 100:
            out.append("magnitudes up to %.0e" % m)
    return out
