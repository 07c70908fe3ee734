"""Comparison operators and floating-point class tests; every result is a bool tensor.

Tensor-tensor comparisons broadcast; the tensor-scalar forms use the torch function, the Python
operator, and the reflected operator (`2 < x`), with scalars that include inf and nan for floats
(x == nan is all False, x != nan all True: edge cases compilers fold wrongly). Mixed-dtype
comparisons live in cast.py (`compare_promote`). Dtypes and ONNX support were measured on
PyTorch 2.13 CPU eager and TorchScript export (opset 17) + ONNX Runtime 1.32, as in elementwise.py.
"""

from __future__ import annotations

import random

from nnforge.core.dtypes import ALL_DTYPES, is_float
from nnforge.generator.spec import register_op, same_dtype_combos
from nnforge.generator.specs.elementwise import ONNX_ALL, ONNX_FLOATS, ONNX_NUMERIC, BinarySpec, UnarySpec, scalar_pool

SPECIAL_FLOAT_SCALARS = ("float('inf')", "float('-inf')", "float('nan')")


class CompareSpec(BinarySpec):
    family = "comparison"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 2)
    out_rule = "bool"
    onnx_dtypes = ONNX_ALL
    onnx_scalar_dtypes = ONNX_NUMERIC

    def __init__(self, in_sigs, rng: random.Random, uid: str) -> None:
        super().__init__(in_sigs, rng, uid)
        if len(in_sigs) == 1 and is_float(in_sigs[0][0]):
            self.choice_attr("scalar", scalar_pool(in_sigs[0][0]) + SPECIAL_FLOAT_SCALARS)
        if self.attrs["form"] == "fn":
            self.choice_attr("call", ("fn", "method"))

    def materialize(self, ins, a, in_shapes) -> str:
        if a.get("form") == "fn" and a.get("call") == "method":
            other = ins[1] if len(ins) == 2 else a["scalar"]
            return f"{ins[0]}.{self.fn.removeprefix('torch.')}({other})"
        return super().materialize(ins, a, in_shapes)


def comparison(name: str, operator: str, onnx: tuple[str, ...] = ONNX_ALL) -> type[CompareSpec]:
    cls = type(name.capitalize(), (CompareSpec,), {
        "name": name, "fn": f"torch.{name}", "operator": operator, "onnx_dtypes": onnx,
        "__module__": __name__, "__doc__": f"torch.{name}(x, y) / x {operator} y, broadcasting",
    })
    return register_op(cls)


Eq = comparison("eq", "==")
Ne = comparison("ne", "!=")
Lt = comparison("lt", "<")
Gt = comparison("gt", ">")
# ORT has no bool kernel for the LessOrEqual / GreaterOrEqual the exporter emits.
Le = comparison("le", "<=", ONNX_NUMERIC)
Ge = comparison("ge", ">=", ONNX_NUMERIC)


@register_op
class Isclose(BinarySpec):
    """torch.isclose(x, y, rtol, atol, equal_nan): tolerances at 0 make it exact equality."""

    name = "isclose"
    family = "comparison"
    fn = "torch.isclose"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 2)
    out_rule = "bool"
    scalar_form = False

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.choice_attr("rtol", (None, 0.0, 1e-5, 0.1, 1.0))
        self.choice_attr("atol", (None, 0.0, 1e-8, 0.01, 1.5))
        self.choice_attr("equal_nan", (None, False, True))

    def keyword_args(self, a):
        return "".join(f", {k}={a[k]!r}" for k in ("rtol", "atol", "equal_nan") if a.get(k) is not None)


class ClassTestSpec(UnarySpec):
    family = "comparison"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 1)
    out_rule = "bool"


def class_test(name: str, onnx: tuple[str, ...] = ()) -> type[ClassTestSpec]:
    cls = type(name.capitalize(), (ClassTestSpec,), {
        "name": name, "fn": f"torch.{name}", "onnx_dtypes": onnx, "__module__": __name__,
        "__doc__": f"torch.{name}(x): a bool tensor of x's shape",
    })
    return register_op(cls)


Isnan = class_test("isnan", ONNX_FLOATS)
Isinf = class_test("isinf", ONNX_ALL)
Isfinite = class_test("isfinite", ONNX_FLOATS)
Isposinf = class_test("isposinf")
Isneginf = class_test("isneginf")
Signbit = class_test("signbit")
Isreal = class_test("isreal")
