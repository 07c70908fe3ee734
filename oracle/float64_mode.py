"""The precision-evidence run must be float64 all the way through, not just at its inputs.

Converting the model and the inputs to float64 is not enough for generated and mutated programs:
an explicit `.to(torch.float16)`, `x.half()`, `torch.randn(..., dtype=torch.bfloat16)` or
`softmax(..., dtype=torch.float32)` inside `forward` would round the float64 run exactly where
eager rounds, so eager would look perfect against it and every compiler that keeps more precision
(Inductor computes float16 in float32) would look like a bug; so would a float32 that integer
math promotes to by default, which float64 operands then refuse to mix with. Under `Float64Everywhere` every
floating dtype a program asks for becomes float64; integer and bool casts are left alone.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_NARROW_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_TO_FLOAT_METHODS = {torch.Tensor.half, torch.Tensor.float, torch.Tensor.bfloat16}


def _widen(x: Any) -> Any:
    if isinstance(x, torch.dtype):
        return torch.float64 if x in _NARROW_FLOATS else x
    if isinstance(x, (list, tuple)) and any(isinstance(v, torch.dtype) for v in x):
        return type(x)(_widen(v) for v in x)
    return x


class Float64Everywhere(TorchFunctionMode):
    """Every float16/bfloat16/float32 dtype requested inside the mode is float64 instead, and so
    is the default dtype (`erf` of an integer tensor, `torch.randn(shape)`)."""

    def __enter__(self) -> "Float64Everywhere":
        self._default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            torch.set_default_dtype(self._default)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _TO_FLOAT_METHODS:
            return args[0].to(torch.float64)
        return func(*(_widen(a) for a in args), **{k: _widen(v) for k, v in kwargs.items()})
