"""Dtype names as plain strings, so that TestCases, graphs and verdicts serialise as JSON.

Torch is imported lazily: the generator reasons about dtypes long before any tensor exists.
"""

from __future__ import annotations

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8")
BOOL_DTYPES = ("bool",)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + BOOL_DTYPES
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def to_torch(dtype: str):
    import torch

    return getattr(torch, dtype)


def from_torch(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# Integer program inputs are drawn from these closed ranges (generator/materialize.py), and value
# search's gradient moves an integer input as far as INT_SEARCH_WIDEN beyond them
# (`int_search_range`, used by oracle/value_search/slots.py `int_reach`). The generator's value facts
# rely on both: an integer input stays within that range, and gets anywhere in it.
INPUT_INT_RANGES = {"uint8": (0, 15)}
INPUT_INT_RANGE_DEFAULT = (-8, 8)
INT_SEARCH_WIDEN = 8


# The values each integer dtype holds.
INT_DTYPE_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767),
                    "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}


def input_int_range(dtype: str) -> tuple[int, int]:
    """The closed range integer program inputs of `dtype` are drawn from."""
    return INPUT_INT_RANGES.get(dtype, INPUT_INT_RANGE_DEFAULT)


def int_search_range(dtype: str) -> tuple[int, int]:
    """The closed range an integer input of `dtype` may reach in value search, whatever its size:
    its draw range widened by INT_SEARCH_WIDEN either way, within the dtype. Value search moves
    inputs this far and the generator's value facts assume no more."""
    lo, hi = input_int_range(dtype)
    d_lo, d_hi = INT_DTYPE_RANGES[dtype]
    return max(d_lo, lo - INT_SEARCH_WIDEN), min(d_hi, hi + INT_SEARCH_WIDEN)
