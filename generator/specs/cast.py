"""Casts and type promotion: `x.to(dtype)` from every dtype to every dtype, `type_as`, and binary
ops whose inputs have DIFFERENT dtypes (or a Python scalar of a wider kind), whose result dtype
follows PyTorch's promotion rules (`promote_types`, checked against torch.promote_types in
tests/test_cast_promotion.py).

Undefined values: a float -> integer cast of NaN, of +-inf or of a value outside the target's
range is undefined behaviour in C/C++ (PyTorch's CPU kernels use a plain static_cast, and
compilers' generated code may saturate, wrap or give anything). Such casts are marked: cast specs
to an integer dtype have `undefined_on_overflow = True`, and `overflow_undefined(in_dtype)` tells
whether one instance is affected (float source). Value search / the oracle must keep inputs of
those casts inside the target range (or skip comparing those elements). Integer -> narrower
integer casts wrap modulo 2^n in PyTorch (defined since C++20), and float -> narrower float casts
overflow to inf (defined), so neither is marked.
"""

from __future__ import annotations

import random
from typing import ClassVar, Sequence

from nnforge.core.dtypes import ALL_DTYPES, INT_DTYPES, is_float
from nnforge.generator.abstract import AbsTensor
from nnforge.generator.spec import OpSpec, Sig, register_op
from nnforge.generator.specs.elementwise import (
    BinarySpec, NaryBroadcastSpec, UnarySpec, result_dtype,
)

SIGNED_ORDER = ("int8", "int16", "int32", "int64")
FLOAT_ORDER = ("float16", "bfloat16", "float32", "float64")
# dtypes for which ORT lacks Max/Min/Where kernels (measured)
ORT_NO_MINMAX = ("int8", "int16", "uint8", "bool")


def promote_types(a: str, b: str) -> str:
    """PyTorch's tensor-tensor promotion (torch.promote_types) without importing torch."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    fa, fb = is_float(a), is_float(b)
    if fa and fb:
        if {a, b} == {"float16", "bfloat16"}:
            return "float32"
        return max(a, b, key=FLOAT_ORDER.index)
    if fa or fb:
        return a if fa else b
    if "uint8" in (a, b):
        other = b if a == "uint8" else a
        return "int16" if other == "int8" else other
    return max(a, b, key=SIGNED_ORDER.index)


def category(dtype: str) -> int:
    return 0 if dtype == "bool" else 2 if is_float(dtype) else 1


def result_type(sigs: Sequence[Sig]) -> str:
    """torch.result_type of tensors given as (dtype, rank): a 0-dim tensor only takes part in the
    promotion when its category (bool < integer < float) is higher than that of every tensor with
    dims, e.g. float16[3] + float64[] is float16, but int32[3] + float16[] is float16."""
    dims = [d for d, r in sigs if r > 0]
    zeros = [d for d, r in sigs if r == 0]

    def fold(dts: list[str]) -> str | None:
        out = None
        for d in dts:
            out = d if out is None else promote_types(out, d)
        return out

    hi, lo = fold(dims), fold(zeros)
    if hi is None:
        return lo  # type: ignore[return-value]
    if lo is None or is_float(hi):
        return hi
    if hi == "bool" or is_float(lo):
        return promote_types(hi, lo)
    return hi


def no_bf16(dtypes: Sequence[str]) -> bool:
    return "bfloat16" not in dtypes


# -- casts ---------------------------------------------------------------------------------------
METHOD_FOR = {
    "float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16", "int8": "char",
    "int16": "short", "int32": "int", "int64": "long", "uint8": "byte", "bool": "bool",
}


class CastSpec(UnarySpec):
    """x cast to `target` (one registered spec per target, so backward insertion knows the result
    dtype from the class); forms: .to(dtype), .to(dtype=...), .type(dtype), the named method
    (.half(), .long(), ...), and torch.Tensor.to with copy=True."""

    family = "cast"
    target: ClassVar[str] = ""
    in_dtypes = [(d,) for d in ALL_DTYPES]
    onnx = True
    undefined_on_overflow: ClassVar[bool] = False

    @classmethod
    def out_dtype(cls, dtype: str) -> str:
        return cls.target

    @classmethod
    def overflow_undefined(cls, in_dtype: str) -> bool:
        """Whether out-of-range input values make this cast undefined (float -> integer)."""
        return cls.undefined_on_overflow and is_float(in_dtype)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.choice_attr("form", ("to", "to_kw", "type", "method", "copy"))

    def materialize(self, ins, a, in_shapes) -> str:
        x, t = ins[0], f"torch.{self.target}"
        return {
            "to": f"{x}.to({t})", "to_kw": f"{x}.to(dtype={t})", "type": f"{x}.type({t})",
            "method": f"{x}.{METHOD_FOR[self.target]}()", "copy": f"{x}.to({t}, copy=True)",
        }[a.get("form", "to")]

    def exports_onnx(self, a, in_sigs):
        return no_bf16([in_sigs[0][0], self.target])


def _register_cast(target: str) -> type[CastSpec]:
    cls = type(f"To{target.capitalize()}", (CastSpec,), {
        "name": f"to_{target}", "target": target, "undefined_on_overflow": target in INT_DTYPES,
        "onnx": target != "bfloat16", "__module__": __name__, "__doc__": f"x.to(torch.{target})",
    })
    return register_op(cls)


CASTS = {t: _register_cast(t) for t in ALL_DTYPES}


@register_op
class TypeAs(OpSpec):
    """x.type_as(y): x cast to y's dtype (y's shape is irrelevant)."""

    name = "type_as"
    family = "cast"
    arity = 2
    in_dtypes = [(a, b) for a in ALL_DTYPES for b in ALL_DTYPES]

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[1].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out: Sig, rng: random.Random) -> list[Sig] | None:
        return [(rng.choice(ALL_DTYPES), out[1]), (out[0], rng.randint(0, 3))]

    def materialize(self, ins, a, in_shapes) -> str:
        return f"{ins[0]}.type_as({ins[1]})"

    def exports_onnx(self, a, in_sigs):
        return no_bf16([s[0] for s in in_sigs])


# -- tensor-tensor promotion ---------------------------------------------------------------------
class PromoteBinarySpec(BinarySpec):
    """A binary op on two tensors of different dtypes; the result is promote_types(a, b) (then the
    op's own rule, e.g. true division's int -> float32)."""

    family = "cast"
    scalar_form = False
    excluded: ClassVar[tuple[str, ...]] = ()  # dtypes the op rejects on either side
    no_onnx_results: ClassVar[tuple[str, ...]] = ()  # promoted dtypes ORT has no kernel for
    onnx = True  # decided per instance by exports_onnx

    @classmethod
    def dtype_combos(cls, arity):
        if arity != 2:
            return []
        dts = [d for d in ALL_DTYPES if d not in cls.excluded]
        return [(a, b) for a in dts for b in dts if a != b]

    @classmethod
    def promoted(cls, sigs: Sequence[Sig]) -> str:
        return result_dtype(cls.out_rule, result_type(sigs))

    def type_transfer(self, inputs):
        out = super().type_transfer(inputs)[0]
        return [AbsTensor(self.promoted([t.sig for t in inputs]), out.shape)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        ranks = [out[1], rng.randint(0, out[1])]
        rng.shuffle(ranks)
        combos = [c for c in cls.dtype_combos(2) if cls.promoted(list(zip(c, ranks))) == out[0]]
        if not combos:
            return None
        return list(zip(rng.choice(combos), ranks))

    def exports_onnx(self, a, in_sigs):
        return no_bf16([s[0] for s in in_sigs]) and result_type(in_sigs) not in self.no_onnx_results


def promote_op(name: str, fn: str, operator: str | None = None, rule: str = "same",
               excluded: tuple[str, ...] = (), no_onnx: tuple[str, ...] = (),
               vulnerable: bool = False) -> type[PromoteBinarySpec]:
    cls = type("".join(p.capitalize() for p in name.split("_")), (PromoteBinarySpec,), {
        "name": name, "fn": fn, "operator": operator, "out_rule": rule, "excluded": excluded,
        "no_onnx_results": no_onnx, "vulnerable": vulnerable,
        "__module__": __name__, "__doc__": f"{fn}(x, y) with x.dtype != y.dtype",
    })
    return register_op(cls)


AddPromote = promote_op("add_promote", "torch.add", "+")
SubPromote = promote_op("sub_promote", "torch.sub", "-", excluded=("bool",))
MulPromote = promote_op("mul_promote", "torch.mul", "*")
DivPromote = promote_op("div_promote", "torch.div", "/", rule="float", vulnerable=True)
MaximumPromote = promote_op("maximum_promote", "torch.maximum", no_onnx=ORT_NO_MINMAX)
MinimumPromote = promote_op("minimum_promote", "torch.minimum", no_onnx=ORT_NO_MINMAX)
PowPromote = promote_op("pow_promote", "torch.pow", "**", no_onnx=("int8", "int16", "uint8"), vulnerable=True)


@register_op
class ComparePromote(PromoteBinarySpec):
    """eq/ne/lt/le/gt/ge on tensors of different dtypes: compared in the promoted dtype, result bool."""

    name = "compare_promote"
    fn = "torch.eq"
    out_rule = "bool"
    operator = "=="  # enables the operator form; the `op` attribute picks which operator
    OPS: ClassVar[dict[str, str]] = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.choice_attr("op", tuple(self.OPS))

    def materialize(self, ins, a, in_shapes) -> str:
        if a.get("form") == "op":
            return f"({ins[0]} {self.OPS[a['op']]} {ins[1]})"
        return f"torch.{a['op']}({ins[0]}, {ins[1]})"

    def exports_onnx(self, a, in_sigs):
        return no_bf16([s[0] for s in in_sigs])


@register_op
class WherePromote(NaryBroadcastSpec):
    """torch.where(cond, x, y) with x and y of different dtypes: the result is promote_types(x, y)."""

    name = "where_promote"
    family = "cast"
    arity = 3
    data_index = 1
    in_dtypes = [("bool", a, b) for a in ALL_DTYPES for b in ALL_DTYPES if a != b]
    onnx = True

    def type_transfer(self, inputs):
        out = super().type_transfer(inputs)[0]
        return [AbsTensor(result_type([t.sig for t in inputs[1:]]), out.shape)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        full = rng.randrange(3)
        ranks = [out[1] if i == full else rng.randint(0, out[1]) for i in range(3)]
        combos = [c for c in cls.in_dtypes if result_type(list(zip(c[1:], ranks[1:]))) == out[0]]
        return list(zip(rng.choice(combos), ranks)) if combos else None

    def materialize(self, ins, a, in_shapes) -> str:
        return f"torch.where({ins[0]}, {ins[1]}, {ins[2]})"

    def exports_onnx(self, a, in_sigs):
        return no_bf16([s[0] for s in in_sigs]) and result_type(in_sigs[1:]) not in ORT_NO_MINMAX


# -- tensor-scalar promotion ---------------------------------------------------------------------
class ScalarPromoteSpec(UnarySpec):
    """An integral tensor combined with a Python scalar of a wider kind: the result dtype is the
    default dtype of the scalar's kind (int/bool tensor with a float scalar -> float32; bool
    tensor with an int scalar -> int64)."""

    family = "cast"
    result: ClassVar[str] = ""
    scalars: ClassVar[tuple[str, ...]] = ()
    ops: ClassVar[dict[str, tuple[str, ...]]] = {}  # op -> dtypes it accepts
    onnx_ops: ClassVar[tuple[str, ...]] = ()
    onnx = True

    @classmethod
    def out_dtype(cls, dtype):
        return cls.result

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        dt = in_sigs[0][0]
        self.choice_attr("op", [op for op, dts in self.ops.items() if dt in dts])
        scalars = self.scalars
        if self.attrs["op"] in ("/", "remainder", "fmod"):  # x / 0.0 is Inf/NaN whatever x is
            scalars = tuple(s for s in scalars if float(s) != 0.0)
        self.choice_attr("scalar", scalars)
        self.choice_attr("reflected", (False, True) if self.attrs["op"] in ("+", "*", "-") else (False,))

    def materialize(self, ins, a, in_shapes) -> str:
        op, s, x = a["op"], a["scalar"], ins[0]
        if op.isidentifier():
            return f"torch.{op}({x}, {s})" if op != "clamp" else f"torch.clamp({x}, min={s})"
        return f"({s} {op} {x})" if a.get("reflected") else f"({x} {op} {s})"

    def exports_onnx(self, a, in_sigs):
        if a["op"] == "clamp":  # ORT's Clip has no int16 or bool kernel
            return in_sigs[0][0] in ("int8", "int32", "int64", "uint8")
        return a["op"] in self.onnx_ops


_INTS_BOOL = INT_DTYPES + ("bool",)


@register_op
class FloatScalarPromote(ScalarPromoteSpec):
    name = "float_scalar_promote"
    in_dtypes = [(d,) for d in _INTS_BOOL]
    result = "float32"
    scalars = ("0.5", "-1.5", "2.0", "0.0", "1e-3", "-0.0", "3.25")
    ops = {"+": _INTS_BOOL, "-": INT_DTYPES, "*": _INTS_BOOL, "/": _INTS_BOOL, "**": _INTS_BOOL,
           "remainder": _INTS_BOOL, "fmod": _INTS_BOOL, "clamp": _INTS_BOOL}
    onnx_ops = ("+", "-", "*", "/", "**", "clamp")
    vulnerable = True  # x / 0.0, x ** -1.5 on 0, remainder by 0.0


@register_op
class IntScalarPromote(ScalarPromoteSpec):
    name = "int_scalar_promote"
    in_dtypes = [("bool",)]
    result = "int64"
    scalars = ("0", "1", "2", "7", "100")  # no negative: bool ** -n raises
    ops = {"+": ("bool",), "*": ("bool",), "**": ("bool",), "bitwise_xor": ("bool",), "bitwise_and": ("bool",)}
    onnx_ops = ("+", "*", "**")

