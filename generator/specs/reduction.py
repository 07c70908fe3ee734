"""Reductions, scans and sorts: sum/mean/prod, max/min and their arg and index forms, any/all,
std/var, logsumexp, norms, medians, k-th values, top-k, sorts, cumulative ops.

A reduction's dims are categorical (chosen here from the input rank: None, one dim or a tuple,
in positive or negative spelling, distinct after wrapping as PyTorch requires); `keepdim` and
the optional `dtype=` argument are flags. Reductions that have no identity (max, argmax,
median, ...) must not see an empty reduced dim: `requires` says so. Rank-0 inputs take dim 0
or -1 and reduce to rank 0.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import z3

from nnforge.core.dtypes import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES
from nnforge.generator.abstract import AbsTensor, Dim
from nnforge.generator.spec import MAX_RANK, Sig, register_op, same_dtype_combos
from nnforge.generator.specs.shape import TargetedSpec, choose_dim, choose_dims, fmt_tuple, wrap

INDEX = "int64"
NO_BOOL = [d for d in ALL_DTYPES if d != "bool"]


def accumulate_dtype(dtype: str) -> str:
    """sum/prod/cumsum without dtype=: floats keep their dtype, integers and bool give int64."""
    return dtype if dtype in FLOAT_DTYPES else "int64"


def wider_floats(dtype: str) -> tuple[str, ...]:
    """dtype= values that torch.linalg.vector_norm accepts for a `dtype` input (no narrowing)."""
    return {"float32": ("float32", "float64"), "float64": ("float64",)}.get(dtype, (dtype, "float32", "float64"))


class ReduceSpec(TargetedSpec):
    """Reduce over `dim` (None: every dim), optionally keeping reduced dims as size 1.

    Subclasses set `forms` (which of "none", "int", "tuple" the op takes), `keepdim_forms`
    (which of those accept keepdim), `nonempty` (no identity: reduced dims must be non-empty)
    and override `out_dtypes` and `call`.
    """

    family = "reduction"
    forms: ClassVar[tuple[str, ...]] = ("none", "int", "tuple")
    keepdim_forms: ClassVar[tuple[str, ...]] = ("int", "tuple")
    nonempty: ClassVar[bool] = False
    fn: ClassVar[str] = ""

    def build(self) -> None:
        r = self.rank
        plans = []  # (form, number of dims, keepdim)
        for form in self.forms:
            ks = {"none": [r], "int": [1], "tuple": list(range(1, max(r, 1) + 1))}[form]
            for k in ks:
                for keep in ((False, True) if form in self.keepdim_forms else (False,)):
                    out = r if keep else r - min(k, r)
                    if self.out_rank is None or out == self.out_rank:
                        plans.append((form, k, keep))
        if not plans:  # asked for an impossible rank: any instance (the engine rejects it)
            plans = [(f, 1, False) for f in self.forms]
        form, k, keep = self.rng.choice(plans)
        self.attrs["form"] = form
        if form == "none":
            self.attrs["dim"] = None
        elif form == "int":
            self.attrs["dim"] = choose_dim(self.rng, r)
        else:
            self.attrs["dim"] = choose_dims(self.rng, r, k)
        self.attrs["keepdim"] = keep
        self.build_extra()

    def build_extra(self) -> None:
        """Op-specific attributes (dtype=, correction, ord, ...)."""

    # -- shapes ---------------------------------------------------------------------------
    def reduced_axes(self) -> set[int]:
        r = self.rank
        dim = self.attrs["dim"]
        if r == 0:
            return set()
        if dim is None:
            return set(range(r))
        dims = (dim,) if isinstance(dim, int) else dim
        return {wrap(d, r) for d in dims}

    def out_shape(self, shape: Sequence[Dim]) -> list[Dim]:
        axes = self.reduced_axes()
        if self.attrs["keepdim"]:
            return [1 if i in axes else d for i, d in enumerate(shape)]
        return [d for i, d in enumerate(shape) if i not in axes]

    def requires(self, inputs):
        if not self.nonempty:
            return []
        s = inputs[0].shape
        return [s[i] >= 1 for i in sorted(self.reduced_axes())]

    def out_dtypes(self, dtype: str) -> list[str]:
        return [dtype]

    def type_transfer(self, inputs):
        shape = self.out_shape(inputs[0].shape)
        return [AbsTensor(dt, list(shape)) for dt in self.out_dtypes(inputs[0].dtype)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        combos = [c for c in cls.dtype_combos(1)]
        if not combos:
            return None
        # reductions change dtype for some inputs (sum of int8 is int64): pick a combo whose
        # result can be the wanted dtype, trying the same dtype first
        same = [c for c in combos if c[0] == out[0]]
        c = same[0] if same else rng.choice(combos)
        return [(c[0], rng.randint(out[1], MAX_RANK))]

    # -- text -----------------------------------------------------------------------------
    @staticmethod
    def dim_args(a: dict[str, Any]) -> str:
        """`, dim=..., keepdim=...` as the op call needs it (nothing for a full reduction)."""
        dim = a["dim"]
        if dim is None:
            return ", dim=None, keepdim=True" if a["keepdim"] else ""
        txt = f", dim={dim}" if isinstance(dim, int) else f", dim={fmt_tuple(dim)}"
        return txt + (", keepdim=True" if a["keepdim"] else "")

    def extra_args(self, a: dict[str, Any]) -> str:
        return ""

    def materialize(self, ins, a, in_shapes):
        return f"{self.fn}({ins[0]}{self.dim_args(a)}{self.extra_args(a)})"


class DtypeArgReduce(ReduceSpec):
    """Reductions with an optional `dtype=` (the input is cast first)."""

    dtype_choices: ClassVar[tuple[str, ...]] = ALL_DTYPES

    def build_extra(self) -> None:
        use = self.rng.random() < 0.3
        self.attrs["dtype"] = self.rng.choice(self.dtype_choices) if use else None

    def out_dtypes(self, dtype):
        return [self.attrs["dtype"] or accumulate_dtype(dtype)]

    def extra_args(self, a):
        return f", dtype=torch.{a['dtype']}" if a["dtype"] else ""

    def exports_onnx(self, a, in_sigs):
        # the exporter cannot type the cast that dtype= inserts on a rank-0 input
        return self.onnx and not (a["dtype"] and in_sigs[0][1] == 0)


@register_op
class Sum(DtypeArgReduce):
    name = "sum"
    fn = "torch.sum"


@register_op
class Nansum(DtypeArgReduce):
    name = "nansum"
    onnx = False  # no TorchScript ONNX symbolic (opset 17)
    fn = "torch.nansum"
    in_dtypes = same_dtype_combos(NUMERIC_DTYPES, 1)
    dtype_choices = NUMERIC_DTYPES


@register_op
class Prod(DtypeArgReduce):
    """prod over everything or over one dim (PyTorch has no tuple form)."""

    name = "prod"
    fn = "torch.prod"
    forms = ("none", "int")
    keepdim_forms = ("int",)


@register_op
class Mean(ReduceSpec):
    """mean: float inputs, or any input with a float `dtype=`. The reduced dims are non-empty:
    an empty reduction is NaN whatever the values (the other dims may still be empty)."""

    name = "mean"
    fn = "torch.mean"
    vulnerable = True
    nonempty = True

    def build_extra(self) -> None:
        dt = self.in_sigs[0][0]
        need = dt not in FLOAT_DTYPES
        self.attrs["dtype"] = self.rng.choice(FLOAT_DTYPES) if need or self.rng.random() < 0.3 else None

    def out_dtypes(self, dtype):
        return [self.attrs["dtype"] or dtype]

    def extra_args(self, a):
        return f", dtype=torch.{a['dtype']}" if a["dtype"] else ""

    def exports_onnx(self, a, in_sigs):
        return not (a["dtype"] and in_sigs[0][1] == 0)  # as for sum: rank-0 input with dtype=


@register_op
class MaxMin(ReduceSpec):
    """max / min: over everything (one output) or over one dim ((values, indices))."""

    name = "max_min"
    forms = ("none", "int")
    keepdim_forms = ("int",)
    nonempty = True

    def build_extra(self) -> None:
        self.choice_attr("fn", ("max", "min"))

    def out_dtypes(self, dtype):
        return [dtype] if self.attrs["dim"] is None else [dtype, INDEX]

    def materialize(self, ins, a, in_shapes):
        if a["dim"] is None:
            return f"torch.{a['fn']}({ins[0]})"
        return f"torch.{a['fn']}({ins[0]}, {a['dim']}, {a['keepdim']})"


@register_op
class AmaxAmin(ReduceSpec):
    """amax / amin over one dim, several, or `()` (every dim)."""

    name = "amax_amin"
    forms = ("int", "tuple", "none")
    keepdim_forms = ("int", "tuple", "none")
    nonempty = True

    def build_extra(self) -> None:
        self.choice_attr("fn", ("amax", "amin"))

    def materialize(self, ins, a, in_shapes):
        dim = a["dim"]
        dims = "()" if dim is None else str(dim) if isinstance(dim, int) else fmt_tuple(dim)
        return f"torch.{a['fn']}({ins[0]}, {dims}, {a['keepdim']})"


@register_op
class Aminmax(ReduceSpec):
    name = "aminmax"
    forms = ("none", "int")
    keepdim_forms = ("none", "int")
    nonempty = True

    def out_dtypes(self, dtype):
        return [dtype, dtype]

    def materialize(self, ins, a, in_shapes):
        return f"torch.aminmax({ins[0]}, dim={a['dim']}, keepdim={a['keepdim']})"


@register_op
class ArgmaxArgmin(ReduceSpec):
    """argmax / argmin over the flattened tensor (dim=None; keepdim gives all-ones) or one dim."""

    name = "argmax_argmin"
    in_dtypes = same_dtype_combos(NO_BOOL, 1)
    forms = ("none", "int")
    keepdim_forms = ("none", "int")
    nonempty = True

    def build_extra(self) -> None:
        self.choice_attr("fn", ("argmax", "argmin"))

    def out_dtypes(self, dtype):
        return [INDEX]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] != INDEX:
            return None
        return [(rng.choice(NO_BOOL), rng.randint(out[1], MAX_RANK))]

    def materialize(self, ins, a, in_shapes):
        return f"torch.{a['fn']}({ins[0]}, {a['dim']}, {a['keepdim']})"


@register_op
class AnyAll(ReduceSpec):
    """any / all: bool result (uint8 for uint8 input); empty reductions give the identity."""

    name = "any_all"
    keepdim_forms = ("none", "int", "tuple")

    def build_extra(self) -> None:
        self.choice_attr("fn", ("any", "all"))

    def out_dtypes(self, dtype):
        return ["uint8" if dtype == "uint8" else "bool"]

    def exports_onnx(self, a, in_sigs):
        return not (a["dim"] is None and a["keepdim"])  # the exporter crashes on dim=None, keepdim=True

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in ("bool", "uint8"):
            return None
        dt = "uint8" if out[0] == "uint8" else rng.choice([d for d in ALL_DTYPES if d != "uint8"])
        return [(dt, rng.randint(out[1], MAX_RANK))]

    def materialize(self, ins, a, in_shapes):
        return f"torch.{a['fn']}({ins[0]}{self.dim_args(a)})"


@register_op
class CountNonzero(ReduceSpec):
    name = "count_nonzero"
    onnx = False  # no TorchScript ONNX symbolic (opset 17)
    keepdim_forms = ()

    def out_dtypes(self, dtype):
        return [INDEX]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] != INDEX:
            return None
        return [(rng.choice(ALL_DTYPES), rng.randint(out[1], MAX_RANK))]

    def materialize(self, ins, a, in_shapes):
        dim = a["dim"]
        if dim is None:
            return f"torch.count_nonzero({ins[0]})"
        return f"torch.count_nonzero({ins[0]}, {dim if isinstance(dim, int) else fmt_tuple(dim)})"


@register_op
class StdVar(ReduceSpec):
    """std / var / std_mean / var_mean with correction 0, 1, 2 or the default (1). A correction
    at least the reduced count gives inf/NaN whatever the values, so the reduced dims leave some
    degrees of freedom: all non-empty and one of them larger than the correction."""

    name = "std_var"
    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 1)
    keepdim_forms = ("none", "int", "tuple")
    vulnerable = True

    def build_extra(self) -> None:
        self.choice_attr("fn", ("std", "var", "std_mean", "var_mean"))
        self.choice_attr("correction", (None, 0, 1, 2))

    def requires(self, inputs):
        corr = 1 if self.attrs["correction"] is None else self.attrs["correction"]
        s = inputs[0].shape
        dims = [s[i] for i in sorted(self.reduced_axes())]
        if not dims:  # one element
            return [z3.BoolVal(corr < 1)]
        # the product of the dims would be nonlinear; one dim above the correction is enough
        return [d >= 1 for d in dims] + [z3.Or([d > corr for d in dims])]

    def out_dtypes(self, dtype):
        return [dtype, dtype] if self.attrs["fn"].endswith("_mean") else [dtype]

    def materialize(self, ins, a, in_shapes):
        corr = "" if a["correction"] is None else f", correction={a['correction']}"
        dim = a["dim"]
        dims = "None" if dim is None else str(dim) if isinstance(dim, int) else fmt_tuple(dim)
        return f"torch.{a['fn']}({ins[0]}, dim={dims}{corr}, keepdim={a['keepdim']})"


@register_op
class Logsumexp(ReduceSpec):
    """logsumexp over one dim or several; integer and bool inputs give float32. An empty
    reduction is -inf whatever the values (no search repairs it), so reduced dims are non-empty."""

    name = "logsumexp"
    fn = "torch.logsumexp"
    forms = ("int", "tuple")
    vulnerable = True
    nonempty = True

    def out_dtypes(self, dtype):
        return [dtype if dtype in FLOAT_DTYPES else "float32"]


@register_op
class VectorNorm(ReduceSpec):
    """torch.linalg.vector_norm and torch.norm with every kind of order: 2, 1, 0, fractional,
    large, negative and ±inf; 'fro' for torch.norm over at most two dims. Max-like orders (inf,
    -inf, negative) have no value on an empty reduction and raise there."""

    name = "vector_norm"
    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 1)
    keepdim_forms = ("none", "int", "tuple")
    vulnerable = True
    ORDS = (2, 1, 0, 0.5, 3, -1, -2, float("inf"), float("-inf"))

    def build_extra(self) -> None:
        dim = self.attrs["dim"]
        fns = ["linalg.vector_norm", "norm"]
        fn = self.choice_attr("fn", fns)
        ords: list[Any] = list(self.ORDS)
        n_dims = self.rank if dim is None else 1 if isinstance(dim, int) else len(dim)
        if fn == "norm" and n_dims <= 2 and not (dim is None and self.attrs["keepdim"] is False and self.rank > 2):
            ords.append("fro")
        self.choice_attr("ord", ords)
        dt = self.in_sigs[0][0]
        use = fn == "linalg.vector_norm" and self.rng.random() < 0.3
        self.attrs["dtype"] = self.rng.choice(wider_floats(dt)) if use else None

    def requires(self, inputs):
        o = self.attrs["ord"]
        if isinstance(o, str) or 0 <= o < float("inf"):  # inf is max-like too: no value on an empty dim
            return []
        s = inputs[0].shape
        axes = sorted(self.reduced_axes())
        if self.rank == 0:
            return []
        return [s[i] >= 1 for i in axes]

    def out_dtypes(self, dtype):
        return [self.attrs["dtype"] or dtype]

    def exports_onnx(self, a, in_sigs):
        # torch.norm(dim=None, keepdim=True) exports through a complex-typed path that fails
        if in_sigs[0][0] == "bfloat16" and a["dtype"] in (None, "bfloat16"):
            # bfloat16 norms other than 1, 2 and max-norms export through a pow the exporter
            # types as ComplexDouble, and fail
            if a["fn"] == "norm" or a["ord"] not in (1, 2, float("inf"), float("-inf")):
                return False
        return not (a["fn"] == "norm" and a["dim"] is None and a["keepdim"])

    def materialize(self, ins, a, in_shapes):
        o = a["ord"]
        otxt = f"float('{o}')" if isinstance(o, float) and abs(o) == float("inf") else repr(o)
        dim = a["dim"]
        dims = "None" if dim is None else str(dim) if isinstance(dim, int) else fmt_tuple(dim)
        if a["fn"] == "norm":
            return f"torch.norm({ins[0]}, p={otxt}, dim={dims}, keepdim={a['keepdim']})"
        dt = f", dtype=torch.{a['dtype']}" if a["dtype"] else ""
        return f"torch.linalg.vector_norm({ins[0]}, ord={otxt}, dim={dims}, keepdim={a['keepdim']}{dt})"


@register_op
class Median(ReduceSpec):
    """median / nanmedian: over everything (one output) or over one dim ((values, indices))."""

    name = "median"
    onnx = False  # no TorchScript ONNX symbolic (opset 17)
    in_dtypes = same_dtype_combos(NO_BOOL, 1)
    forms = ("none", "int")
    keepdim_forms = ("int",)
    nonempty = True

    def build_extra(self) -> None:
        self.choice_attr("fn", ("median", "nanmedian"))

    def out_dtypes(self, dtype):
        return [dtype] if self.attrs["dim"] is None else [dtype, INDEX]

    def materialize(self, ins, a, in_shapes):
        if a["dim"] is None:
            return f"torch.{a['fn']}({ins[0]})"
        return f"torch.{a['fn']}({ins[0]}, {a['dim']}, {a['keepdim']})"


@register_op
class Mode(ReduceSpec):
    name = "mode"
    onnx = False  # no TorchScript ONNX symbolic (opset 17)
    forms = ("int",)
    nonempty = True

    def out_dtypes(self, dtype):
        return [dtype, INDEX]

    def materialize(self, ins, a, in_shapes):
        return f"torch.mode({ins[0]}, {a['dim']}, {a['keepdim']})"


@register_op
class Kthvalue(ReduceSpec):
    """kthvalue(k, dim, keepdim) with 1 <= k <= size of dim."""

    name = "kthvalue"
    onnx = False  # no TorchScript ONNX symbolic (opset 17)
    in_dtypes = same_dtype_combos(NO_BOOL, 1)
    forms = ("int",)
    nonempty = True

    def build_extra(self) -> None:
        self.k = self.int_attr("k")

    def requires(self, inputs):
        n = inputs[0].shape[wrap(self.attrs["dim"], self.rank)] if self.rank else 1
        return super().requires(inputs) + [self.k >= 1, self.k <= n]

    def out_dtypes(self, dtype):
        return [dtype, INDEX]

    def materialize(self, ins, a, in_shapes):
        return f"torch.kthvalue({ins[0]}, {a['k']}, {a['dim']}, {a['keepdim']})"


# -- same-shape ops along one dim: sorts and scans -----------------------------------------


class AlongDimSpec(TargetedSpec):
    """Ops that work along one dim and keep the shape (sort, cumsum, ...)."""

    family = "reduction"

    def build(self) -> None:
        self.attrs["dim"] = choose_dim(self.rng, self.rank)
        self.build_extra()

    def build_extra(self) -> None:
        pass

    def out_dtypes(self, dtype: str) -> list[str]:
        return [dtype]

    def type_transfer(self, inputs):
        return [AbsTensor(dt, list(inputs[0].shape)) for dt in self.out_dtypes(inputs[0].dtype)]

    @classmethod
    def deduct_inputs(cls, out: Sig, rng):
        same = [c for c in cls.dtype_combos(1) if c[0] == out[0]]
        return [(same[0][0], out[1])] if same else None


@register_op
class Topk(AlongDimSpec):
    """topk(k) along a dim (or the default last dim), largest or smallest, sorted or not;
    0 <= k <= size (k = 0 gives empty outputs)."""

    name = "topk"
    in_dtypes = same_dtype_combos(NO_BOOL, 1)

    def build_extra(self) -> None:
        self.k = self.int_attr("k")
        self.bool_attr("largest")
        self.bool_attr("sorted")
        self.bool_attr("default_dim")

    def axis(self) -> int:
        return self.rank - 1 if self.attrs["default_dim"] else wrap(self.attrs["dim"], self.rank)

    def requires(self, inputs):
        n = inputs[0].shape[self.axis()] if self.rank else 1
        return [self.k >= 0, self.k <= n]

    def type_transfer(self, inputs):
        s = list(inputs[0].shape)
        if s:
            s[self.axis()] = self.k
        return [AbsTensor(inputs[0].dtype, s), AbsTensor(INDEX, list(s))]

    def materialize(self, ins, a, in_shapes):
        dim = "" if a["default_dim"] else f", dim={a['dim']}"
        return f"torch.topk({ins[0]}, {a['k']}{dim}, largest={a['largest']}, sorted={a['sorted']})"


@register_op
class Sort(AlongDimSpec):
    """sort / argsort along a dim, ascending or descending, stable or not."""

    name = "sort"

    def build_extra(self) -> None:
        self.choice_attr("fn", ("sort", "argsort"))
        self.bool_attr("descending")
        self.choice_attr("stable", (None, False, True))

    def exports_onnx(self, a, in_sigs):
        return a["stable"] is None  # any stable= selects the sort.stable overload, not exportable

    def out_dtypes(self, dtype):
        return [dtype, INDEX] if self.attrs["fn"] == "sort" else [INDEX]

    def materialize(self, ins, a, in_shapes):
        stable = "" if a["stable"] is None else f", stable={a['stable']}"
        return f"torch.{a['fn']}({ins[0]}, dim={a['dim']}, descending={a['descending']}{stable})"


@register_op
class Cumsum(AlongDimSpec):
    """cumsum / cumprod with an optional dtype= (bool is no accumulation dtype)."""

    name = "cumsum_cumprod"

    def build_extra(self) -> None:
        self.choice_attr("fn", ("cumsum", "cumprod"))
        use = self.rng.random() < 0.3
        self.attrs["dtype"] = self.rng.choice(NUMERIC_DTYPES) if use else None

    def out_dtypes(self, dtype):
        return [self.attrs["dtype"] or accumulate_dtype(dtype)]

    def exports_onnx(self, a, in_sigs):
        return a["fn"] == "cumsum"  # aten::cumprod has no ONNX symbolic

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] == "bool":
            return None
        return [(out[0] if out[0] != "int64" else rng.choice(("int64", "int8", "int32", "bool", "uint8")), out[1])]

    def materialize(self, ins, a, in_shapes):
        dt = f", dtype=torch.{a['dtype']}" if a["dtype"] else ""
        return f"torch.{a['fn']}({ins[0]}, {a['dim']}{dt})"


@register_op
class Cummax(AlongDimSpec):
    name = "cummax_cummin"
    onnx = False  # no TorchScript ONNX symbolic (opset 17)

    def build_extra(self) -> None:
        self.choice_attr("fn", ("cummax", "cummin"))

    def out_dtypes(self, dtype):
        return [dtype, INDEX]

    def materialize(self, ins, a, in_shapes):
        return f"torch.{a['fn']}({ins[0]}, {a['dim']})"


@register_op
class Logcumsumexp(AlongDimSpec):
    name = "logcumsumexp"
    onnx = False  # no TorchScript ONNX symbolic (opset 17)
    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 1)
    vulnerable = True

    def materialize(self, ins, a, in_shapes):
        return f"torch.logcumsumexp({ins[0]}, {a['dim']})"
