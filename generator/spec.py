"""Operator specs: each operator is described once, and the generator, the materialiser,
the ONNX exporter and the spec self-check all read the same description.

A spec is a class registered with `@register_op`. It declares

- `arity` (or overrides `pick_arity` for variadic ops like cat) and which input dtype
  combinations and ranks it accepts (`in_dtypes`, `in_ranks`, or an overridden `accepts`);
- `__init__`: the operator's attributes. Integer attributes that interact with shapes are z3
  variables (`self.int_attr`); categorical ones (modes, flags) are drawn from `self.rng`
  (`self.choice_attr`), so one spec instance is one point of the attribute space;
- `requires(inputs)`: z3 predicates the input shapes and attributes must satisfy;
- `type_transfer(inputs)`: the symbolic output types;
- `deduct_inputs(out_sig, rng)`: for backward insertion, input (dtype, rank)s that can produce
  an output of the given (dtype, rank), or None;
- `materialize(ins, attrs, in_shapes)`: one PyTorch expression (a tuple for several outputs);
- `exports_onnx(attrs, in_types)`: whether the TorchScript ONNX exporter handles this instance.

Specs must be wide: every mode and flag, every dim form, sizes at the edges. The spec
self-check test (tests/test_specs.py) runs every spec on several solver instances and
compares eager output shapes and dtypes with `type_transfer`, and tries ONNX export where the
spec says it works, which is what keeps wide specs honest.
"""

from __future__ import annotations

import itertools
import random
from typing import Any, ClassVar, Iterable, Sequence

import z3

from nnforge.core.dtypes import ALL_DTYPES
from nnforge.generator.abstract import AbsTensor, Dim


Sig = tuple[str, int]  # (dtype, rank)

OP_REGISTRY: dict[str, type["OpSpec"]] = {}

MAX_RANK = 5


def register_op(cls: type["OpSpec"]) -> type["OpSpec"]:
    name = cls.name
    if not name:
        raise TypeError(f"{cls.__qualname__} has no name")
    if name in OP_REGISTRY and OP_REGISTRY[name] is not cls:
        raise TypeError(f"operator {name!r} registered twice ({OP_REGISTRY[name].__qualname__}, {cls.__qualname__})")
    OP_REGISTRY[name] = cls
    return cls


def all_ops() -> dict[str, type["OpSpec"]]:
    """Every registered spec; importing the specs package fills the registry."""
    import nnforge.generator.specs  # noqa: F401  (registers by import)

    return dict(OP_REGISTRY)


class OpSpec:
    name: ClassVar[str] = ""
    arity: ClassVar[int] = 1
    # Accepted dtype combinations, one tuple per combination, of length `arity`.
    # Default: the same dtype for every input, any of ALL_DTYPES.
    in_dtypes: ClassVar[Sequence[tuple[str, ...]] | None] = None
    # Accepted ranks per input position (same for all positions if one entry).
    in_ranks: ClassVar[Sequence[Sequence[int]]] = (tuple(range(MAX_RANK + 1)),)
    # Inputs that are weights by nature (conv weight, norm affine): made nn.Parameters.
    weight_inputs: ClassVar[tuple[int, ...]] = ()
    # Whether input dims may be 0. If False the generator constrains every input dim >= 1.
    zero_size_ok: ClassVar[bool] = True
    # Ops that can produce NaN/Inf from finite inputs (div, log, sqrt...): value search targets.
    vulnerable: ClassVar[bool] = False
    onnx: ClassVar[bool] = True
    # Family, for reports and benchmark tables: elementwise, comparison, reduction, shape, nn, cast.
    family: ClassVar[str] = ""

    def __init__(self, in_sigs: Sequence[Sig], rng: random.Random, uid: str) -> None:
        self.in_sigs = list(in_sigs)
        self.rng = rng
        self.uid = uid
        self.attrs: dict[str, Any] = {}  # z3 ints or plain Python values

    # -- attribute helpers ------------------------------------------------------------------
    def int_attr(self, name: str) -> z3.ArithRef:
        v = z3.Int(f"{self.uid}_{name}")
        self.attrs[name] = v
        return v

    def choice_attr(self, name: str, choices: Sequence[Any]) -> Any:
        v = self.rng.choice(list(choices))
        self.attrs[name] = v
        return v

    def bool_attr(self, name: str) -> bool:
        return self.choice_attr(name, (False, True))

    def solver_attrs(self) -> dict[str, z3.ArithRef]:
        """The z3 integer attributes, which the generator bins and concretises."""
        return {k: v for k, v in self.attrs.items() if isinstance(v, z3.ArithRef)}

    # -- typing -----------------------------------------------------------------------------
    @classmethod
    def pick_arity(cls, rng: random.Random) -> int:
        return cls.arity

    @classmethod
    def dtype_combos(cls, arity: int) -> list[tuple[str, ...]]:
        if cls.in_dtypes is None:
            return [(d,) * arity for d in ALL_DTYPES]
        return [c for c in cls.in_dtypes if len(c) == arity]

    @classmethod
    def ranks_at(cls, i: int) -> Sequence[int]:
        return cls.in_ranks[i] if i < len(cls.in_ranks) else cls.in_ranks[-1]

    @classmethod
    def accepts(cls, in_sigs: Sequence[Sig]) -> bool:
        """The cheap check before the solver: dtypes and ranks only."""
        dts = tuple(s[0] for s in in_sigs)
        if dts not in set(cls.dtype_combos(len(in_sigs))):
            return False
        return all(s[1] in cls.ranks_at(i) for i, s in enumerate(in_sigs))

    def requires(self, inputs: list[AbsTensor]) -> list[z3.BoolRef]:
        return []

    def type_transfer(self, inputs: list[AbsTensor]) -> list[AbsTensor]:
        raise NotImplementedError

    @classmethod
    def deduct_inputs(cls, out: Sig, rng: random.Random) -> list[Sig] | None:
        """Input (dtype, rank)s for backward insertion; None if this op cannot make `out`."""
        return None

    def materialize(self, ins: list[str], a: dict[str, Any], in_shapes: list[list[int]]) -> str:
        raise NotImplementedError

    def exports_onnx(self, a: dict[str, Any], in_sigs: Sequence[Sig]) -> bool:
        return self.onnx

    def __repr__(self) -> str:
        return f"{self.name}({self.attrs})"


# -- helpers for writing specs --------------------------------------------------------------

def same_dtype_combos(dtypes: Iterable[str], arity: int) -> list[tuple[str, ...]]:
    return [(d,) * arity for d in dtypes]


def product_combos(*per_input: Iterable[str]) -> list[tuple[str, ...]]:
    return list(itertools.product(*[tuple(p) for p in per_input]))


def nonneg(dims: Iterable[Dim]) -> list[z3.BoolRef]:
    return [d >= 0 for d in dims if not isinstance(d, int)]


def broadcast(a: Sequence[Dim], b: Sequence[Dim]) -> tuple[list[z3.BoolRef], list[Dim]]:
    """Constraints for `a` and `b` to broadcast, and the broadcast shape (right-aligned)."""
    cons: list[z3.BoolRef] = []
    out: list[Dim] = []
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + list(a)
    b = [1] * (n - len(b)) + list(b)
    for x, y in zip(a, b):
        if isinstance(x, int) and x == 1:
            out.append(y)
        elif isinstance(y, int) and y == 1:
            out.append(x)
        else:
            cons.append(z3.Or(x == y, x == 1, y == 1))
            out.append(z3.If(x == 1, y, x))
    return cons, out


def broadcast_all(shapes: Sequence[Sequence[Dim]]) -> tuple[list[z3.BoolRef], list[Dim]]:
    cons: list[z3.BoolRef] = []
    out: list[Dim] = list(shapes[0])
    for s in shapes[1:]:
        c, out = broadcast(out, s)
        cons += c
    return cons, out


def norm_dim(dim: Dim, rank: int) -> Dim:
    """A possibly negative dim index as a non-negative one (z3-aware)."""
    if isinstance(dim, int):
        return dim + rank if dim < 0 else dim
    return z3.If(dim < 0, dim + rank, dim)


def dim_in_range(dim: Dim, rank: int) -> z3.BoolRef:
    """PyTorch's accepted range for a dim argument: [-rank, rank-1] (rank 0 accepts -1 and 0)."""
    r = max(rank, 1)
    return z3.And(dim >= -r, dim <= r - 1)


def pick(seq: Sequence[Dim], idx: Dim) -> Dim:
    """seq[idx] for a symbolic index (a chain of If)."""
    if isinstance(idx, int):
        return seq[idx]
    out: Dim = seq[-1] if seq else 0
    for i in range(len(seq) - 2, -1, -1):
        out = z3.If(idx == i, seq[i], out)
    return out


def dtype_expr(dtype: str) -> str:
    return f"torch.{dtype}"
