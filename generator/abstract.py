"""Symbolic tensor types: a dtype and a shape whose dims are z3 integer expressions.

The generator reasons about every edge with these before any tensor exists; after solving,
`concretise` turns each dim into a plain int.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import z3

Dim = Union[z3.ArithRef, int]


@dataclass
class AbsTensor:
    dtype: str
    shape: list[Dim]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def sig(self) -> tuple[str, int]:
        """The cheap part of the type: what is checked before the solver is asked anything."""
        return (self.dtype, self.rank)

    def numel(self) -> Dim:
        n: Dim = 1
        for d in self.shape:
            n = n * d
        return n

    def concretise(self, model: z3.ModelRef) -> list[int]:
        return [as_int(model, d) for d in self.shape]

    def __repr__(self) -> str:
        return f"AbsTensor({self.dtype}, {self.shape})"


def as_int(model: z3.ModelRef, e: Dim) -> int:
    if isinstance(e, int):
        return e
    v = model.eval(e, model_completion=True)
    return v.as_long()


def fresh_shape(prefix: str, rank: int) -> list[z3.ArithRef]:
    return [z3.Int(f"{prefix}_d{i}") for i in range(rank)]
