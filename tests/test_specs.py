"""Every operator spec tells the truth: eager output types equal type_transfer's, and ONNX
export works wherever the spec claims it, on several solver instances each."""

import pytest

from nnforge.generator.selfcheck import check_spec
from nnforge.generator.spec import all_ops

OPS = sorted(all_ops())
SEEDS = range(4)


@pytest.mark.parametrize("op", OPS)
def test_spec_matches_eager_and_onnx(op):
    spec = all_ops()[op]
    for seed in SEEDS:
        check_spec(spec, seed, onnx=seed < 2)


def test_registry_has_the_required_breadth():
    ops = all_ops()
    assert len(ops) >= 80, f"only {len(ops)} operators registered"
    families = {s.family for s in ops.values()}
    assert {"elementwise", "reduction", "shape", "nn"} <= families, families
