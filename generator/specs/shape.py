"""Shape and layout operators: reshape and views, permutations, squeezes, expansion, slicing,
padding, concatenation and splitting, indexing with index tensors, rolls, flips, triangles.

These ops move data without computing on it, so a compiler that gets them wrong gets strides,
offsets or index arithmetic wrong: layout bugs. Dim arguments are categorical (chosen here,
from the input rank, in positive or negative spelling); sizes, offsets and amounts are solver
integers. Ops whose output count or rank depends on sizes (split, chunk, unbind, squeeze) fix
the count or rank first and ask the solver for sizes that give it.

Backward insertion: `deduct_inputs` proposes input ranks, and when the engine passes
`out_sig=` to the constructor the spec picks the attributes that produce exactly that output
rank (without it the choice is random and the engine must check the rank).
"""

from __future__ import annotations

import math
import random
from typing import Any, Sequence

import z3

from nnforge.core.dtypes import ALL_DTYPES, FLOAT_DTYPES
from nnforge.generator.abstract import AbsTensor, Dim
from nnforge.generator.spec import (
    MAX_RANK,
    OpSpec,
    Sig,
    product_combos,
    register_op,
    same_dtype_combos,
)

# -- helpers shared by the shape and reduction families -------------------------------------


def spell_dim(rng: random.Random, axis: int, rank: int) -> int:
    """`axis` (0 <= axis < max(rank, 1)) spelt as PyTorch accepts it: positive or negative."""
    n = max(rank, 1)
    return axis - n if rng.random() < 0.5 else axis


def choose_dim(rng: random.Random, rank: int) -> int:
    """One dim argument valid for a tensor of `rank` (rank 0 accepts 0 and -1)."""
    return spell_dim(rng, rng.randrange(max(rank, 1)), rank)


def choose_dims(rng: random.Random, rank: int, k: int) -> tuple[int, ...]:
    """`k` distinct dims (distinct after wrapping, as PyTorch requires), in random spelling."""
    axes = rng.sample(range(max(rank, 1)), k)
    return tuple(spell_dim(rng, ax, rank) for ax in axes)


def wrap(dim: int, rank: int) -> int:
    """A dim argument as an axis index; rank-0 tensors take 0 and -1 and have no axes."""
    n = max(rank, 1)
    return dim + n if dim < 0 else dim


def prod(dims: Sequence[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = out * d
    return out


def fmt_tuple(items: Sequence[Any]) -> str:
    """A Python tuple literal, with the trailing comma a one-element tuple needs."""
    if len(items) == 1:
        return f"({items[0]!r},)"
    return "(" + ", ".join(repr(x) for x in items) + ")"


def z3max(a: Dim, b: Dim) -> Dim:
    return z3.If(a >= b, a, b)


def z3min(a: Dim, b: Dim) -> Dim:
    return z3.If(a <= b, a, b)


def floor_div(a: Dim, b: Dim) -> Dim:
    """a // b for a >= 0, b >= 1, whether the operands are Python ints or z3 Ints (where
    `/` is floor division, but on two Python ints it would be true division)."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return a / b


def ceil_div(a: Dim, b: Dim) -> Dim:
    """ceil(a / b) for a >= 0, b >= 1."""
    return floor_div(a + b - 1, b)


class TargetedSpec(OpSpec):
    """A spec that can be asked, at construction, for a given output (dtype, rank).

    `out_sig` is optional (the generic engine constructs specs with three arguments); when
    given, `self.out_rank` tells `build` which rank to produce.
    """

    def __init__(self, in_sigs: Sequence[Sig], rng: random.Random, uid: str, out_sig: Sig | None = None) -> None:
        super().__init__(in_sigs, rng, uid)
        self.out_rank: int | None = out_sig[1] if out_sig is not None else None
        self.build()

    def build(self) -> None:
        """Choose the attributes; `self.in_sigs`, `self.rng` and `self.out_rank` are set."""

    @property
    def rank(self) -> int:
        return self.in_sigs[0][1]

    def int_attrs(self, prefix: str, n: int) -> list[z3.ArithRef]:
        return [self.int_attr(f"{prefix}{i}") for i in range(n)]

    @staticmethod
    def values(a: dict[str, Any], prefix: str, n: int) -> list[int]:
        return [a[f"{prefix}{i}"] for i in range(n)]


class ShapeSpec(TargetedSpec):
    family = "shape"


def _ranks(lo: int, hi: int = MAX_RANK) -> tuple[tuple[int, ...]]:
    return (tuple(range(lo, hi + 1)),)


# -- reshape and views ----------------------------------------------------------------------


# Reshape targets come in two kinds. `free`: every target size is a solver integer and the
# only relation is prod(target) == numel; this reaches every target (e.g. (2, 3) -> (3, 2)) but
# is a non-linear equation z3 finds hard once the two ranks add up past ~6, so it is used only
# below that. `regroup`: the target is built from the input dims by merging runs of dims,
# splitting a dim into two factors, inserting 1s and dropping size-1 dims; each relation is
# small (one product or one equality), so any ranks solve fast.

FREE_RANK_BUDGET = 6


def plan_regroup(rng: random.Random, rank: int, want: int | None) -> tuple[list[tuple], list[int]] | None:
    """Target entries built from the input dims (("one",), ("merge", axes), ("split", axis,
    half)) and the size-1 input dims dropped; None if no plan of `want` entries was found."""
    for _ in range(40):
        plan: list[tuple] = []
        drops: list[int] = []
        i = 0
        while i < rank:
            c = rng.random()
            if c < 0.12:
                plan.append(("one",))
                continue
            if c < 0.4 and i + 1 < rank:
                k = rng.randint(2, min(3, rank - i))
                plan.append(("merge", tuple(range(i, i + k))))
                i += k
            elif c < 0.65:
                plan += [("split", i, 0), ("split", i, 1)]
                i += 1
            elif c < 0.75:
                drops.append(i)
                i += 1
            else:
                plan.append(("merge", (i,)))
                i += 1
        if want is not None:
            while len(plan) < want:
                plan.insert(rng.randint(0, len(plan)), ("one",))
        if len(plan) <= MAX_RANK and (want is None or len(plan) == want):
            return plan, drops
    return None


class ReshapeTarget(ShapeSpec):
    """A target shape for the whole tensor: `size{i}` solver attributes, one maybe spelt -1."""

    def build_target(self) -> None:
        r, want = self.rank, self.out_rank
        planned = None
        if want is None:
            if self.rng.random() < 0.5:
                planned = plan_regroup(self.rng, r, None)
            t = self.rng.randint(0, min(MAX_RANK, max(FREE_RANK_BUDGET - r, 1)))
        else:
            if r + want > FREE_RANK_BUDGET:
                planned = plan_regroup(self.rng, r, want)
            t = want
        self.plan, self.drops = planned if planned is not None else (None, [])
        self.attrs["target_kind"] = "free" if self.plan is None else "regroup"
        n = t if self.plan is None else len(self.plan)
        self.sizes = self.int_attrs("size", n)
        self.attrs["infer_at"] = self.rng.choice([None] + list(range(n))) if n else None

    def target_requires(self, inputs: list[AbsTensor]) -> list[z3.BoolRef]:
        cons = [s >= 0 for s in self.sizes]
        x = inputs[0].shape
        if self.plan is None:
            cons.append(prod(self.sizes) == inputs[0].numel())
        else:
            for k, step in enumerate(self.plan):
                if step[0] == "one":
                    cons.append(self.sizes[k] == 1)
                elif step[0] == "merge":
                    cons.append(self.sizes[k] == prod([x[ax] for ax in step[1]]))
                elif step[0] == "split" and step[2] == 0:  # (a "one" may sit between the halves)
                    other = self.plan.index(("split", step[1], 1))
                    cons.append(self.sizes[k] * self.sizes[other] == x[step[1]])
            cons += [x[ax] == 1 for ax in self.drops]
        k = self.attrs["infer_at"]
        if k is not None:  # -1 cannot be inferred when the other entries multiply to 0
            cons += [s >= 1 for i, s in enumerate(self.sizes) if i != k]
        return cons

    @staticmethod
    def target_values(a: dict[str, Any]) -> list[int]:
        vals = [a[f"size{i}"] for i in range(len([k for k in a if k.startswith("size")]))]
        if a["infer_at"] is not None:
            vals[a["infer_at"]] = -1
        return vals


@register_op
class Reshape(ReshapeTarget):
    """reshape to any rank 0..5; one target entry may be -1 (inferred by PyTorch)."""

    name = "reshape"

    def build(self) -> None:
        self.build_target()
        self.choice_attr("style", ("torch", "method"))

    def requires(self, inputs):
        return self.target_requires(inputs)

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(self.sizes))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], rng.randint(0, MAX_RANK))]

    def materialize(self, ins, a, in_shapes):
        shape = fmt_tuple(self.target_values(a))
        if a["style"] == "torch":
            return f"torch.reshape({ins[0]}, {shape})"
        return f"{ins[0]}.reshape({shape})"


@register_op
class View(ReshapeTarget):
    """Tensor.view. The generator does not track strides, and `view` fails on inputs whose
    strides cannot express the new shape. Two modes keep every instance valid:
    `split` splits one dim into two (expressible for any strides, including expanded and
    sliced inputs), `contiguous` views a `.contiguous()` copy to any shape (the full reshape
    space, at the cost of a copy the compiler may or may not elide)."""

    name = "view"

    def build(self) -> None:
        r = self.rank
        modes = ["contiguous"]
        if 1 <= r < MAX_RANK and (self.out_rank is None or self.out_rank == r + 1):
            modes.append("split")
        mode = self.choice_attr("mode", modes)
        if mode == "split":
            self.attrs["dim"] = choose_dim(self.rng, r)
            self.sizes = self.int_attrs("size", 2)
            self.attrs["infer_at"] = self.rng.choice([None, 0, 1])
        else:
            self.build_target()

    def requires(self, inputs):
        if self.attrs["mode"] != "split":
            return self.target_requires(inputs)
        cons = [s >= 0 for s in self.sizes]
        k = self.attrs["infer_at"]
        if k is not None:
            cons.append(self.sizes[1 - k] >= 1)
        ax = wrap(self.attrs["dim"], self.rank)
        cons.append(prod(self.sizes) == inputs[0].shape[ax])
        if k is not None:  # -1 is inferred from the whole tensor: every other dim counts
            cons += [d >= 1 for i, d in enumerate(inputs[0].shape) if i != ax]
        return cons

    def type_transfer(self, inputs):
        shape = list(inputs[0].shape)
        if self.attrs["mode"] == "split":
            ax = wrap(self.attrs["dim"], self.rank)
            return [AbsTensor(inputs[0].dtype, shape[:ax] + list(self.sizes) + shape[ax + 1 :])]
        return [AbsTensor(inputs[0].dtype, list(self.sizes))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], rng.randint(0, MAX_RANK))]

    def materialize(self, ins, a, in_shapes):
        n = 2 if a["mode"] == "split" else len([k for k in a if k.startswith("size")])
        sizes = self.values(a, "size", n)
        if a["infer_at"] is not None:
            sizes[a["infer_at"]] = -1
        if a["mode"] == "split":
            shape = list(in_shapes[0])
            ax = wrap(a["dim"], len(shape))
            return f"{ins[0]}.view({fmt_tuple(shape[:ax] + sizes + shape[ax + 1:])})"
        return f"{ins[0]}.contiguous().view({fmt_tuple(sizes)})"


@register_op
class Flatten(ShapeSpec):
    name = "flatten"

    def build(self) -> None:
        r = self.rank
        n = max(r, 1)
        if self.out_rank is not None and r >= 1:
            span = r - self.out_rank  # merged dims minus one
            lo = self.rng.randint(0, n - 1 - span)
            hi = lo + span
        else:
            lo, hi = sorted(self.rng.randrange(n) for _ in range(2))
        self.attrs["start_dim"] = spell_dim(self.rng, lo, r)
        self.attrs["end_dim"] = spell_dim(self.rng, hi, r)
        self.attrs["form"] = self.rng.choice(("args", "default")) if (lo, hi) == (0, n - 1) else "args"

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        if not s:
            return [AbsTensor(inputs[0].dtype, [1])]
        lo, hi = wrap(self.attrs["start_dim"], self.rank), wrap(self.attrs["end_dim"], self.rank)
        return [AbsTensor(inputs[0].dtype, s[:lo] + [prod(s[lo : hi + 1])] + s[hi + 1 :])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[1] == 0:
            return None
        return [(out[0], rng.randint(out[1], MAX_RANK))] if out[1] > 1 else [(out[0], rng.randint(0, MAX_RANK))]

    def materialize(self, ins, a, in_shapes):
        if a["form"] == "default":
            return f"torch.flatten({ins[0]})"
        return f"torch.flatten({ins[0]}, {a['start_dim']}, {a['end_dim']})"

    def exports_onnx(self, a, in_sigs):
        # start_dim == end_dim (a no-op flatten) on a zero-size input of rank >= 3 kills the
        # TorchScript exporter with SIGFPE; sizes are unknown here, so the form is excluded
        r = in_sigs[0][1]
        return r == 0 or a["form"] == "default" or wrap(a["start_dim"], r) != wrap(a["end_dim"], r)


@register_op
class Unflatten(ShapeSpec):
    """unflatten one dim into 1..3 sizes, one of which may be -1."""

    name = "unflatten"
    in_ranks = _ranks(1)

    def build(self) -> None:
        r = self.rank
        room = MAX_RANK - r + 1  # unflattening into k sizes adds k - 1 dims
        k = self.out_rank - r + 1 if self.out_rank is not None else self.rng.randint(1, min(3, room))
        k = max(min(k, room), 1)
        self.attrs["dim"] = choose_dim(self.rng, r)
        self.sizes = self.int_attrs("size", k)
        self.attrs["infer_at"] = self.rng.choice([None] + list(range(k)))

    def requires(self, inputs):
        cons = [s >= 0 for s in self.sizes]
        cons.append(prod(self.sizes) == inputs[0].shape[wrap(self.attrs["dim"], self.rank)])
        k = self.attrs["infer_at"]
        if k is not None:
            cons += [s >= 1 for i, s in enumerate(self.sizes) if i != k]
        return cons

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        ax = wrap(self.attrs["dim"], self.rank)
        return [AbsTensor(inputs[0].dtype, s[:ax] + list(self.sizes) + s[ax + 1 :])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[1] < 1:
            return None
        return [(out[0], rng.randint(max(1, out[1] - 2), out[1]))]

    def materialize(self, ins, a, in_shapes):
        sizes = self.values(a, "size", len([k for k in a if k.startswith("size")]))
        if a["infer_at"] is not None:
            sizes[a["infer_at"]] = -1
        return f"torch.unflatten({ins[0]}, {a['dim']}, {fmt_tuple(sizes)})"


# -- permutations ---------------------------------------------------------------------------


@register_op
class Permute(ShapeSpec):
    name = "permute"

    def build(self) -> None:
        r = self.rank
        perm = list(range(r))
        self.rng.shuffle(perm)
        self.attrs["dims"] = tuple(spell_dim(self.rng, p, r) for p in perm)

    def type_transfer(self, inputs):
        s = inputs[0].shape
        return [AbsTensor(inputs[0].dtype, [s[wrap(d, self.rank)] for d in self.attrs["dims"]])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out]

    def materialize(self, ins, a, in_shapes):
        return f"{ins[0]}.permute({fmt_tuple(a['dims'])})"


@register_op
class Transpose(ShapeSpec):
    """transpose / swapaxes / .mT (the same dim may be given twice: a no-op)."""

    name = "transpose"

    def build(self) -> None:
        r = self.rank
        self.attrs["dim0"] = choose_dim(self.rng, r)
        self.attrs["dim1"] = choose_dim(self.rng, r)
        forms = ["transpose", "swapaxes"]
        if r >= 2 and {wrap(self.attrs["dim0"], r), wrap(self.attrs["dim1"], r)} == {r - 2, r - 1}:
            forms.append("mT")
        self.choice_attr("form", forms)

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        if s:
            i, j = wrap(self.attrs["dim0"], self.rank), wrap(self.attrs["dim1"], self.rank)
            s[i], s[j] = s[j], s[i]
        return [AbsTensor(inputs[0].dtype, s)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out]

    def materialize(self, ins, a, in_shapes):
        if a["form"] == "mT":
            return f"{ins[0]}.mT"
        return f"torch.{a['form']}({ins[0]}, {a['dim0']}, {a['dim1']})"

    def exports_onnx(self, a, in_sigs):
        return a["form"] != "mT"  # aten::mT has no ONNX symbolic


@register_op
class T(ShapeSpec):
    name = "t"
    in_ranks = (tuple(range(0, 3)),)

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(reversed(inputs[0].shape)))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if out[1] <= 2 else None

    def materialize(self, ins, a, in_shapes):
        return f"torch.t({ins[0]})"


@register_op
class Movedim(ShapeSpec):
    name = "movedim"

    def build(self) -> None:
        r = self.rank
        k = self.rng.randint(1, max(r, 1))
        self.attrs["source"] = choose_dims(self.rng, r, k)
        self.attrs["destination"] = choose_dims(self.rng, r, k)
        self.attrs["as_int"] = k == 1 and self.rng.random() < 0.5

    def type_transfer(self, inputs):
        r = self.rank
        s = list(inputs[0].shape)
        if r == 0:
            return [AbsTensor(inputs[0].dtype, s)]
        src = [wrap(d, r) for d in self.attrs["source"]]
        dst = [wrap(d, r) for d in self.attrs["destination"]]
        order: list[int | None] = [None] * r
        for sd, dd in zip(src, dst):
            order[dd] = sd
        rest = iter(i for i in range(r) if i not in src)
        order = [o if o is not None else next(rest) for o in order]
        return [AbsTensor(inputs[0].dtype, [s[o] for o in order])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out]

    def materialize(self, ins, a, in_shapes):
        if a["as_int"]:
            return f"torch.movedim({ins[0]}, {a['source'][0]}, {a['destination'][0]})"
        return f"torch.movedim({ins[0]}, {fmt_tuple(a['source'])}, {fmt_tuple(a['destination'])})"

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][1] > 0  # the exporter's movedim fails on rank-0 tensors


# -- squeeze / unsqueeze / expand -----------------------------------------------------------


@register_op
class Squeeze(ShapeSpec):
    """squeeze with no dim, one dim or a tuple of dims. Which dims have size 1 is decided
    here (and required of the solver), so the output rank is fixed; squeezing a dim whose
    size is not 1 is a legal no-op and is exercised too."""

    name = "squeeze"

    def build(self) -> None:
        r = self.rank
        form = self.choice_attr("form", ("none", "int", "tuple"))
        if r == 0:
            self.attrs["dims"] = (choose_dim(self.rng, 0),) if form != "none" else None
            self.attrs["ones"] = ()
            return
        if form == "none":
            targets = list(range(r))
            self.attrs["dims"] = None
        elif form == "int":
            d = choose_dim(self.rng, r)
            targets = [wrap(d, r)]
            self.attrs["dims"] = (d,)
        else:
            dims = choose_dims(self.rng, r, self.rng.randint(1, r))
            targets = [wrap(d, r) for d in dims]
            self.attrs["dims"] = dims
        n_drop = None
        if self.out_rank is not None:
            n_drop = r - self.out_rank
        if n_drop is not None and 0 <= n_drop <= len(targets):
            ones = self.rng.sample(targets, n_drop)
        else:
            ones = [t for t in targets if self.rng.random() < 0.5]
        self.attrs["ones"] = tuple(sorted(ones))
        self.attrs["targets"] = tuple(sorted(targets))

    def requires(self, inputs):
        if self.rank == 0:
            return []
        s = inputs[0].shape
        ones = set(self.attrs["ones"])
        return [s[t] == 1 if t in ones else s[t] != 1 for t in self.attrs["targets"]]

    def type_transfer(self, inputs):
        ones = set(self.attrs["ones"])
        return [AbsTensor(inputs[0].dtype, [d for i, d in enumerate(inputs[0].shape) if i not in ones])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], rng.randint(out[1], MAX_RANK))]

    def materialize(self, ins, a, in_shapes):
        if a["form"] == "none":
            return f"torch.squeeze({ins[0]})"
        if a["form"] == "int":
            return f"torch.squeeze({ins[0]}, {a['dims'][0]})"
        return f"torch.squeeze({ins[0]}, {fmt_tuple(a['dims'])})"

    def exports_onnx(self, a, in_sigs):
        # a tuple of several dims makes the exporter's squeeze symbolic fail
        return a["form"] != "tuple" or len(a["dims"]) <= 1


@register_op
class Unsqueeze(ShapeSpec):
    name = "unsqueeze"
    in_ranks = _ranks(0, MAX_RANK - 1)

    def build(self) -> None:
        self.attrs["dim"] = choose_dim(self.rng, self.rank + 1)

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        ax = wrap(self.attrs["dim"], self.rank + 1)
        return [AbsTensor(inputs[0].dtype, s[:ax] + [1] + s[ax:])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], out[1] - 1)] if out[1] >= 1 else None

    def materialize(self, ins, a, in_shapes):
        return f"torch.unsqueeze({ins[0]}, {a['dim']})"


@register_op
class Expand(ShapeSpec):
    """expand to rank >= input rank: new leading dims (any size >= 0, never -1), and per
    existing dim one of -1 (keep), the same size spelt out, or a size-1 dim broadcast."""

    name = "expand"

    def build(self) -> None:
        r = self.rank
        t = self.out_rank if self.out_rank is not None and self.out_rank >= r else self.rng.randint(r, MAX_RANK)
        self.attrs["new"] = t - r
        self.lead = self.int_attrs("lead", t - r)
        kinds = tuple(self.rng.choice(("keep", "same", "broadcast")) for _ in range(r))
        self.attrs["kinds"] = kinds
        self.grow = {i: self.int_attr(f"grow{i}") for i, k in enumerate(kinds) if k == "broadcast"}
        self.choice_attr("style", ("expand", "broadcast_to"))

    def requires(self, inputs):
        cons = [v >= 0 for v in self.lead]
        for i, v in self.grow.items():
            cons += [inputs[0].shape[i] == 1, v >= 0]
        return cons

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        return [AbsTensor(inputs[0].dtype, list(self.lead) + [self.grow.get(i, d) for i, d in enumerate(s)])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], rng.randint(0, out[1]))]

    def materialize(self, ins, a, in_shapes):
        sizes = [a[f"lead{i}"] for i in range(a["new"])]
        for i, kind in enumerate(a["kinds"]):
            if kind == "keep":
                sizes.append(-1)
            elif kind == "same":
                sizes.append(in_shapes[0][i])
            else:
                sizes.append(a[f"grow{i}"])
        if a["style"] == "broadcast_to":
            sizes = [in_shapes[0][i - a["new"]] if s == -1 else s for i, s in enumerate(sizes)]
            return f"torch.broadcast_to({ins[0]}, {fmt_tuple(sizes)})"
        return f"{ins[0]}.expand({fmt_tuple(sizes)})"


@register_op
class ExpandAs(ShapeSpec):
    """x.expand_as(y): y's shape must be a broadcast target of x's (y's dtype is irrelevant)."""

    name = "expand_as"
    arity = 2
    in_dtypes = product_combos(ALL_DTYPES, ALL_DTYPES)

    @classmethod
    def accepts(cls, in_sigs):
        return super().accepts(in_sigs) and in_sigs[1][1] >= in_sigs[0][1]

    def requires(self, inputs):
        x, y = inputs[0].shape, inputs[1].shape
        off = len(y) - len(x)
        return [z3.Or(d == 1, d == y[off + i]) for i, d in enumerate(x)]

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[1].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], rng.randint(0, out[1])), (rng.choice(ALL_DTYPES), out[1])]

    def materialize(self, ins, a, in_shapes):
        return f"{ins[0]}.expand_as({ins[1]})"


@register_op
class Repeat(ShapeSpec):
    """Tensor.repeat: as many repeats as the output rank (>= input rank), each >= 0."""

    name = "repeat"

    def build(self) -> None:
        r = self.rank
        t = self.out_rank if self.out_rank is not None and self.out_rank >= r else self.rng.randint(r, MAX_RANK)
        self.reps = self.int_attrs("rep", t)

    def requires(self, inputs):
        return [v >= 0 for v in self.reps]

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        lead = len(self.reps) - len(s)
        return [AbsTensor(inputs[0].dtype, list(self.reps[:lead]) + [d * v for d, v in zip(s, self.reps[lead:])])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], rng.randint(0, out[1]))]

    def materialize(self, ins, a, in_shapes):
        reps = self.values(a, "rep", len([k for k in a if k.startswith("rep")]))
        if not reps:
            return f"{ins[0]}.repeat(())"
        return f"{ins[0]}.repeat({fmt_tuple(reps)})"


@register_op
class Tile(ShapeSpec):
    """torch.tile: fewer reps than dims are padded with 1 in front, more add leading dims."""

    name = "tile"

    def build(self) -> None:
        r = self.rank
        if self.out_rank is not None:
            n = self.out_rank if self.out_rank > r else self.rng.randint(0, r)
        else:
            n = self.rng.randint(0, MAX_RANK)
        self.reps = self.int_attrs("rep", n)

    def requires(self, inputs):
        return [v >= 0 for v in self.reps]

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        reps = list(self.reps)
        t = max(len(s), len(reps))
        s = [1] * (t - len(s)) + s
        reps = [1] * (t - len(reps)) + reps
        return [AbsTensor(inputs[0].dtype, [d * v if not (isinstance(v, int) and v == 1) else d for d, v in zip(s, reps)])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], rng.randint(0, out[1]))]

    def materialize(self, ins, a, in_shapes):
        reps = self.values(a, "rep", len([k for k in a if k.startswith("rep")]))
        return f"torch.tile({ins[0]}, {fmt_tuple(reps) if reps else '()'})"


# -- slicing --------------------------------------------------------------------------------


def _slice_len(n: Dim, start: Dim | None, end: Dim | None, step: Dim) -> Dim:
    """len(range(n)[start:end:step]) for step >= 1, with Python's clamping of start/end."""

    def clamp(v: Dim, default: Dim) -> Dim:
        if v is None:
            return default
        return z3.If(v < 0, z3max(v + n, 0), z3min(v, n))

    s = clamp(start, 0)
    e = clamp(end, n)
    return z3.If(e > s, ceil_div(e - s, step), 0)


@register_op
class Slice(ShapeSpec):
    """Basic indexing x[a:b:c, ...] on one or several dims: negative starts and ends, ends
    past the size (clamped), omitted bounds, steps >= 1 (PyTorch has no negative steps)."""

    name = "slice"
    in_ranks = _ranks(1)

    def build(self) -> None:
        r = self.rank
        axes = sorted(self.rng.sample(range(r), self.rng.randint(1, r)))
        self.attrs["axes"] = tuple(axes)
        self.bounds: dict[int, tuple[Any, Any, Any]] = {}
        for ax in axes:
            start = self.int_attr(f"start{ax}") if self.rng.random() < 0.75 else None
            end = self.int_attr(f"end{ax}") if self.rng.random() < 0.75 else None
            step = self.int_attr(f"step{ax}") if self.rng.random() < 0.6 else None
            self.bounds[ax] = (start, end, step)
        self.choice_attr("style", ("index", "ellipsis") if axes[-1] == r - 1 and axes[0] > 0 else ("index",))

    def requires(self, inputs):
        return [st >= 1 for (_, _, st) in self.bounds.values() if st is not None]

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        for ax, (start, end, step) in self.bounds.items():
            s[ax] = _slice_len(s[ax], start, end, step if step is not None else 1)
        return [AbsTensor(inputs[0].dtype, s)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if out[1] >= 1 else None

    def materialize(self, ins, a, in_shapes):
        r = len(in_shapes[0])
        parts = []
        for ax in range(r):
            if ax not in a["axes"]:
                parts.append(":")
                continue
            start, end, step = (a.get(f"{k}{ax}") for k in ("start", "end", "step"))
            txt = f"{'' if start is None else start}:{'' if end is None else end}"
            if step is not None:
                txt += f":{step}"
            parts.append(txt)
        if a["style"] == "ellipsis":
            first = a["axes"][0]
            parts = ["..."] + parts[first:]
        while len(parts) > 1 and parts[-1] == ":":
            parts.pop()
        return f"{ins[0]}[{', '.join(parts)}]"


@register_op
class Narrow(ShapeSpec):
    """narrow(dim, start, length): start in [-n, n] (negative wraps), start + length <= n."""

    name = "narrow"
    in_ranks = _ranks(1)

    def build(self) -> None:
        self.attrs["dim"] = choose_dim(self.rng, self.rank)
        self.start = self.int_attr("start")
        self.length = self.int_attr("length")

    def requires(self, inputs):
        n = inputs[0].shape[wrap(self.attrs["dim"], self.rank)]
        s = z3.If(self.start < 0, self.start + n, self.start)
        return [self.start >= -n, self.start <= n, self.length >= 0, s + self.length <= n]

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        s[wrap(self.attrs["dim"], self.rank)] = self.length
        return [AbsTensor(inputs[0].dtype, s)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if out[1] >= 1 else None

    def materialize(self, ins, a, in_shapes):
        return f"torch.narrow({ins[0]}, {a['dim']}, {a['start']}, {a['length']})"


@register_op
class Select(ShapeSpec):
    """select(dim, i) / x[:, i] with i in [-n, n-1]."""

    name = "select"
    in_ranks = _ranks(1)

    def build(self) -> None:
        self.attrs["dim"] = choose_dim(self.rng, self.rank)
        self.index = self.int_attr("index")
        self.choice_attr("style", ("select", "index"))

    def requires(self, inputs):
        n = inputs[0].shape[wrap(self.attrs["dim"], self.rank)]
        return [n >= 1, self.index >= -n, self.index <= n - 1]

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        del s[wrap(self.attrs["dim"], self.rank)]
        return [AbsTensor(inputs[0].dtype, s)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], out[1] + 1)] if out[1] < MAX_RANK else None

    def materialize(self, ins, a, in_shapes):
        if a["style"] == "select":
            return f"torch.select({ins[0]}, {a['dim']}, {a['index']})"
        ax = wrap(a["dim"], len(in_shapes[0]))
        return f"{ins[0]}[{', '.join([':'] * ax + [str(a['index'])])}]"


# -- padding --------------------------------------------------------------------------------

_PAD_VALUES = {
    "float": (0.0, 1.5, -2.0, -0.0),  # finite only: an inf border is non-finite whatever the inputs
    "int": (0, 1, -1, 7),
    "uint8": (0, 1, 255),
    "bool": (0.0, 1.0),
}


@register_op
class Pad(ShapeSpec):
    """F.pad in every mode.

    constant: any number of trailing dims (up to the rank), negative amounts crop, any value
      the dtype can hold. reflect / replicate / circular: pad the last 1, 2 or 3 dims of an
      input with one or two more dims (batch and channel, or channel only); reflect needs
      amounts < dim size, circular <= dim size; amounts >= 0 there.
    """

    name = "pad"

    def build(self) -> None:
        r = self.rank
        dt = self.in_sigs[0][0]
        modes = ["constant"]
        if 2 <= r <= 5:
            modes += ["replicate", "circular"]
            if dt != "bool":
                modes.append("reflect")
            if dt == "bool":
                modes.remove("replicate")
        mode = self.choice_attr("mode", modes)
        if mode == "constant":
            k = self.rng.randint(0, r)
            key = "float" if dt in FLOAT_DTYPES else "uint8" if dt == "uint8" else "bool" if dt == "bool" else "int"
            self.choice_attr("value", _PAD_VALUES[key] + (None,))
        else:
            k = self.rng.choice([k for k in (1, 2, 3) if r - k in (1, 2)])
            self.attrs["value"] = None
        self.attrs["k"] = k
        self.amounts = self.int_attrs("pad", 2 * k)

    def padded_axes(self) -> list[int]:
        # F.pad's tuple is (last_lo, last_hi, second_last_lo, ...)
        return [self.rank - 1 - i for i in range(self.attrs["k"])]

    def requires(self, inputs):
        s = inputs[0].shape
        mode = self.attrs["mode"]
        if mode == "constant":
            # negative amounts crop first (a narrow of length n + neg_lo + neg_hi), so the
            # cropped size must be >= 0 before any positive padding is added
            cons = []
            for i, ax in enumerate(self.padded_axes()):
                lo, hi = self.amounts[2 * i], self.amounts[2 * i + 1]
                cons.append(s[ax] + z3.If(lo < 0, lo, 0) + z3.If(hi < 0, hi, 0) >= 0)
            return cons
        r = self.rank
        k = self.attrs["k"]
        cons = [d >= 1 for d in s[r - k - 1 :]]  # channel and spatial dims non-empty; batch may be 0
        for i, ax in enumerate(self.padded_axes()):
            for p in self.amounts[2 * i : 2 * i + 2]:
                cons.append(p >= 0)
                if mode == "reflect":
                    cons.append(p <= s[ax] - 1)
                elif mode == "circular":
                    cons.append(p <= s[ax])
        return cons

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        for i, ax in enumerate(self.padded_axes()):
            s[ax] = s[ax] + self.amounts[2 * i] + self.amounts[2 * i + 1]
        return [AbsTensor(inputs[0].dtype, s)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out]

    def materialize(self, ins, a, in_shapes):
        pads = fmt_tuple(self.values(a, "pad", 2 * a["k"])) if a["k"] else "()"
        if a["mode"] == "constant":
            if a["value"] is None:
                return f"F.pad({ins[0]}, {pads})"
            v = a["value"]
            vtxt = "float('inf')" if v == float("inf") else repr(v)
            return f"F.pad({ins[0]}, {pads}, mode='constant', value={vtxt})"
        return f"F.pad({ins[0]}, {pads}, mode={a['mode']!r})"

    def exports_onnx(self, a, in_sigs):
        # circular padding of two or more dims corrupts the heap in the TorchScript exporter
        # (free(): invalid pointer, torch 2.13) or raises "wrapping around more than once"
        return not (a["mode"] == "circular" and a["k"] >= 2)


# -- joining and splitting ------------------------------------------------------------------


@register_op
class Cat(ShapeSpec):
    """cat of 2-4 same-dtype tensors along a dim (negative allowed); sizes along the dim may
    differ and may be 0."""

    name = "cat"
    arity = 2
    in_dtypes = [c for n in (2, 3, 4) for c in same_dtype_combos(ALL_DTYPES, n)]
    in_ranks = _ranks(1)

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((2, 2, 3, 4))

    @classmethod
    def accepts(cls, in_sigs):
        return super().accepts(in_sigs) and len({s[1] for s in in_sigs}) == 1

    def build(self) -> None:
        self.attrs["dim"] = choose_dim(self.rng, self.rank)
        self.choice_attr("fn", ("cat", "concat", "concatenate"))

    def requires(self, inputs):
        ax = wrap(self.attrs["dim"], self.rank)
        first = inputs[0].shape
        return [t.shape[i] == first[i] for t in inputs[1:] for i in range(self.rank) if i != ax]

    def type_transfer(self, inputs):
        ax = wrap(self.attrs["dim"], self.rank)
        s = list(inputs[0].shape)
        s[ax] = sum((t.shape[ax] for t in inputs[1:]), s[ax])
        return [AbsTensor(inputs[0].dtype, s)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[1] < 1:
            return None
        return [out] * rng.choice((2, 2, 3, 4))

    def materialize(self, ins, a, in_shapes):
        return f"torch.{a['fn']}([{', '.join(ins)}], dim={a['dim']})"


@register_op
class Stack(ShapeSpec):
    name = "stack"
    arity = 2
    in_dtypes = [c for n in (2, 3, 4) for c in same_dtype_combos(ALL_DTYPES, n)]
    in_ranks = _ranks(0, MAX_RANK - 1)

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((2, 2, 3, 4))

    @classmethod
    def accepts(cls, in_sigs):
        return super().accepts(in_sigs) and len({s[1] for s in in_sigs}) == 1

    def build(self) -> None:
        self.attrs["dim"] = choose_dim(self.rng, self.rank + 1)

    def requires(self, inputs):
        first = inputs[0].shape
        return [t.shape[i] == first[i] for t in inputs[1:] for i in range(self.rank)]

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        ax = wrap(self.attrs["dim"], self.rank + 1)
        return [AbsTensor(inputs[0].dtype, s[:ax] + [len(inputs)] + s[ax:])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[1] < 1:
            return None
        return [(out[0], out[1] - 1)] * rng.choice((2, 2, 3, 4))

    def materialize(self, ins, a, in_shapes):
        return f"torch.stack([{', '.join(ins)}], dim={a['dim']})"


class MultiOutSpec(ShapeSpec):
    """Ops whose number of outputs is chosen here (1..4), with sizes solved to match."""

    in_ranks = _ranks(1)

    def build(self) -> None:
        self.attrs["dim"] = choose_dim(self.rng, self.rank)
        self.attrs["n_out"] = self.rng.choice((1, 2, 2, 3, 4))

    @property
    def axis(self) -> int:
        return wrap(self.attrs["dim"], self.rank)

    def piece_sizes(self, n: Dim) -> list[Dim]:
        raise NotImplementedError

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        outs = []
        for size in self.piece_sizes(s[self.axis]):
            t = list(s)
            t[self.axis] = size
            outs.append(AbsTensor(inputs[0].dtype, t))
        return outs

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if out[1] >= 1 else None

    @staticmethod
    def as_tuple(expr: str, n_out: int) -> str:
        """Several outputs stay a tuple; a single piece is unpacked to a tensor."""
        return f"{expr}[0]" if n_out == 1 else expr


@register_op
class Split(MultiOutSpec):
    """split with an int size (the last piece may be shorter) or an explicit list of sizes."""

    name = "split"

    def build(self) -> None:
        super().build()
        form = self.choice_attr("form", ("int", "list"))
        if form == "int":
            self.size = self.int_attr("split_size")
        else:
            self.sizes = self.int_attrs("size", self.attrs["n_out"])
        self.choice_attr("style", ("torch", "method"))

    def requires(self, inputs):
        n = inputs[0].shape[self.axis]
        k = self.attrs["n_out"]
        if self.attrs["form"] == "int":
            # exactly k pieces: (k-1)*size < n <= k*size, which needs n >= 1
            return [self.size >= 1, n >= 1, (k - 1) * self.size < n, n <= k * self.size]
        return [s >= 0 for s in self.sizes] + [sum(self.sizes[1:], self.sizes[0]) == n]

    def piece_sizes(self, n):
        k = self.attrs["n_out"]
        if self.attrs["form"] == "int":
            return [self.size] * (k - 1) + [n - (k - 1) * self.size]
        return list(self.sizes)

    def materialize(self, ins, a, in_shapes):
        if a["form"] == "int":
            arg = str(a["split_size"])
        else:
            arg = "[" + ", ".join(str(v) for v in self.values(a, "size", a["n_out"])) + "]"
        if a["style"] == "torch":
            return self.as_tuple(f"torch.split({ins[0]}, {arg}, dim={a['dim']})", a["n_out"])
        return self.as_tuple(f"{ins[0]}.split({arg}, {a['dim']})", a["n_out"])


@register_op
class Chunk(MultiOutSpec):
    """chunk(c): pieces of ceil(n/c); the number of pieces is ceil(n / ceil(n/c)), which can be
    fewer than c. The count is fixed here and the solver finds n and c that give it."""

    name = "chunk"

    def build(self) -> None:
        super().build()
        self.chunks = self.int_attr("chunks")

    def requires(self, inputs):
        n = inputs[0].shape[self.axis]
        k = self.attrs["n_out"]
        cs = ceil_div(n, self.chunks)
        return [self.chunks >= 1, n >= 1, ceil_div(n, cs) == k]

    def piece_sizes(self, n):
        k = self.attrs["n_out"]
        cs = ceil_div(n, self.chunks)
        return [cs] * (k - 1) + [n - (k - 1) * cs]

    def materialize(self, ins, a, in_shapes):
        return self.as_tuple(f"torch.chunk({ins[0]}, {a['chunks']}, dim={a['dim']})", a["n_out"])

    def exports_onnx(self, a, in_sigs):
        # Fewer pieces than chunks: the exporter still splits into `chunks` pieces of ceil(n/chunks),
        # so the last one is negative (n=3, chunks=5: [1, 1, 1, 1, -1]). onnx.reference slices that
        # without complaint and ORT refuses it, so the gate cannot see it and ORT would be blamed.
        return super().exports_onnx(a, in_sigs) and a["n_out"] == a["chunks"]


@register_op
class TensorSplit(MultiOutSpec):
    """tensor_split into exactly `sections` pieces (the first n % sections are one longer;
    pieces may be empty), or at explicit indices (clamped, possibly decreasing: empty pieces)."""

    name = "tensor_split"
    zero_size_ok = True

    def build(self) -> None:
        super().build()
        form = self.choice_attr("form", ("sections", "indices"))
        if form == "indices":
            self.cuts = self.int_attrs("index", self.attrs["n_out"] - 1)

    def requires(self, inputs):
        if self.attrs["form"] == "indices":
            n = inputs[0].shape[self.axis]
            # keep indices non-decreasing and within [-n, n] so the pieces have simple sizes
            cs = [z3.If(c < 0, c + n, c) for c in self.cuts]
            cons = [c >= -n for c in self.cuts] + [c <= n for c in self.cuts]
            cons += [a <= b for a, b in zip(cs, cs[1:])]
            return cons
        return []

    def piece_sizes(self, n):
        k = self.attrs["n_out"]
        if self.attrs["form"] == "sections":
            return [floor_div(n, k) + z3.If(n % k > i, 1, 0) for i in range(k)]
        cs = [0] + [z3.If(c < 0, c + n, c) for c in self.cuts] + [n]
        return [b - a for a, b in zip(cs, cs[1:])]

    def materialize(self, ins, a, in_shapes):
        if a["form"] == "sections":
            arg = str(a["n_out"])
        else:
            arg = "[" + ", ".join(str(v) for v in self.values(a, "index", a["n_out"] - 1)) + "]"
        return self.as_tuple(f"torch.tensor_split({ins[0]}, {arg}, dim={a['dim']})", a["n_out"])

    def exports_onnx(self, a, in_sigs):
        return not (a["form"] == "indices" and in_sigs[0][0] == "bfloat16")


@register_op
class Unbind(MultiOutSpec):
    """unbind: one output per index along dim, so the dim's size is the output count."""

    name = "unbind"

    def requires(self, inputs):
        return [inputs[0].shape[self.axis] == self.attrs["n_out"]]

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        del s[self.axis]
        return [AbsTensor(inputs[0].dtype, list(s)) for _ in range(self.attrs["n_out"])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], out[1] + 1)] if out[1] < MAX_RANK else None

    def materialize(self, ins, a, in_shapes):
        return self.as_tuple(f"torch.unbind({ins[0]}, {a['dim']})", a["n_out"])


# -- indexing with index tensors ------------------------------------------------------------
# The solver cannot constrain tensor values, so index tensors are folded into range inside the
# expression with `remainder(idx, size)` (Python-style: non-negative for a positive size).

INDEX_DTYPE = "int64"


def _folded(idx: str, x: str, dim: int, rank: int) -> str:
    size = f"{x}.size({dim})" if rank else f"{x}.numel()"
    return f"torch.remainder({idx}, {size})"


@register_op
class Gather(ShapeSpec):
    """gather(x, dim, idx): idx has x's rank, idx.size(k) <= x.size(k) for k != dim."""

    name = "gather"
    arity = 2
    in_dtypes = product_combos(ALL_DTYPES, (INDEX_DTYPE,))

    @classmethod
    def accepts(cls, in_sigs):
        return super().accepts(in_sigs) and in_sigs[0][1] == in_sigs[1][1]

    def build(self) -> None:
        self.attrs["dim"] = choose_dim(self.rng, self.rank)

    def requires(self, inputs):
        x, i = inputs[0].shape, inputs[1].shape
        ax = wrap(self.attrs["dim"], self.rank)
        cons = [i[k] <= x[k] for k in range(self.rank) if k != ax]
        if self.rank:
            cons.append(z3.Or(x[ax] >= 1, prod(i) == 0))
        return cons

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[1].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out, (INDEX_DTYPE, out[1])]

    def materialize(self, ins, a, in_shapes):
        d = a["dim"]
        x_size = in_shapes[0][wrap(d, len(in_shapes[0]))] if in_shapes[0] else 1
        idx = _folded(ins[1], ins[0], d, len(in_shapes[0])) if x_size else ins[1]
        return f"torch.gather({ins[0]}, {d}, {idx})"


@register_op
class IndexSelect(ShapeSpec):
    """index_select(x, dim, idx) with a 1-d index (or 0-d: the dim is kept with size 1)."""

    name = "index_select"
    arity = 2
    in_dtypes = product_combos(ALL_DTYPES, (INDEX_DTYPE,))
    in_ranks = (tuple(range(0, MAX_RANK + 1)), (0, 1))

    def build(self) -> None:
        self.attrs["dim"] = choose_dim(self.rng, self.rank)

    def requires(self, inputs):
        x, i = inputs[0].shape, inputs[1].shape
        cons = []
        if self.rank:
            cons.append(z3.Or(x[wrap(self.attrs["dim"], self.rank)] >= 1, prod(i) == 0))
        else:
            cons.append(prod(i) == 1)  # a scalar can be indexed by one index only
        return cons

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        if s:
            s[wrap(self.attrs["dim"], self.rank)] = inputs[1].shape[0] if inputs[1].shape else 1
        return [AbsTensor(inputs[0].dtype, s)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out, (INDEX_DTYPE, 1 if out[1] else rng.choice((0, 1)))]

    def materialize(self, ins, a, in_shapes):
        d = a["dim"]
        shape = in_shapes[0]
        x_size = shape[wrap(d, len(shape))] if shape else 1
        idx = _folded(ins[1], ins[0], d, len(shape)) if x_size else ins[1]
        return f"torch.index_select({ins[0]}, {d}, {idx})"


@register_op
class TakeAlongDim(ShapeSpec):
    """take_along_dim: with a dim, idx and x broadcast on the other dims; without, x is
    flattened and idx is 1-d."""

    name = "take_along_dim"
    onnx = False  # no ONNX symbolic
    arity = 2
    in_dtypes = product_combos(ALL_DTYPES, (INDEX_DTYPE,))
    in_ranks = (tuple(range(1, MAX_RANK + 1)), tuple(range(1, MAX_RANK + 1)))

    @classmethod
    def accepts(cls, in_sigs):
        if not super().accepts(in_sigs):
            return False
        return in_sigs[0][1] == in_sigs[1][1] or in_sigs[1][1] == 1

    def build(self) -> None:
        same = self.in_sigs[0][1] == self.in_sigs[1][1]
        forms = ["dim"] if same else []
        if self.in_sigs[1][1] == 1:
            forms.append("flat")
        form = self.choice_attr("form", forms)
        self.attrs["dim"] = choose_dim(self.rng, self.rank) if form == "dim" else None

    def requires(self, inputs):
        x, i = inputs[0].shape, inputs[1].shape
        if self.attrs["form"] == "flat":
            return [z3.Or(prod(x) >= 1, i[0] == 0)]
        ax = wrap(self.attrs["dim"], self.rank)
        cons = [z3.Or(x[k] == i[k], x[k] == 1, i[k] == 1) for k in range(self.rank) if k != ax]
        cons.append(z3.Or(x[ax] >= 1, prod(i) == 0))
        return cons

    def type_transfer(self, inputs):
        x, i = inputs[0].shape, inputs[1].shape
        if self.attrs["form"] == "flat":
            return [AbsTensor(inputs[0].dtype, [i[0]])]
        ax = wrap(self.attrs["dim"], self.rank)
        out = [i[k] if k == ax else z3.If(x[k] == 1, i[k], x[k]) for k in range(self.rank)]
        return [AbsTensor(inputs[0].dtype, out)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[1] < 1:
            return None
        return [out, (INDEX_DTYPE, out[1])]

    def materialize(self, ins, a, in_shapes):
        if a["form"] == "flat":
            n = math.prod(in_shapes[0])
            idx = f"torch.remainder({ins[1]}, {ins[0]}.numel())" if n else ins[1]
            # without a dim, eager views the input as 1-d and raises on a non-contiguous one
            return f"torch.take_along_dim({ins[0]}.contiguous(), {idx})"
        d = a["dim"]
        x_size = in_shapes[0][wrap(d, len(in_shapes[0]))]
        idx = _folded(ins[1], ins[0], d, len(in_shapes[0])) if x_size else ins[1]
        return f"torch.take_along_dim({ins[0]}, {idx}, dim={d})"


# -- data movement in place -----------------------------------------------------------------


@register_op
class Roll(ShapeSpec):
    """roll by shifts (negative, larger than the size) along dims (a dim may repeat), or
    along the flattened tensor when dims are omitted."""

    name = "roll"

    def build(self) -> None:
        r = self.rank
        form = self.choice_attr("form", ("flat", "dims") if r >= 1 else ("flat",))
        k = 1 if form == "flat" else self.rng.randint(1, min(r, 3) + 1)
        self.shifts = self.int_attrs("shift", k)
        self.attrs["dims"] = tuple(choose_dim(self.rng, r) for _ in range(k)) if form == "dims" else None
        self.attrs["scalar_args"] = form == "dims" and k == 1 and self.rng.random() < 0.5

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out]

    def materialize(self, ins, a, in_shapes):
        shifts = self.values(a, "shift", 1 if a["dims"] is None else len(a["dims"]))
        if a["dims"] is None:
            return f"torch.roll({ins[0]}, {shifts[0]})"
        if a["scalar_args"]:
            return f"torch.roll({ins[0]}, {shifts[0]}, {a['dims'][0]})"
        return f"torch.roll({ins[0]}, {fmt_tuple(shifts)}, {fmt_tuple(a['dims'])})"

    def exports_onnx(self, a, in_sigs):
        return a["dims"] is not None  # the roll symbolic needs dims


@register_op
class Flip(ShapeSpec):
    name = "flip"

    def build(self) -> None:
        r = self.rank
        self.attrs["dims"] = choose_dims(self.rng, r, self.rng.randint(0 if r else 1, max(r, 1)))

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out]

    def materialize(self, ins, a, in_shapes):
        return f"torch.flip({ins[0]}, {fmt_tuple(a['dims']) if a['dims'] else '()'})"

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][1] > 0  # flip of a rank-0 tensor trips an internal assert


@register_op
class Triangle(ShapeSpec):
    """tril / triu on the last two dims. The diagonal offset keeps some of the matrix (one past
    the far corner at most, which keeps all of it): a triangle beyond the matrix is all zeros,
    which makes a downstream log or division non-finite whatever the inputs."""

    name = "tril_triu"
    in_ranks = _ranks(2)

    def build(self) -> None:
        self.choice_attr("fn", ("tril", "triu"))
        self.int_attr("diagonal")

    def requires(self, inputs):
        rows, cols = inputs[0].shape[-2], inputs[0].shape[-1]
        k = self.attrs["diagonal"]
        if self.attrs["fn"] == "triu":  # keeps j - i >= k
            keeps = z3.And(k <= cols - 1, k >= -rows)
        else:  # tril keeps j - i <= k
            keeps = z3.And(k >= -(rows - 1), k <= cols)
        return [z3.Or(rows == 0, cols == 0, keeps)]

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if out[1] >= 2 else None

    def materialize(self, ins, a, in_shapes):
        return f"torch.{a['fn']}({ins[0]}, diagonal={a['diagonal']})"


@register_op
class Diagonal(ShapeSpec):
    """diagonal(offset, dim1, dim2): the two dims are removed and the diagonal appended."""

    name = "diagonal"
    in_ranks = _ranks(2)

    def build(self) -> None:
        d1, d2 = choose_dims(self.rng, self.rank, 2)
        self.attrs["dim1"], self.attrs["dim2"] = d1, d2
        self.offset = self.int_attr("offset")

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        i, j = wrap(self.attrs["dim1"], self.rank), wrap(self.attrs["dim2"], self.rank)
        n1, n2, off = s[i], s[j], self.offset
        length = z3.If(off >= 0, z3min(n1, n2 - off), z3min(n1 + off, n2))
        rest = [d for k, d in enumerate(s) if k not in (i, j)]
        return [AbsTensor(inputs[0].dtype, rest + [z3max(length, 0)])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [(out[0], out[1] + 1)] if 1 <= out[1] < MAX_RANK else None

    def materialize(self, ins, a, in_shapes):
        return f"torch.diagonal({ins[0]}, {a['offset']}, {a['dim1']}, {a['dim2']})"


@register_op
class Contiguous(ShapeSpec):
    """contiguous / clone, including the channels-last memory formats for rank 4 and 5: a
    layout change with no shape change, where compilers mix up strides."""

    name = "contiguous"

    def build(self) -> None:
        fmts = ["contiguous_format", "preserve_format"]
        if self.rank == 4:
            fmts.append("channels_last")
        if self.rank == 5:
            fmts.append("channels_last_3d")
        self.choice_attr("fn", ("contiguous", "clone"))
        self.choice_attr("memory_format", fmts)
        if self.attrs["fn"] == "contiguous" and self.attrs["memory_format"] == "preserve_format":
            self.attrs["memory_format"] = "contiguous_format"  # contiguous() rejects preserve_format

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out]

    def materialize(self, ins, a, in_shapes):
        return f"{ins[0]}.{a['fn']}(memory_format=torch.{a['memory_format']})"

    def exports_onnx(self, a, in_sigs):
        return a["memory_format"] != "channels_last_3d"
