"""The generator's torch-free promotion rules agree with PyTorch on every dtype pair and rank mix.

The spec self-check samples a few instances per op; promotion is a closed table, so it is checked
here exhaustively (it decides the output dtype of every mixed-dtype op in cast.py)."""

import itertools

import torch

from nnforge.core.dtypes import ALL_DTYPES, from_torch, to_torch
from nnforge.generator.specs.cast import CASTS, promote_types, result_type


def test_promote_types_matches_torch_on_every_pair():
    for a, b in itertools.product(ALL_DTYPES, ALL_DTYPES):
        assert promote_types(a, b) == from_torch(torch.promote_types(to_torch(a), to_torch(b))), (a, b)


def test_result_type_gives_zero_dim_tensors_lower_priority_like_torch():
    for a, b in itertools.product(ALL_DTYPES, ALL_DTYPES):
        for ra, rb in itertools.product((0, 1), (0, 1)):
            x = torch.zeros([2] * ra, dtype=to_torch(a))
            y = torch.zeros([2] * rb, dtype=to_torch(b))
            assert result_type([(a, ra), (b, rb)]) == from_torch(torch.result_type(x, y)), (a, ra, b, rb)


def test_float_to_integer_casts_are_marked_undefined_on_overflow():
    for target, spec in CASTS.items():
        for src in ALL_DTYPES:
            want = src.startswith(("float", "bfloat")) and target not in ("bool",) and not target.startswith(("float", "bfloat"))
            assert spec.overflow_undefined(src) == want, (src, target)
