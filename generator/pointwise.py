"""Pointwise feasibility: is there one value at which a whole elementwise chain stays finite?

Interval facts lose every correlation: in `atanh(x * x)` beside `xlogy(x * x - 1, x * x - 1)`
each op alone has room (x * x below 1 for atanh, at least 1 for xlogy), yet no x suits both.
Such chains are common in generated programs and no value search can repair them.

A value reached from one *root* value through elementwise ops only (and through rearrangements
that keep every element, such as reshape or expand) is, element by element, a function of one
scalar: element i of every such value depends on element i of the root alone. So an all-finite
run exists only if some scalar x in the root's possible values keeps every value of that
closure finite. We evaluate the closure's ops, with the real torch kernels in the real dtypes,
on every value of a small integer root, or on a dense grid of a float root's range, and refuse
a chain for which no point survives. A float chain that is finite only in a window narrower
than the grid is refused too; value search would rarely find such a window.

The ops evaluated are the generator's own trusted spec templates applied to probe tensors made
here, never a program under test.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import Any, Sequence

import torch
import z3

from nnforge.core.dtypes import is_float, to_torch
from nnforge.generator.numerics import REARRANGES, SUBSET, ops_where
from nnforge.generator.value_facts import is_index_output

__all__ = ["Step", "ChainCache", "lineages", "finite_somewhere", "root_grid", "enumerable", "chain_values", "image", "window_anchors"]

# Families whose ops map element i of their (same-shaped) operands to element i of the result.
POINTWISE_FAMILIES = frozenset({"elementwise", "comparison", "cast"})
# Rearrangements whose result holds every element of their first operand, and only those
# (numerics.py: REARRANGES).
ELEMENT_PRESERVING = ops_where(elements=REARRANGES)
# Ops whose one result holds some elements of their first operand (and nothing else): each is
# still f(x) at the root's value x, so a chain through them must stay finite at one x too.
# (They make the chain's feasible set a bound that an all-finite run can keep to, though the
# elements left out need not: stricter than necessary for those, never looser.) An op of these
# whose one result is indices (argsort) picks no elements.
ELEMENT_SUBSET = ops_where(elements=SUBSET)

# One node as the check sees it: the op instance, its input ids and its output ids.
Step = tuple[Any, Sequence[int], Sequence[int]]

_GRID_MAX_INTS = 4097


def _concrete(op: Any) -> bool:
    return not any(isinstance(v, z3.ExprRef) for v in op.attrs.values())


def lineages(steps: Sequence[Step]) -> dict[int, tuple[int, bool]]:
    """For each output of `steps` (in topological order) that is a function of one root value
    element by element: (root id, True if some op computes it, False if it is only rearranged).
    Values absent from the result are roots themselves."""
    root: dict[int, int] = {}
    layout: dict[int, int] = {}  # the last rearrangement on the way from the root (or the root)
    out: dict[int, tuple[int, bool]] = {}
    for op, ins, outs in steps:
        if len(outs) != 1 or not ins:
            continue
        o = outs[0]
        if getattr(op, "name", "") in ELEMENT_PRESERVING or _picks_elements(op):
            root[o] = root.get(ins[0], ins[0])
            layout[o] = o
            out[o] = (root[o], False)
        elif getattr(op, "family", "") in POINTWISE_FAMILIES and _concrete(op):
            # operands must share root and layout: x * reshape(x) pairs elements across positions
            keys = {(root.get(i, i), layout.get(i, i)) for i in ins}
            if len(keys) == 1:
                root[o], layout[o] = keys.pop()
                out[o] = (root[o], True)
    return out


def _picks_elements(op: Any) -> bool:
    name = getattr(op, "name", "")
    if name == "pad":  # reflect, replicate, circular: copies of the operand's elements
        return op.attrs.get("mode") in ("reflect", "replicate", "circular")
    return name in ELEMENT_SUBSET and not is_index_output(op, 0)


@lru_cache(maxsize=512)
def root_grid(dtype: str, lo: float, hi: float, integral: bool, values: tuple[float, ...] | None,
              continuous: bool, lo_open: bool, hi_open: bool) -> torch.Tensor:
    """Candidate scalars for a root: every value when few (bools, small integer ranges, value
    sets), else a grid dense near 0 and log-spaced out to the dtype's range."""
    tdt = to_torch(dtype)
    if values is not None:
        pts = torch.tensor(sorted(values), dtype=torch.float64)
    elif dtype == "bool":
        return torch.tensor([False, True])
    elif not is_float(dtype) or integral:
        info = torch.iinfo(tdt) if not is_float(dtype) else None
        a = max(lo, info.min if info else -1e30)
        b = min(hi, info.max if info else 1e30)
        if b - a + 1 <= _GRID_MAX_INTS:
            pts = torch.arange(math.ceil(a), math.floor(b) + 1, dtype=torch.float64)
        else:
            dense = torch.arange(-2048, 2049, dtype=torch.float64)
            far = torch.logspace(3.3, 18, 300, dtype=torch.float64).round()
            pts = torch.cat([dense, far, -far, torch.tensor([a, b], dtype=torch.float64)])
    else:
        dense = torch.linspace(-8.0, 8.0, 1601, dtype=torch.float64)
        far = torch.logspace(-8, 38, 461, dtype=torch.float64)
        pts = torch.cat([dense, far, -far])
        if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
            pts = torch.cat([pts, torch.linspace(lo, hi, 1025, dtype=torch.float64)])
        ends = [e for e in (lo, hi) if math.isfinite(e)]
        pts = torch.cat([pts, torch.tensor(ends, dtype=torch.float64)])
    keep = (pts > lo if lo_open else pts >= lo) & (pts < hi if hi_open else pts <= hi)
    pts = pts[keep]
    if dtype == "bool":
        return pts != 0
    if not is_float(dtype):
        info = torch.iinfo(tdt)
        pts = pts[(pts >= info.min) & (pts <= info.max)]
    cast = pts.to(tdt)
    if continuous:  # after the cast: 1e-8 is 0 in float16
        cast = cast[cast != 0]
    if not cast.is_floating_point():
        return cast
    return torch.unique(cast[torch.isfinite(cast)])  # sorted: neighbours are adjacent


def enumerable(dtype: str, lo: float, hi: float, values: tuple[float, ...] | None) -> bool:
    """Whether `root_grid` lists every value the root can hold (so images through it are exact)."""
    if values is not None or dtype == "bool":
        return True
    return not is_float(dtype) and math.isfinite(lo) and math.isfinite(hi) and hi - lo + 1 <= _GRID_MAX_INTS


class ChainCache:
    """Evaluations of chains already seen: the generator re-derives every value's facts on most
    insertions, while the chains themselves rarely change."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._got: dict[tuple, Any] = {}

    def values(self, steps: Sequence[Step], root_id: int, grid: torch.Tensor
               ) -> tuple[dict[int, torch.Tensor], torch.Tensor] | None:
        chains = lineages(steps)
        key = (root_id, grid.dtype, grid.numel(), float(grid[0]) if grid.numel() else 0.0,
               float(grid[-1]) if grid.numel() else 0.0,
               tuple((op.name, repr(sorted(op.attrs.items())), tuple(ins), tuple(outs))
                     for op, ins, outs in steps if len(outs) == 1 and chains.get(outs[0], (None,))[0] == root_id))
        if key not in self._got:
            if len(self._got) >= self.limit:
                self._got.clear()
            self._got[key] = chain_values(steps, root_id, grid, chains)
        return self._got[key]


def chain_values(steps: Sequence[Step], root_id: int, grid: torch.Tensor,
                 chains: dict[int, tuple[int, bool]] | None = None
                 ) -> tuple[dict[int, torch.Tensor], torch.Tensor] | None:
    """Every value computed from root `root_id` element by element, evaluated on `grid`, and
    the mask of grid points where all of them are finite; None where an op cannot be evaluated
    here (a template that needs real shapes)."""
    chains = lineages(steps) if chains is None else chains
    return _evaluate(steps, root_id, grid, chains)


def _evaluate(steps: Sequence[Step], root_id: int, grid: torch.Tensor, chains: dict[int, tuple[int, bool]]
              ) -> tuple[dict[int, torch.Tensor], torch.Tensor] | None:
    env: dict[int, torch.Tensor] = {root_id: off_the_minimum(grid)}
    ok = torch.ones(grid.shape[0], dtype=torch.bool)
    n = grid.shape[0]
    namespace = {"torch": torch, "F": torch.nn.functional, "math": math}
    computed: dict[int, torch.Tensor] = {}
    for op, ins, outs in steps:
        if len(outs) != 1 or chains.get(outs[0], (None,))[0] != root_id:
            continue
        if not chains[outs[0]][1]:
            env[outs[0]] = env[ins[0]]
            continue
        names = [f"_x{k}" for k in range(len(ins))]
        try:
            expr = op.materialize(names, dict(op.attrs), [[n]] * len(ins))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                y = eval(expr, namespace, {nm: env[i] for nm, i in zip(names, ins)})  # noqa: S307
        except Exception:
            return None
        if not isinstance(y, torch.Tensor) or y.shape != grid.shape:
            return None
        env[outs[0]] = computed[outs[0]] = off_the_minimum(y)
        if y.is_floating_point() or y.is_complex():
            ok &= torch.isfinite(y)
    return computed, ok


def off_the_minimum(t: torch.Tensor) -> torch.Tensor:
    """`t`, with a signed integer dtype's minimum moved one up. That value as a dividend is a
    SIGFPE in torch's eager kernels (a truncating division of INT_MIN by -1, lcm(INT_MIN, INT_MAX)),
    which no Python code can catch: it would kill the process evaluating the chain, and that is the
    campaign's parent. Chains are evaluated to learn where they stay finite, which integer values
    always do, so one grid point moved by one costs nothing."""
    if t.is_floating_point() or t.is_complex() or t.dtype in (torch.bool, torch.uint8):
        return t
    low = torch.iinfo(t.dtype).min
    return torch.where(t == low, low + 1, t) if bool((t == low).any()) else t


def finite_somewhere(steps: Sequence[Step], root_id: int, grid: torch.Tensor,
                     anchors: Sequence[float] | None = None, cache: ChainCache | None = None) -> bool:
    """Whether some point of `grid` (the root's candidate values) keeps every value computed
    from root `root_id` element by element finite. Ops that cannot be evaluated here make no
    claim: the answer is then True.

    `anchors`, for a root that varies continuously: the only points that may stand alone (its
    closed bounds, which pools of relu and the like do hit). Elsewhere a lone finite grid point,
    acos(v) beside acosh(v) at exactly v = 1, needs its neighbour finite too: value search
    moves such a root continuously and would only land on the point by chance."""
    if grid.numel() == 0:
        return False
    got = cache.values(steps, root_id, grid) if cache is not None else chain_values(steps, root_id, grid)
    if got is None:
        return True
    ok = got[1]
    if anchors is None:
        return bool(ok.any())
    if bool((ok[:-1] & ok[1:]).any()):
        return True
    return any(bool(ok[grid == a].any()) for a in anchors)


def window_anchors(dtype: str, lo: float, hi: float, integral: bool, values: tuple[float, ...] | None,
                   lo_open: bool, hi_open: bool) -> tuple[float, ...] | None:
    """The `anchors` argument of `finite_somewhere` for a root: None (every point counts) unless
    the root is a float that takes a continuum of values."""
    if not is_float(dtype) or integral or values is not None:
        return None
    return tuple(b for b, is_open in ((lo, lo_open), (hi, hi_open)) if math.isfinite(b) and not is_open)


def image(values: torch.Tensor) -> tuple[float, float, bool, tuple[float, ...] | None] | None:
    """(lo, hi, integral, the values when at most 7) of a chain value at the points that keep
    its chain finite; None if there are no such points."""
    if values.numel() == 0:
        return None
    v = values.double()
    distinct = torch.unique(v)
    integral = bool((v == v.round()).all())
    few = tuple(float(x) for x in distinct) if distinct.numel() <= 7 else None
    return float(distinct[0]), float(distinct[-1]), integral, few
