"""What a growing graph knows about its values: the facts bookkeeping of the generator.

The generator (engine.py) inserts operators; before it keeps one it asks this side whether the
graph can still run all-finite: the interval facts of every value (value_facts.py), narrowed by
the domains of the vulnerable operators that read it, the element-wise chains evaluated exactly
(pointwise.py), and the aliases that make `x - positive(x)` a known zero. A mixin of
`GraphGenerator`: the state it reads (`vals`, `nodes`, `facts`, `needs`, `alias`, `_chains`,
`doomed`) is the generator's own, kept where the growth loop updates it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from nnforge.generator.pointwise import Step, enumerable, finite_somewhere, image, lineages, root_grid, window_anchors
from nnforge.generator.spec import OpSpec
from nnforge.generator.value_facts import (
    ELEMENTWISE_MAX, ELEMENTWISE_MIN, SIZED_OPS, Concrete, Facts, hopeless, makes_fixed, operand_need, placeholder_facts, same_values_as,
    value_facts, within,
)

TENTATIVE = -1  # the id an op's result has while the generator weighs inserting it
_FAR = 16.0  # chain bounds on a float root beyond this are left alone (see `_within_chain`)
_UNIONS = frozenset({"cat", "stack"})  # results holding every element of every operand


class ValueBookkeeping:
    """The facts side of GraphGenerator (see the module docstring)."""

    vals: dict[int, Any]
    nodes: list[Any]
    facts: dict[int, Facts]
    needs: dict[int, tuple[str, ...]]
    alias: dict[int, int]

    def _facts_of(self, vid: int, facts: dict[int, Facts] | None = None) -> Facts:
        f = (self.facts if facts is None else facts).get(vid)
        return f if f is not None else placeholder_facts(self.vals[vid].t.dtype)

    def _facts_with(self, vid: int, made: Facts, needs: dict[int, tuple[str, ...]] | None = None
                    ) -> dict[int, Facts] | None:
        """Every value's facts once placeholder `vid` gets facts `made` (nodes are in topological
        order) and each value is narrowed to what the ops reading it need (`needs`, by default
        the graph's), or None if a vulnerable op would then be hopeless or a value have no room.

        A concatenation narrowed by its readers narrows its operands too (every element of each
        is one of its own): log(cat(a, b)) feeding rsqrt bounds a above 1, for erfinv(a) as
        well. That takes another pass over the graph, at most twice."""
        needs = self.needs if needs is None else needs
        bounds: dict[int, tuple[float, float]] = {}
        self.doomed = None  # the op found hopeless, if that is why the answer is None
        for _ in range(3):
            facts = self._facts_pass(vid, made, needs, bounds)
            if facts is None:
                return None
            more = self._union_bounds(facts, bounds)
            if not more:
                return facts
            bounds.update(more)
        return facts

    def _union_bounds(self, facts: dict[int, Facts], bounds: dict[int, tuple[float, float]]
                      ) -> dict[int, tuple[float, float]]:
        """Bounds that the facts of each result put on its operands, where tighter than the
        operands' own (and than `bounds`): a cat/stack result bounds every operand both ways;
        an elementwise maximum bounds them from above (logit(maximum(x, i)) leaves an integer i
        at most 0, for digamma(i) as well), a minimum from below."""
        more: dict[int, tuple[float, float]] = {}
        for n in self.nodes:
            name = n.spec.name
            if len(n.outputs) != 1 or not (name in _UNIONS or name in ELEMENTWISE_MAX or name in ELEMENTWISE_MIN):
                continue
            out = self._facts_of(n.outputs[0], facts)
            for i in n.inputs:
                f = self._facts_of(i, facts)
                lo, hi = bounds.get(i, more.get(i, (-math.inf, math.inf)))
                if name not in ELEMENTWISE_MAX:
                    # an open bound at a whole number excludes it from an integer operand
                    lo = max(lo, out.lo + 1 if out.lo_limit and f.integral and float(out.lo).is_integer() else out.lo)
                if name not in ELEMENTWISE_MIN:
                    hi = min(hi, out.hi - 1 if out.hi_limit and f.integral and float(out.hi).is_integer() else out.hi)
                if lo > f.lo or hi < f.hi:
                    if (lo, hi) != bounds.get(i):
                        more[i] = (lo, hi)
        return more

    def _facts_pass(self, vid: int, made: Facts, needs: dict[int, tuple[str, ...]],
                    bounds: dict[int, tuple[float, float]]) -> dict[int, Facts] | None:
        """One pass of `_facts_with`, each value also kept within `bounds`."""
        facts = dict(self.facts)
        facts[vid] = made
        produced = {o for n in self.nodes for o in n.outputs}
        steps = self._steps()
        chains, images = lineages(steps), {}
        roots = {r for r, _ in chains.values()}
        for leaf in self.vals:
            if leaf not in produced and (self._canon(leaf) in needs or leaf in roots or leaf in bounds):
                narrowed = self._narrowed(leaf, self._facts_of(leaf, facts), needs, bounds)
                if narrowed is not None and leaf in roots:
                    narrowed = self._within_chain(leaf, narrowed, steps, images)
                if narrowed is None:
                    return None
                facts[leaf] = narrowed
        for n in self.nodes:
            ins = [self._facts_of(i, facts) for i in n.inputs]
            if hopeless(n.spec, ins):
                # (blame needs more than operands "fixed" by narrowing: floor(x) is 0 where x must
                # lie in [0, 1), yet search still moves x)
                self.doomed = n if hopeless(n.spec, [replace(f, fixed=False) for f in ins]) else None
                return None
            dts = [self.vals[o].t.dtype for o in n.outputs]
            for o, f in zip(n.outputs, self._node_facts(n.spec, n.inputs, ins, dts)):
                f = self._exact_image(o, f, steps, chains, facts, images)
                if f is None:
                    return None
                narrowed = self._narrowed(o, f, needs, bounds)
                if narrowed is not None and o in roots:
                    narrowed = self._within_chain(o, narrowed, steps, images)
                if narrowed is None:
                    return None
                facts[o] = narrowed
        return facts

    def _within_chain(self, root: int, f: Facts, steps: list[Step], images: dict) -> Facts | None:
        """Root facts `f` narrowed to the values that keep the root's elementwise chain finite:
        in any all-finite run every element lies there, which bounds the root for its other
        readers too (a sum of it, a matmul), as `needs` does for one vulnerable reader. None:
        no value of a fully known root does. Fills `images` for `_exact_image`."""
        dtype = self.vals[root].t.dtype
        grid = root_grid(dtype, f.lo, f.hi, f.integral, f.values, f.continuous, f.lo_limit, f.hi_limit)
        exact = enumerable(dtype, f.lo, f.hi, f.values)
        got = self._chains.values(steps, root, grid)
        images[root] = (got, exact)
        if got is None or dtype == "bool":
            return f
        fine = grid[got[1]].double()
        if fine.numel() == 0:
            return None if exact else f
        lo, hi = max(f.lo, float(fine.min())), min(f.hi, float(fine.max()))
        if lo > hi:
            return f
        if not exact:  # a float grid's far ends mark overflow, not a domain: exp(x) beside
            lo = lo if abs(lo) <= _FAR else f.lo  # logsigmoid(x) leaves x below 88, yet
            hi = hi if abs(hi) <= _FAR else f.hi  # logsigmoid stays "below 0 but in saturation"
        few = tuple(float(v) for v in torch.unique(fine)) if exact and fine.numel() <= 7 else f.values
        return replace(f, lo=lo, hi=hi, values=few, lo_limit=f.lo_limit and lo == f.lo,
                       hi_limit=f.hi_limit and hi == f.hi)

    def _narrowed(self, vid: int, f: Facts, needs: dict[int, tuple[str, ...]],
                  bounds: dict[int, tuple[float, float]] | None = None) -> Facts | None:
        for name in needs.get(self._canon(vid), ()):
            f = within(name, f)
            if f is None:
                return None
        if bounds and vid in bounds:
            lo, hi = max(f.lo, bounds[vid][0]), min(f.hi, bounds[vid][1])
            if lo > hi:
                return None
            f = replace(f, lo=lo, hi=hi, lo_limit=f.lo_limit and lo == f.lo, hi_limit=f.hi_limit and hi == f.hi)
        return f

    def _with_need(self, op: OpSpec, in_ids: list[int]
                   ) -> tuple[dict[int, tuple[str, ...]], dict[int, Facts] | None]:
        """The needs and facts once `op` reads `in_ids`: unchanged unless it is a vulnerable
        unary op whose domain narrows its operand (None facts: that leaves some value no room)."""
        name = operand_need(op)
        if name is None or not in_ids:
            return self.needs, self.facts
        key = self._canon(in_ids[0])
        if name in self.needs.get(key, ()):
            return self.needs, self.facts
        needs = {**self.needs, key: self.needs.get(key, ()) + (name,)}
        return needs, self._facts_with(in_ids[0], self._facts_of(in_ids[0]), needs)

    def _steps(self) -> list[Step]:
        return [(n.spec, n.inputs, n.outputs) for n in self.nodes]

    def _pointwise_ok(self, steps: list[Step], vid: int, facts: dict[int, Facts], raw: Facts | None = None) -> bool:
        """Whether some scalar keeps finite every value computed element by element from the
        root of `vid`'s elementwise chain (see generator/pointwise.py)."""
        root = lineages(steps).get(vid, (vid,))[0]
        if root == TENTATIVE:
            return True
        f = self._facts_of(root, facts)
        dtype = self.vals[root].t.dtype
        grid = root_grid(dtype, f.lo, f.hi, f.integral, f.values, f.continuous, f.lo_limit, f.hi_limit)
        # lone points may stand at the bounds the root has of itself, not at those its readers'
        # domains narrowed it to (acos(x) beside acosh(x) leaves x in [1, 1])
        own = raw if raw is not None and root == vid else self._unnarrowed(root, steps, facts)
        return finite_somewhere(steps, root, grid, window_anchors(dtype, own.lo, own.hi, own.integral, own.values,
                                                                  own.lo_limit, own.hi_limit), self._chains)

    def _unnarrowed(self, vid: int, steps: list[Step], facts: dict[int, Facts]) -> Facts:
        """`vid`'s facts before the ops reading it narrowed them (see `needs`)."""
        for op, ins, outs in steps:
            if vid in outs and self.vals.get(vid) is not None:
                made = self._node_facts(op, list(ins), [self._facts_of(i, facts) for i in ins],
                                        [self.vals[o].t.dtype if o in self.vals else "float32" for o in outs])
                return made[list(outs).index(vid)]
        return placeholder_facts(self.vals[vid].t.dtype)

    def _exact_image(self, vid: int, f: Facts, steps: list[Step], chains: dict, facts: dict[int, Facts],
                     images: dict) -> Facts | None:
        """`f` narrowed to the values `vid` takes when it is computed element by element from a
        root whose every possible value is known (a bool, a small integer range, a value set):
        bitwise_and(x, 0) is 0, whatever x; or, from a float root, when the chain takes only a few
        values over the root's whole grid (hardshrink(logsigmoid(x)) is 0 wherever
        pow(it, it) is finite, but for a few isolated points value search never lands on).
        None: no value of a fully known root keeps its chain finite.
        `images` caches each root's evaluation for one pass over the graph."""
        root, computed = chains.get(vid, (None, False))
        if root is None or not computed:
            return f
        if root not in images:
            rf = self._facts_of(root, facts)
            dtype = self.vals[root].t.dtype
            grid = root_grid(dtype, rf.lo, rf.hi, rf.integral, rf.values, rf.continuous, rf.lo_limit, rf.hi_limit)
            images[root] = (self._chains.values(steps, root, grid), enumerable(dtype, rf.lo, rf.hi, rf.values))
        got, exact = images[root]
        if got is None or vid not in got[0]:
            return f
        values, ok = got
        seen = image(values[vid][ok])
        if seen is None:
            return None if exact else f
        lo, hi, integral, few = seen
        if not exact:  # a float root's grid bounds nothing, but a step function's few values over
            if few is None:  # the whole grid are all it takes (sign, hardtanh(x, 0, 0)); kept as
                return f  # bounds only: sign(x)'s {-1, 0, 1} is no mask that all elements must match,
            few, integral = f.values, f.integral  # nor is floor(x)'s {0, 1} a lone integer to match
        if few is not None and f.values is not None:
            few = tuple(v for v in few if v in f.values) or few
        if max(f.lo, lo) <= min(f.hi, hi):  # else the interval rule was loose in a way the image is not
            lo, hi = max(f.lo, lo), min(f.hi, hi)
        return replace(f, lo=lo, hi=hi, integral=f.integral or integral,
                       values=few if few is not None else f.values)

    def _canon(self, vid: int) -> int:
        while vid in self.alias:
            vid = self.alias[vid]
        return vid

    def _node_facts(self, op: OpSpec, in_ids: list[int], ins: list[Facts], out_dtypes: list[str],
                    concrete: Concrete | None = None) -> list[Facts]:
        canon = [self._canon(i) for i in in_ids]
        same = len(canon) == 2 and canon[0] == canon[1]
        if op.name == "addcmul" and len(canon) == 3:  # x + t * t: a square
            same = canon[1] == canon[2]
        if concrete is None and op.name in SIZED_OPS:  # sizes known before solving (rank 0, keepdim's 1)
            concrete = Concrete((tuple(self.vals[in_ids[0]].t.shape),), op.attrs)
        return value_facts(op, ins, out_dtypes, makes_fixed(op, canon, ins), same_operands=same, concrete=concrete)

    def _note_alias(self, op: OpSpec, in_ids: list[int], out_ids: list[int]) -> None:
        canon = [self._canon(i) for i in in_ids]
        pos = same_values_as(op, canon) if len(out_ids) == 1 else None
        if pos is not None:
            self.alias[out_ids[0]] = canon[pos]

