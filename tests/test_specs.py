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


def test_dilated_max_pool_windows_always_hold_an_input_element():
    """A dilated window that starts in the padding can skip a short input entirely (max_pool2d
    then gives -inf whatever the values); the spec rules such attributes out."""
    import torch

    from nnforge.generator.engine import GeneratorConfig
    from nnforge.generator.seeds import generate_case
    from nnforge.oracle.program_loader import load_program, unload_program

    dilated = 0
    for seed in range(200):
        if dilated >= 12:
            break
        cfg = GeneratorConfig(n_nodes=1, seed=seed, ops=("max_pool2d",), dtypes=("float32",), weight_prob=0.0)
        case, gen = generate_case(cfg)
        node = gen.graph.nodes[0]
        dilated += any(v != 1 for k, v in node.attrs.items() if k.startswith("dilation"))
        module = load_program(case.program, name=f"pool_{seed}")
        try:
            torch.manual_seed(seed)
            outs = module.Model()(*module.make_inputs())
        finally:
            unload_program(module)
        first = outs[0] if isinstance(outs, tuple) else outs
        assert bool(torch.isfinite(first).all()), (seed, case.program)
    assert dilated >= 12, "too few dilated pools to test anything"
