"""Shape arithmetic and attribute helpers shared by the nn families (conv, pool, norm, ...).

Not a family itself: it registers nothing. Sliding-window sizes are written once here so that
conv, transposed conv and every pooling op agree with PyTorch's formulas, ceil-mode edge rule
included.
"""

from __future__ import annotations

from typing import Any, Sequence

import z3

from nnforge.core.dtypes import FLOAT_DTYPES
from nnforge.generator.abstract import Dim
from nnforge.generator.spec import OpSpec

# Bounds that keep nn instances small, so that checks and compiled runs stay fast.
MAX_CHANNELS = 16
MAX_KERNEL = 16
MAX_STRIDE = 4
MAX_DILATION = 4
MAX_PADDING = 4

FLOATS = FLOAT_DTYPES


def floordiv(a: Dim, b: Dim) -> Dim:
    """floor(a / b) for b > 0; z3's integer division is Euclidean, which equals floor then."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return a / b  # z3 ArithRef: integer division


# Products and quotients with a small attribute (stride, dilation, groups, factor) go through
# these helpers, so that their encoding is chosen in one place. Plain nonlinear terms measured
# faster in z3 than If-chains over the attribute's values (those stalled the solver).
SMALL = 16


def mul_small(x: Dim, v: Dim) -> Dim:
    """x * v for v in [1, SMALL]."""
    return x * v


def div_small(x: Dim, v: Dim) -> Dim:
    """floor(x / v) for v in [1, SMALL]."""
    return floordiv(x, v)


def divides_small(v: Dim, x: Dim) -> z3.BoolRef:
    """v divides x, for v in [1, SMALL]."""
    if isinstance(v, int) and isinstance(x, int):
        return z3.BoolVal(x % v == 0)
    return x % v == 0


def named_dims(spec: OpSpec, exprs: Sequence[Dim]) -> tuple[list[z3.BoolRef], list[Dim]]:
    """Output dims as fresh solver variables, with equalities binding them to `exprs`.

    The generator multiplies output dims for its size cap; a product of plain variables keeps
    z3 responsive where a product of long If-chains stalls it. Call from both `requires` (use
    the equalities) and `type_transfer` (use the variables): the names are stable per node.
    """
    names = [z3.Int(f"{spec.uid}_out{i}") for i in range(len(exprs))]
    cons = [n == e for n, e in zip(names, exprs) if not isinstance(e, int)]
    return cons, [e if isinstance(e, int) else n for n, e in zip(names, exprs)]


def window_out(size: Dim, k: Dim, s: Dim, p: Dim, d: Dim, ceil_mode: bool = False) -> Dim:
    """Output length of a sliding window (conv and pooling share it).

    floor((L + 2p - d(k-1) - 1) / s) + 1, or with ceil_mode the ceiling, minus one when the last
    window would start beyond the input and its left padding (PyTorch's pooling edge rule).
    `s` and `d` must lie in [1, SMALL].
    """
    span = size + 2 * p - mul_small(k - 1, d) - 1
    if not ceil_mode:
        return div_small(span, s) + 1
    out = div_small(span + s - 1, s) + 1
    return z3.If(mul_small(out - 1, s) >= size + p, out - 1, out)


def transposed_out(size: Dim, k: Dim, s: Dim, p: Dim, d: Dim, op: Dim) -> Dim:
    """Output length of a transposed convolution (`s`, `d` in [1, SMALL])."""
    return mul_small(size - 1, s) - 2 * p + mul_small(k - 1, d) + op + 1


def spatial_ints(spec: OpSpec, name: str, n: int, form: str) -> list[z3.ArithRef]:
    """n z3 attributes for a per-spatial-dim argument, written as one int ("int") or a tuple.

    In "int" form the attribute is `name`; in "tuple" form it is `name_0` ... `name_{n-1}`.
    `spatial_arg` turns the concrete attributes back into the Python argument.
    """
    if form == "int":
        v = spec.int_attr(name)
        return [v] * n
    return [spec.int_attr(f"{name}_{i}") for i in range(n)]


def spatial_arg(a: dict[str, Any], name: str, n: int) -> str:
    """The argument text for an attribute made by `spatial_ints` (int or tuple)."""
    if name in a:
        return str(a[name])
    return "(" + ", ".join(str(a[f"{name}_{i}"]) for i in range(n)) + ("," if n == 1 else "") + ")"


def spatial_values(a: dict[str, Any], name: str, n: int) -> list[int]:
    if name in a:
        return [a[name]] * n
    return [a[f"{name}_{i}"] for i in range(n)]


def bounded(vs: Sequence[Dim], lo: int, hi: int) -> list[z3.BoolRef]:
    return [z3.And(v >= lo, v <= hi) for v in vs if not isinstance(v, int)]


def at_least(dims: Sequence[Dim], lo: int = 1) -> list[z3.BoolRef]:
    return [d >= lo for d in dims if not isinstance(d, int)]


def more_than_one_element(dims: Sequence[Dim]) -> z3.BoolRef:
    """prod(dims) >= 2, written linearly: every dim non-empty and one of them at least 2."""
    if not dims:
        return z3.BoolVal(False)
    return z3.And(*[d >= 1 for d in dims], z3.Or(*[d >= 2 for d in dims]))


def fmt_float(v: float) -> str:
    """A float as Python source (inf and nan included)."""
    if v != v:
        return "float('nan')"
    if v in (float("inf"), float("-inf")):
        return "float('inf')" if v > 0 else "float('-inf')"
    return repr(float(v))


def opt(ref: str | None) -> str:
    return "None" if ref is None else ref
