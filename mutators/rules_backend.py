"""Offline rewrites aimed at the backend categories (lowering and code generation), I1-K1.

Like the frontend rules, each keeps every existing name's dtype and shape; the rewrites here
change what the compiler sees underneath: strides, precisions, fusion opportunities, sizes that
vary between calls, special values and empty tensors.
"""

from __future__ import annotations

import ast
import random
from dataclasses import replace

from nnforge.core.calls import CallStep, InputChange
from nnforge.core.testcase import TestCase
from nnforge.mutators.ast_tools import FLOAT_DTYPES, Anchor, ProgramTree, channels_last_ok, expr, guard, instantiate
from nnforge.mutators.base import AnchorRule, Mutator, Probe, derive, ensure_calls, parse_case, register_mutator


def _stride_safe(tree: ProgramTree) -> bool:
    """Non-contiguous values are safe only when forward never calls `.view` (which needs compatible strides)."""
    return not (tree.forward_calls("view") or tree.forward_calls("view_as"))


# -- I1: memory layout ----------------------------------------------------------------------------------------
INPUT_LAYOUT_HELPER = """
def _dense_layout(t, order):
    if t.dim() != len(order):
        return t
    _back = [list(order).index(_d) for _d in range(t.dim())]
    return t.permute(order).contiguous().permute(_back)
"""


def _dense_orders(shape: tuple[int, ...] | None, rank: int) -> list[tuple[str, tuple[int, ...]]]:
    """Dense but non-contiguous memory orders for an input of this shape: (kind, dim order outer->inner).

    Only dense layouts survive the way every call's arguments are copied (core/replay.copy_value clones
    with preserve_format, which keeps a permuted dense layout but makes a sliced-with-step or expanded
    tensor contiguous again), so an input's layout must be one of these to reach the compiler. A
    permutation that only moves size-1 dims is still contiguous: every order here moves two dims of
    size > 1 (unknown sizes count as > 1).
    """
    big = [d for d in range(rank) if shape is None or shape[d] > 1]
    if len(big) < 2:
        return []
    out: list[tuple[str, tuple[int, ...]]] = []
    i, j = big[-2], big[-1]
    swap = list(range(rank))
    swap[i], swap[j] = j, i
    out.append(("transposed", tuple(swap)))
    if rank >= 3:
        out.append(("reversed", tuple(range(rank - 1, -1, -1))))
    if rank == 4 and (shape is None or (shape[1] > 1 and shape[2] * shape[3] > 1)):
        out.append(("channels_last", (0, 2, 3, 1)))
    return out


@register_mutator
class InputLayout(Mutator):
    """make_inputs returns an input with the same values in another dense memory order (transposed,
    dims reversed, channels_last), so the compiled graph's input is non-contiguous and its stride
    guards differ from the seed's."""

    name = "i1_input_layout"
    category = "I1"
    needs = ("a tensor input with two dims of size > 1 (make_inputs returns a tuple)", "a forward without .view")

    def _options(self, tree: ProgramTree) -> list[tuple[int, str, tuple[int, ...]]]:
        exprs = tree.input_exprs()
        if exprs is None or len(exprs) != len(tree.params()):
            return []
        out = []
        cl_ok = channels_last_ok(tree)
        for i, p in enumerate(tree.params()):
            fact = tree.facts.get(p)
            if fact is None or not fact.rank:
                continue
            out += [(i, kind, order) for kind, order in _dense_orders(fact.shape, fact.rank)
                    if kind != "channels_last" or cl_ok]
        return out

    def applicable(self, case: TestCase) -> bool:
        tree = parse_case(case)
        return tree is not None and _stride_safe(tree) and bool(self._options(tree))

    def mutate(self, case: TestCase, rng: random.Random, probe: Probe | None = None) -> TestCase | None:
        tree = parse_case(case)
        if tree is None or not _stride_safe(tree):
            return None
        options = self._options(tree)
        if not options:
            return None
        i, kind, order = rng.choice(options)
        exprs = tree.input_exprs()
        assert exprs is not None
        ret = next(s for s in tree.make_inputs.body if isinstance(s, ast.Return))
        assert isinstance(ret.value, ast.Tuple)
        if kind == "channels_last":
            ret.value.elts[i] = ast.Call(func=ast.Attribute(value=exprs[i], attr="contiguous", ctx=ast.Load()), args=[],
                                         keywords=[ast.keyword(arg="memory_format", value=expr("torch.channels_last"))])
        else:
            stmts, m = instantiate(tree, {"module": INPUT_LAYOUT_HELPER})
            tree.add_module_level(stmts["module"])
            ret.value.elts[i] = ast.Call(func=ast.Name(id=m["_dense_layout"], ctx=ast.Load()),
                                         args=[exprs[i], ast.Constant(order)], keywords=[])
        return derive(case, self, program=tree.source(), note={"layout": {str(i): kind}})


@register_mutator
class IntermediateLayout(AnchorRule):
    """An intermediate made transposed-non-contiguous, channels_last, expanded (stride 0) or sliced with a step."""

    name = "i1_intermediate_layout"
    category = "I1"
    float_ = False
    min_rank = 2
    needs = ("a tensor of rank >= 2 in forward", "a forward without .view")

    VARIANTS = {
        "transposed": "X = X.transpose(-1, -2).contiguous().transpose(-1, -2)\n",
        "channels_last": "X = X.contiguous(memory_format=torch.channels_last) if X.dim() == 4 else X\n",
        "expanded": "X = torch.where(X[..., :1].expand(X.shape) == X[..., :1].expand(X.shape), X, X)\n",
        "stepped": """
_buf = torch.zeros(tuple(X.shape[:-1]) + (X.shape[-1] * 2,), dtype=X.dtype, device=X.device)
_buf[..., ::2] = X
X = _buf[..., ::2]
""",
    }

    def extra_ok(self, tree):
        return _stride_safe(tree)

    def rewrite(self, tree, anchor, rng, case):
        # channels_last only where the facts say X is 4-d (elsewhere the variant leaves X as it is)
        kinds = [k for k in sorted(self.VARIANTS)
                 if k != "channels_last" or (anchor.fact.rank == 4 and channels_last_ok(tree))]
        kind = rng.choice(kinds)
        self.splice(tree, anchor, {"forward": self.VARIANTS[kind]})
        return None


# -- I2: dtypes and precision ------------------------------------------------------------------------------------
@register_mutator
class PrecisionRoundTrip(AnchorRule):
    """Casts around ops: a low-precision round trip, a float64-accumulated reduction, a bool mask and an int count."""

    name = "i2_precision_roundtrip"
    category = "I2"
    needs = ("a float tensor in forward",)

    VARIANTS = {
        "bf16": "X = X.to(torch.bfloat16).to(X.dtype)\n",
        "half": "X = (X.double() * 0.5 + X.half().float().to(X.dtype) * 0.5).to(X.dtype)\n",
        "reduce64": "X = X + X.mean(dim=-1, keepdim=True, dtype=torch.float64).to(X.dtype) * 0.5\n",
        "mask": """
_mask = X > 0
_count = _mask.to(torch.int32).sum()
X = torch.where(_mask, X, X * 0.5) + (_count % 2).to(X.dtype)
""",
    }

    def rewrite(self, tree, anchor, rng, case):
        kind = rng.choice(sorted(self.VARIANTS))
        self.splice(tree, anchor, {"forward": self.VARIANTS[kind]})
        return None


@register_mutator
class InputDtype(Mutator):
    """make_inputs hands one float input over in another precision; forward casts it back first thing."""

    name = "i2_input_dtype"
    category = "I2"
    needs = ("a float tensor input of known dtype (make_inputs returns a tuple)",)

    def _inputs(self, tree: ProgramTree) -> list[int]:
        exprs = tree.input_exprs()
        if exprs is None or len(exprs) != len(tree.params()):
            return []
        return [i for i, p in enumerate(tree.params()) if (f := tree.facts.get(p)) is not None and f.is_float]

    def applicable(self, case: TestCase) -> bool:
        tree = parse_case(case)
        return tree is not None and bool(self._inputs(tree))

    def mutate(self, case: TestCase, rng: random.Random, probe: Probe | None = None) -> TestCase | None:
        tree = parse_case(case)
        if tree is None or not self._inputs(tree):
            return None
        i = rng.choice(self._inputs(tree))
        p = tree.params()[i]
        orig = tree.facts[p].dtype
        new = rng.choice([d for d in FLOAT_DTYPES if d != orig])
        exprs = tree.input_exprs()
        assert exprs is not None
        ret = next(s for s in tree.make_inputs.body if isinstance(s, ast.Return))
        assert isinstance(ret.value, ast.Tuple)
        ret.value.elts[i] = ast.Call(func=ast.Attribute(value=exprs[i], attr="to", ctx=ast.Load()),
                                     args=[expr(f"torch.{new}")], keywords=[])
        tree.insert_forward_start([ast.parse(f"{p} = {p}.to(torch.{orig})").body[0]])
        return derive(case, self, program=tree.source(), note={"input_dtype": {str(i): new}})


# -- I3: fusion-sensitive patterns ----------------------------------------------------------------------------------
@register_mutator
class FusionPatterns(AnchorRule):
    """A reduction feeding broadcast pointwise ops, views between ops, one intermediate used several times."""

    name = "i3_fusion_patterns"
    category = "I3"
    needs = ("a float tensor in forward",)

    VARIANTS = {
        "reduce_pointwise": """
_red = X.sum(dim=-1, keepdim=True) * 0.1
_u = torch.tanh(X - _red)
_w = _u * _u + _u
X = _w.reshape(X.shape) + _w.flatten().view(X.shape) * 0.5
""",
        "softmax_like": """
if X.numel() > 0:
    _m = X.amax(dim=-1, keepdim=True)
    _e = torch.exp(X - _m)
    X = X + _e / _e.sum(dim=-1, keepdim=True)
""",
        "reuse": """
_t = torch.sigmoid(X)
X = _t * X + _t - _t.mean() * _t
""",
    }

    def rewrite(self, tree, anchor, rng, case):
        kind = rng.choice(sorted(self.VARIANTS))
        self.splice(tree, anchor, {"forward": self.VARIANTS[kind]})
        return None


# -- J1: dynamic shapes ----------------------------------------------------------------------------------------------
def then_calls(case: TestCase, steps: tuple[CallStep, ...]) -> tuple[CallStep, ...]:
    """The case's calls, then `steps` in the first call's grad mode (a step's default, None, means grad
    enabled: after an inference seed's first call that flip alone would recompile)."""
    base = ensure_calls(case, 1)
    return base + tuple(replace(st, grad_enabled=base[0].grad_enabled) if st.grad_enabled is None else st
                        for st in steps)


DYNAMIC_SIZES = (1, 0, 33, 2)


@register_mutator
class DynamicExtraInput(AnchorRule):
    """A new input whose length changes between calls (5, 1, 0, 33, ...), read through a size-dependent branch."""

    name = "j1_dynamic_input"
    category = "J1"
    needs = ("a float tensor in forward", "make_inputs returns a tuple literal", "forward without *args/defaults")

    def extra_ok(self, tree):
        return accepts_new_input(tree)

    def rewrite(self, tree, anchor, rng, case):
        stmts, m = instantiate(tree, {"forward": """
_len = _dyn.shape[0]
if _len > 1:
    _z = _dyn[:_len // 2].sum() - _dyn[_len // 2:].sum() * 0.5
elif _len == 1:
    _z = _dyn[0] * 1.0
else:
    _z = _dyn.sum()
X = X + torch.tanh(_z).to(X.dtype) * 0.1
"""}, X=anchor.name)
        index = _add_input(tree, m["_dyn"], "torch.randn([5], dtype=torch.float32)")
        tree.insert_after(anchor, guard(stmts["forward"], self.guard_for(anchor), X=anchor.name))
        sizes = list(DYNAMIC_SIZES)
        rng.shuffle(sizes)
        steps = tuple(CallStep(inputs=(InputChange(index=index, shape=(n,)),)) for n in sizes[:rng.randint(2, 4)])
        dynamic = dict(case.meta.get("dynamic_inputs") or {})
        dynamic[str(index)] = [0]
        tree.notes["dynamic_inputs"] = dynamic
        return then_calls(case, steps)


SIZE_BRANCH = """
if _n == 0:
    X = X + 1.0
elif _n == 1:
    X = X * 2.0
elif _n % 2 == 0:
    X = X * 0.5 + X.flip(0)
else:
    X = X - 0.25 * (_n % 3)
"""
BRANCH_SIZES = (0, 1, 4, 7, 10)
SIZE_PLAN_TRIES = 6

# A size plan (n, members): every (input index, dim) in members has length n; later calls resize them together.
SizePlan = tuple[int, tuple[tuple[int, int], ...]]


def size_plans(tree: ProgramTree) -> list[SizePlan]:
    """Ways to resize existing inputs: one input's dim of size n >= 2 alone, or every input's dim that
    has the same size at the same place counted from the right (dims that broadcast together)."""
    shapes = [(i, tree.facts[p].shape) for i, p in enumerate(tree.params()) if p in tree.facts and tree.facts[p].shape]
    plans: list[SizePlan] = []
    for i, shape in shapes:
        assert shape is not None
        for d, n in enumerate(shape):
            if n < 2:
                continue
            k = len(shape) - d
            group = tuple((j, len(sj) - k) for j, sj in shapes if sj is not None and len(sj) >= k and sj[len(sj) - k] == n)
            for plan in ((n, group), (n, ((i, d),))):
                if plan not in plans:
                    plans.append(plan)
    return plans


def _resize_steps(tree: ProgramTree, plan: SizePlan) -> tuple[CallStep, ...]:
    n, members = plan
    steps = []
    for size in (n + 1, 2 * n):  # both >= 2: sizes 0 and 1 are specialised, these stay symbolic
        changes = []
        for j, d in members:
            shape = list(tree.facts[tree.params()[j]].shape or ())
            shape[d] = size
            changes.append(InputChange(index=j, shape=tuple(shape)))
        steps.append(CallStep(inputs=tuple(changes)))
    return tuple(steps)


@register_mutator
class SizeBranch(AnchorRule):
    """Size-dependent control flow (== 0, == 1, parity) on an input's size that changes on later calls.

    With a probe, existing inputs are resized (n -> n+1 -> 2n, on every input sharing that dim when
    they broadcast together) and the branch reads that size: the second call fails a size guard and
    recompiles with the dim symbolic, the third flips the parity the branch guarded. Without a probe,
    or when no resize runs in eager, a new input of declared-dynamic length drives the branch.
    """

    name = "j1_size_branch"
    category = "J1"
    min_rank = 1
    uses_probe = True
    needs = ("a float tensor of rank >= 1 in forward", "make_inputs returns a tuple literal",
             "forward without *args/defaults")

    def extra_ok(self, tree):
        return accepts_new_input(tree)

    def mutate(self, case: TestCase, rng: random.Random, probe: Probe | None = None) -> TestCase | None:
        tree = parse_case(case)
        if tree is None or not self.extra_ok(tree):
            return None
        plans = size_plans(tree) if probe is not None else []
        rng.shuffle(plans)
        for plan in plans[:SIZE_PLAN_TRIES]:
            mutant = self._build(case, rng, plan)
            if mutant is not None and probe is not None and probe(mutant):
                return mutant
        return self._build(case, rng, None)

    def _build(self, case: TestCase, rng: random.Random, plan: SizePlan | None) -> TestCase | None:
        tree = parse_case(case)
        anchor = self.choose(tree, rng) if tree is not None else None
        if tree is None or anchor is None:
            return None
        if plan is None:
            calls = self.rewrite(tree, anchor, rng, case)
        else:
            i, d = plan[1][0]
            self._splice(tree, anchor, f"_n = {tree.params()[i]}.shape[{d}]\n")
            calls = then_calls(case, _resize_steps(tree, plan))
        return derive(case, self, program=tree.source(), calls=calls, note=tree.notes or None)

    def _splice(self, tree: ProgramTree, anchor: Anchor, start: str) -> dict[str, str]:
        """`start` (which defines `_n`) first in forward, the branch after the anchor.

        Not `splice`'s "forward_start": that is inserted before the anchor's position is used, which
        shifts the branch one statement up (and ahead of `_n` when the anchor is a parameter).
        """
        stmts, m = instantiate(tree, {"start": start, "forward": SIZE_BRANCH}, X=anchor.name)
        tree.insert_after(anchor, guard(stmts["forward"], self.guard_for(anchor), X=anchor.name))
        tree.insert_forward_start(stmts["start"])
        return m

    def rewrite(self, tree, anchor, rng, case):
        """The fallback: a new input whose length (declared dynamic) changes between calls."""
        m = self._splice(tree, anchor, "_n = _dyn.shape[0]\n")
        index = _add_input(tree, m["_dyn"], "torch.randn([5], dtype=torch.float32)")
        sizes = list(BRANCH_SIZES)
        rng.shuffle(sizes)
        steps = tuple(CallStep(inputs=(InputChange(index=index, shape=(n,)),)) for n in sizes[:rng.randint(2, 3)])
        dynamic = dict(case.meta.get("dynamic_inputs") or {})
        dynamic[str(index)] = [0]
        tree.notes["dynamic_inputs"] = dynamic
        return then_calls(case, steps)


def accepts_new_input(tree: ProgramTree) -> bool:
    """make_inputs returns a tuple literal matching forward's plain positional parameters."""
    a = tree.forward.args
    exprs = tree.input_exprs()
    return (exprs is not None and len(exprs) == len(tree.params()) and not a.vararg and not a.kwonlyargs
            and not a.defaults and not a.kwarg)


def _add_input(tree: ProgramTree, name: str, value: str) -> int:
    """Append a parameter to forward and its value to make_inputs' tuple; return its index."""
    index = len(tree.params())
    tree.forward.args.args.append(ast.arg(arg=name))
    ret = next(s for s in tree.make_inputs.body if isinstance(s, ast.Return))
    assert isinstance(ret.value, ast.Tuple)
    ret.value.elts.append(expr(value))
    return index


# -- K1: randomness and special values ------------------------------------------------------------------------------
@register_mutator
class SpecialValues(AnchorRule):
    """inf/-inf/nan through ops that define them: minimum with +inf, maximum with -inf, isfinite/where, nan_to_num."""

    name = "k1_special_values"
    category = "K1"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {"forward": """
_cap = torch.full_like(X, float('inf'))
_low = torch.tensor(float('-inf'), dtype=X.dtype)
_clean = torch.maximum(torch.minimum(X, _cap), _low)
X = torch.where(torch.isfinite(_clean), _clean, torch.nan_to_num(_clean, nan=0.0, posinf=1.0, neginf=-1.0))
"""})
        return None


@register_mutator
class EmptyTensors(AnchorRule):
    """Empty (0-size) tensors flowing through ops: a cat with a 0-row slice, reductions over an empty dim,
    a matmul with a 0 inner dim. Every result is defined (sum of nothing is 0, prod is 1, an empty
    inner product is zeros), so X keeps its values, dtype and shape; the compiled graph sees 0 dims."""

    name = "k1_empty_tensors"
    category = "K1"
    float_ = False
    min_rank = 1
    needs = ("a tensor of rank >= 1 in forward",)

    VARIANTS = {
        "cat_empty": """
_empty = X[:0]
_zero = _empty.sum()
X = torch.cat([X, _empty], dim=0) + _zero.to(X.dtype)
""",
        "empty_batch": """
_none = X[:0].float()
_red = torch.relu(_none * 2.0 + 1.0).sum(0, keepdim=True) + (_none.prod(0, keepdim=True) - 1.0)
X = X + _red.to(X.dtype)
""",
        "empty_matmul": """
_cols = X.reshape(-1, 1)[:, :0].float()
_rows = torch.ones(0, 1, dtype=_cols.dtype, device=X.device)
X = X + torch.matmul(_cols, _rows).reshape(X.shape).to(X.dtype)
""",
    }

    def rewrite(self, tree, anchor, rng, case):
        kind = rng.choice(sorted(self.VARIANTS))
        self.splice(tree, anchor, {"forward": self.VARIANTS[kind]})
        return None


@register_mutator
class SeededRandomness(AnchorRule):
    """Dropout / rand_like in forward: random ops the oracle seeds per call (fallback_random for compilers)."""

    name = "k1_random_ops"
    category = "K1"
    packable = False  # a pack would move or dilute what it tests
    needs = ("a float tensor in forward",)

    VARIANTS = {
        "dropout": "X = torch.nn.functional.dropout(X, p=0.25, training=self.training)\n",
        "rand_like": "X = X + torch.rand_like(X) * 0.01\n",
    }

    def rewrite(self, tree, anchor, rng, case):
        kind = rng.choice(sorted(self.VARIANTS))
        self.splice(tree, anchor, {"forward": self.VARIANTS[kind]})
        return None
