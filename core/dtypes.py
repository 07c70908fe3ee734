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
