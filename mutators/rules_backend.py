"""Offline rewrites aimed at the backend categories (lowering and code generation), I1-K1.

Like the frontend rules, each keeps every existing name's dtype and shape; the rewrites here
change what the compiler sees underneath: strides, precisions, fusion opportunities, sizes that
vary between calls, special values and empty tensors.
"""

from __future__ import annotations

import ast
import random

from nnforge.core.calls import CallStep, InputChange
from nnforge.core.testcase import TestCase
from nnforge.mutators.ast_tools import FLOAT_DTYPES, ProgramTree, channels_last_ok, expr, guard, instantiate
from nnforge.mutators.base import AnchorRule, Mutator, Probe, derive, ensure_calls, parse_case, register_mutator

LAYOUT_HELPER = """
def _with_layout(t, kind):
    if kind == 'transposed' and t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if kind == 'channels_last' and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if kind == 'strided' and t.dim() >= 1:
        _buf = torch.zeros(tuple(t.shape[:-1]) + (t.shape[-1] * 2,), dtype=t.dtype)
        _buf[..., ::2] = t
        return _buf[..., ::2]
    if kind == 'expanded' and t.dim() >= 1 and t.shape[0] > 0:
        return t[:1].expand(t.shape)
    return t
"""


def _stride_safe(tree: ProgramTree) -> bool:
    """Non-contiguous values are safe only when forward never calls `.view` (which needs compatible strides)."""
    return not (tree.forward_calls("view") or tree.forward_calls("view_as"))


# -- I1: memory layout ----------------------------------------------------------------------------------------
@register_mutator
class InputLayout(Mutator):
    """make_inputs returns an input transposed, channels_last, sliced with a step or expanded (same shape)."""

    name = "i1_input_layout"
    category = "I1"
    needs = ("a tensor input of rank >= 1 (make_inputs returns a tuple)", "a forward without .view")

    def _inputs(self, tree: ProgramTree) -> list[int]:
        exprs = tree.input_exprs()
        if exprs is None or len(exprs) != len(tree.params()):
            return []
        out = []
        for i, p in enumerate(tree.params()):
            fact = tree.facts.get(p)
            if fact is not None and (fact.rank or 0) >= 1:
                out.append(i)
        return out

    def applicable(self, case: TestCase) -> bool:
        tree = parse_case(case)
        return tree is not None and _stride_safe(tree) and bool(self._inputs(tree))

    def mutate(self, case: TestCase, rng: random.Random, probe: Probe | None = None) -> TestCase | None:
        tree = parse_case(case)
        if tree is None or not _stride_safe(tree):
            return None
        idxs = self._inputs(tree)
        if not idxs:
            return None
        i = rng.choice(idxs)
        rank = tree.facts[tree.params()[i]].rank or 0
        kinds = ["strided", "expanded"] + (["transposed"] if rank >= 2 else [])
        kinds += ["channels_last"] if rank == 4 and channels_last_ok(tree) else []
        kind = rng.choice(kinds)
        stmts, m = instantiate(tree, {"module": LAYOUT_HELPER})
        tree.add_module_level(stmts["module"])
        exprs = tree.input_exprs()
        assert exprs is not None
        ret = next(s for s in tree.make_inputs.body if isinstance(s, ast.Return))
        assert isinstance(ret.value, ast.Tuple)
        ret.value.elts[i] = ast.Call(func=ast.Name(id=m["_with_layout"], ctx=ast.Load()),
                                     args=[exprs[i], ast.Constant(kind)], keywords=[])
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
        kinds = [k for k in sorted(self.VARIANTS) if k != "channels_last" or channels_last_ok(tree)]
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
DYNAMIC_SIZES = (1, 0, 33, 2)


@register_mutator
class DynamicExtraInput(AnchorRule):
    """A new input whose length changes between calls (5, 1, 0, 33, ...), read through a size-dependent branch."""

    name = "j1_dynamic_input"
    category = "J1"
    needs = ("a float tensor in forward", "make_inputs returns a tuple literal", "forward without *args/defaults")

    def extra_ok(self, tree):
        a = tree.forward.args
        exprs = tree.input_exprs()
        return (exprs is not None and len(exprs) == len(tree.params()) and not a.vararg and not a.kwonlyargs
                and not a.defaults and not a.kwarg)

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
        dyn = m["_dyn"]
        index = len(tree.params())
        tree.forward.args.args.append(ast.arg(arg=dyn))
        ret = next(s for s in tree.make_inputs.body if isinstance(s, ast.Return))
        assert isinstance(ret.value, ast.Tuple)
        ret.value.elts.append(expr("torch.randn([5], dtype=torch.float32)"))
        tree.insert_after(anchor, guard(stmts["forward"], self.guard_for(anchor), X=anchor.name))
        sizes = list(DYNAMIC_SIZES)
        rng.shuffle(sizes)
        steps = tuple(CallStep(inputs=(InputChange(index=index, shape=(n,)),)) for n in sizes[:rng.randint(2, 4)])
        dynamic = dict(case.meta.get("dynamic_inputs") or {})
        dynamic[str(index)] = [0]
        tree.notes["dynamic_inputs"] = dynamic
        return ensure_calls(case, 1) + steps


@register_mutator
class SizeBranch(AnchorRule):
    """Size-dependent control flow: branches on a dim against 0, 1 and larger sizes."""

    name = "j1_size_branch"
    category = "J1"
    min_rank = 1
    needs = ("a float tensor of rank >= 1 in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {"forward": """
_n = X.shape[0]
if _n == 0:
    X = X + 1.0
elif _n == 1:
    X = X * 2.0
elif _n % 2 == 0:
    X = X * 0.5 + X.flip(0)
else:
    X = X - X[_n // 2:_n // 2 + 1]
"""})
        return None


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
    """Empty slices joined back (cat with a 0-row slice) and reductions of empty tensors."""

    name = "k1_empty_tensors"
    category = "K1"
    float_ = False
    min_rank = 1
    needs = ("a tensor of rank >= 1 in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {"forward": """
_empty = X[:0]
_zero = _empty.sum()
X = torch.cat([X, _empty], dim=0) + _zero.to(X.dtype)
"""})
        return None


@register_mutator
class SeededRandomness(AnchorRule):
    """Dropout / rand_like in forward: random ops the oracle seeds per call (fallback_random for compilers)."""

    name = "k1_random_ops"
    category = "K1"
    needs = ("a float tensor in forward",)

    VARIANTS = {
        "dropout": "X = torch.nn.functional.dropout(X, p=0.25, training=self.training)\n",
        "rand_like": "X = X + torch.rand_like(X) * 0.01\n",
    }

    def rewrite(self, tree, anchor, rng, case):
        kind = rng.choice(sorted(self.VARIANTS))
        self.splice(tree, anchor, {"forward": self.VARIANTS[kind]})
        return None
