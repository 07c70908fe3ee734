"""Linear algebra: linear, matmul (every rank combination), mm, bmm, addmm, baddbmm, einsum.

Integer matmuls run on CPU in eager, so the ops without weights take integer dtypes too.
"""

from __future__ import annotations

from typing import ClassVar


from nnforge.core.dtypes import INT_DTYPES, is_float
from nnforge.generator.abstract import AbsTensor
from nnforge.generator.spec import OpSpec, broadcast, broadcast_all, register_op, same_dtype_combos
from nnforge.generator.specs.nn_arith import FLOATS, fmt_float

NUMERIC = FLOATS + INT_DTYPES
# ONNX Runtime's MatMul/Gemm kernels: float, double, float16 and 32/64-bit integers.
ONNX_MATMUL_DTYPES = ("float32", "float64", "float16", "int32", "int64")
# mm and addmm export as Gemm, which ONNX Runtime implements for floats only.
ONNX_GEMM_DTYPES = ("float32", "float64", "float16")


@register_op
class Linear(OpSpec):
    """F.linear(x, weight (out, in), bias (out,) or None): x may have rank 1 to 4."""

    name = "linear"
    family = "nn"
    weight_inputs = (1, 2)
    in_ranks = ((1, 2, 3, 4), (2,), (1,))
    in_dtypes = same_dtype_combos(FLOATS, 2) + same_dtype_combos(FLOATS, 3)

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((2, 3))

    def requires(self, inputs):
        x, w = inputs[0], inputs[1]
        cons = [x.shape[-1] == w.shape[1]]
        if len(inputs) == 3:
            cons.append(inputs[2].shape[0] == w.shape[0])
        return cons

    def type_transfer(self, inputs):
        x, w = inputs[0], inputs[1]
        return [AbsTensor(x.dtype, list(x.shape[:-1]) + [w.shape[0]])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in FLOATS or out[1] not in cls.in_ranks[0]:
            return None
        return [out, (out[0], 2)] + ([(out[0], 1)] if rng.random() < 0.5 else [])

    def materialize(self, ins, a, in_shapes):
        return f"F.linear({ins[0]}, {ins[1]}, {ins[2] if len(ins) == 3 else 'None'})"

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][0] in ("float32", "float64", "float16")


def matmul_shape(a: list, b: list) -> tuple[list, list]:
    """Constraints and result shape of torch.matmul for any ranks >= 1."""
    ra, rb = len(a), len(b)
    if ra == 1 and rb == 1:
        return [a[0] == b[0]], []
    if ra == 1:
        return [a[0] == b[-2]], list(b[:-2]) + [b[-1]]
    if rb == 1:
        return [a[-1] == b[0]], list(a[:-1])
    cons, batch = broadcast(a[:-2], b[:-2])
    return cons + [a[-1] == b[-2]], batch + [a[-2], b[-1]]


class _MatmulBase(OpSpec):
    family = "nn"
    arity = 2
    in_dtypes = same_dtype_combos(NUMERIC, 2)

    def requires(self, inputs):
        return matmul_shape(inputs[0].shape, inputs[1].shape)[0]

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, matmul_shape(inputs[0].shape, inputs[1].shape)[1])]

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][0] in ONNX_MATMUL_DTYPES


@register_op
class Matmul(_MatmulBase):
    name = "matmul"
    in_ranks = ((1, 2, 3, 4),)

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in NUMERIC:
            return None
        r = out[1]
        if r == 0:
            return [(out[0], 1), (out[0], 1)]
        if r == 1:
            return rng.choice(([(out[0], 1), (out[0], 2)], [(out[0], 2), (out[0], 1)]))
        if r > 4:
            return None
        choices = [[(out[0], r), (out[0], rng.randint(2, r))], [(out[0], rng.randint(2, r)), (out[0], r)]]
        if r >= 2:  # ND @ 1D drops the last dim; 1D @ ND drops the second to last
            choices += [[(out[0], r + 1), (out[0], 1)], [(out[0], 1), (out[0], r + 1)]] if r + 1 <= 4 else []
        return rng.choice(choices)

    def materialize(self, ins, a, in_shapes):
        return f"torch.matmul({ins[0]}, {ins[1]})"


@register_op
class Mm(_MatmulBase):
    name = "mm"
    in_ranks = ((2,),)

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out, out] if out[0] in NUMERIC and out[1] == 2 else None

    def materialize(self, ins, a, in_shapes):
        return f"torch.mm({ins[0]}, {ins[1]})"

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][0] in ONNX_GEMM_DTYPES  # exported as Gemm


@register_op
class Bmm(_MatmulBase):
    name = "bmm"
    in_ranks = ((3,),)

    def requires(self, inputs):
        x, y = inputs
        return [x.shape[0] == y.shape[0], x.shape[2] == y.shape[1]]

    def type_transfer(self, inputs):
        x, y = inputs
        return [AbsTensor(x.dtype, [x.shape[0], x.shape[1], y.shape[2]])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out, out] if out[0] in NUMERIC and out[1] == 3 else None

    def materialize(self, ins, a, in_shapes):
        return f"torch.bmm({ins[0]}, {ins[1]})"


class _AddMatmul(OpSpec):
    """beta * input + alpha * (m1 @ m2); input broadcasts to the product's shape."""

    family = "nn"
    arity = 3
    in_dtypes = same_dtype_combos(NUMERIC, 3)
    fn: ClassVar[str] = ""
    mat_rank: ClassVar[int] = 2

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if is_float(in_sigs[0][0]):
            self.choice_attr("alpha", (1.0, 0.5, -2.0, 0.0))
            self.choice_attr("beta", (1.0, 0.5, 0.0, -1.0))
        else:
            self.choice_attr("alpha", (1, 2, -1, 0))
            self.choice_attr("beta", (1, 0, 3))

    def _prod(self, m1, m2):
        if self.mat_rank == 2:
            return [m1.shape[1] == m2.shape[0]], [m1.shape[0], m2.shape[1]]
        return ([m1.shape[0] == m2.shape[0], m1.shape[2] == m2.shape[1]], [m1.shape[0], m1.shape[1], m2.shape[2]])

    def requires(self, inputs):
        cons, prod = self._prod(inputs[1], inputs[2])
        bc, out = broadcast(inputs[0].shape, prod)
        # the input must broadcast *to* the product's shape, not widen it
        return cons + bc + [o == p for o, p in zip(out, prod)]

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, self._prod(inputs[1], inputs[2])[1])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in NUMERIC or out[1] != cls.mat_rank:
            return None
        return [(out[0], rng.randint(0, cls.mat_rank)), out, out]

    def materialize(self, ins, a, in_shapes):
        fmt = fmt_float if isinstance(a["alpha"], float) else str
        return f"{self.fn}({ins[0]}, {ins[1]}, {ins[2]}, beta={fmt(a['beta'])}, alpha={fmt(a['alpha'])})"

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][0] in ONNX_GEMM_DTYPES


@register_op
class Addmm(_AddMatmul):
    name = "addmm"
    fn = "torch.addmm"
    mat_rank = 2
    in_ranks = ((0, 1, 2), (2,), (2,))


@register_op
class Baddbmm(_AddMatmul):
    name = "baddbmm"
    fn = "torch.baddbmm"
    mat_rank = 3
    in_ranks = ((0, 1, 2, 3), (3,), (3,))


# Einsum equations, written once; the operand ranks they need follow from the letters (an
# ellipsis takes any number of dims, broadcast across operands as PyTorch does).
EQUATIONS = (
    # one operand
    "ij->ji", "ii->i", "ii->", "ijk->", "ij->j", "ijk->ik", "i->i", "bij->bji", "...ij->...ji", "...i->...",
    "i...->i", "ij", "ba",
    # two operands
    "ij,jk->ik", "bij,bjk->bik", "i,j->ij", "i,i->", "ij,ij->ij", "...ij,...jk->...ik", "bhqd,bhkd->bhqk",
    "ij,kj->ik", "i,ij->j", "ij,jk", "...i,...i->...", "bi,bi->b", "ij,j->i", "i,ij", "abc,cd->abd",
    # three operands
    "ij,jk,kl->il", "i,i,i->i", "bi,bj,bk->bijk",
)


def parse_equation(eq: str) -> tuple[list[str], str]:
    """Operand subscripts and the output subscripts (implicit form: letters seen once, sorted)."""
    lhs, _, rhs = eq.partition("->")
    ops = lhs.split(",")
    if "->" not in eq:
        letters = "".join(ops).replace("...", "")
        rhs = ("..." if any("..." in o for o in ops) else "") + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return ops, rhs


def _letters(sub: str) -> int:
    return len(sub.replace("...", ""))


def equation_fits(eq: str, ranks: list[int]) -> bool:
    ops, _ = parse_equation(eq)
    if len(ops) != len(ranks):
        return False
    return all(r >= _letters(o) if "..." in o else r == len(o) for o, r in zip(ops, ranks))


@register_op
class Einsum(OpSpec):
    name = "einsum"
    family = "nn"
    in_ranks = ((0, 1, 2, 3, 4),)
    in_dtypes = [c for k in (1, 2, 3) for c in same_dtype_combos(NUMERIC, k)]

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((1, 2, 2, 3))

    @classmethod
    def accepts(cls, in_sigs):
        return super().accepts(in_sigs) and any(equation_fits(e, [s[1] for s in in_sigs]) for e in EQUATIONS)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        ranks = [s[1] for s in in_sigs]
        fits = [e for e in EQUATIONS if equation_fits(e, ranks)]
        self.choice_attr("equation", fits or EQUATIONS[:1])

    def _analyse(self, inputs):
        ops, rhs = parse_equation(self.attrs["equation"])
        cons: list = []
        size: dict[str, object] = {}
        ell_shapes = []
        for sub, t in zip(ops, inputs):
            shape = list(t.shape)
            if "..." in sub:
                pre, post = sub.split("...")
                n_ell = len(shape) - len(pre) - len(post)
                ell_shapes.append(shape[len(pre): len(pre) + n_ell])
                dims = list(zip(pre, shape[: len(pre)])) + list(zip(post, shape[len(shape) - len(post):]))
            else:
                dims = list(zip(sub, shape))
            for c, d in dims:
                if c in size:
                    cons.append(size[c] == d)
                else:
                    size[c] = d
        ell: list = []
        if ell_shapes:
            bc, ell = broadcast_all(ell_shapes)
            cons += bc
        out = []
        pre, _, post = rhs.partition("...")
        out = [size[c] for c in pre] + (ell if "..." in rhs else []) + [size[c] for c in post]
        return cons, out

    def requires(self, inputs):
        return self._analyse(inputs)[0]

    def type_transfer(self, inputs):
        return [AbsTensor(self._out_dtype(inputs[0].dtype, inputs[0].rank), self._analyse(inputs)[1])]

    def _out_dtype(self, dtype: str, rank: int) -> str:
        """A one-operand einsum that sums dims away is torch.sum: integers come back as int64."""
        ops, rhs = parse_equation(self.attrs["equation"])
        ell_dims = rank - _letters(ops[0])
        summed = set(ops[0].replace("...", "")) - set(rhs) or ("..." in ops[0] and "..." not in rhs and ell_dims > 0)
        return "int64" if len(ops) == 1 and summed and dtype in INT_DTYPES else dtype

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in NUMERIC:
            return None
        options = []
        for eq in EQUATIONS:
            ops, rhs = parse_equation(eq)
            n_out = _letters(rhs)
            if "..." in rhs:
                if out[1] < n_out:
                    continue
                extra = out[1] - n_out  # ellipsis rank; give it to every ellipsis operand
                ranks = [_letters(o) + (extra if "..." in o else 0) for o in ops]
            elif n_out == out[1]:
                ranks = [_letters(o) if "..." not in o else _letters(o) + rng.randint(0, 1) for o in ops]
            else:
                continue
            if max(ranks) <= 4:
                options.append(ranks)
        if not options:
            return None
        return [(out[0], r) for r in rng.choice(options)]

    def materialize(self, ins, a, in_shapes):
        return f"torch.einsum({a['equation']!r}, {', '.join(ins)})"

    def exports_onnx(self, a, in_sigs):
        # ONNX Einsum does not broadcast ellipses of different ranks as PyTorch does.
        ops, _ = parse_equation(a["equation"])
        ell = {r - _letters(o) for o, (_, r) in zip(ops, in_sigs) if "..." in o}
        return len(ell) <= 1 and in_sigs[0][0] in ("float32", "float64")
