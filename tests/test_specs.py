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


def test_layout_sensitive_ops_accept_any_strided_input():
    """Eager raises, for any values, on max_pool3d of an unbatched channels-last input and on
    take_along_dim without a dim of a non-contiguous one; the generated calls make a contiguous
    copy first, so that such a program is a test, not an invalid case."""
    import torch
    import torch.nn.functional as F  # noqa: F401  (the generated call names F)

    from nnforge.generator.materialize import spec_instance

    pool = spec_instance("max_pool3d", [("float32", 4)], "t")
    pool.attrs.update(kernel=1, stride_form="none", padding=0, dilation=1, ceil_mode=False, return_indices=False)
    call = pool.materialize(["x"], pool.attrs, [(8, 2, 3, 4)])
    x = torch.randn(8, 2, 3, 4).clone(memory_format=torch.channels_last)
    with pytest.raises(RuntimeError):
        F.max_pool3d(x, 1)  # the eager behaviour the spec works around
    assert torch.equal(eval(call, {"torch": torch, "F": F, "x": x}), F.max_pool3d(x.contiguous(), 1))

    take = spec_instance("take_along_dim", [("float32", 2), ("int64", 1)], "t")
    take.attrs.update(form="flat", dim=None)
    call = take.materialize(["x", "i"], take.attrs, [(12, 8), (2,)])
    x, i = torch.randn(12, 16)[:, :8], torch.tensor([3, 9])
    assert torch.equal(eval(call, {"torch": torch, "x": x, "i": i}), x.reshape(-1)[i])


def _run_one_op_programs_with_empty_dims(op: str, seeds: int) -> list[dict]:
    """Generates one-node programs of `op` whose placeholders may all have 0-size dims, runs each
    eagerly (raising where the spec let an invalid program through) and returns the nodes' attrs."""
    import torch

    from nnforge.generator.engine import GeneratorConfig
    from nnforge.generator.seeds import generate_case
    from nnforge.oracle.program_loader import load_program, unload_program

    built = []
    for seed in range(seeds):
        cfg = GeneratorConfig(n_nodes=1, seed=seed, ops=(op,), dtypes=("float32",), weight_prob=0.0,
                              zero_size_prob=1.0)
        case, gen = generate_case(cfg)
        if not gen.graph.nodes:
            continue
        built.append(gen.graph.nodes[0].attrs)
        module = load_program(case.program, name=f"{op}_{seed}")
        try:
            torch.manual_seed(seed)
            module.Model()(*module.make_inputs())
        finally:
            unload_program(module)
    return built


def test_pairwise_max_distance_is_never_built_over_an_empty_last_dim():
    """p=inf is a max over the last dim: eager raises on an empty one (no identity), whatever
    the values."""
    built = _run_one_op_programs_with_empty_dims("pairwise_distance", 80)
    assert sum(a["p"] == float("inf") for a in built) >= 8, "too few max-distance programs to test anything"


def test_a_reshape_split_with_a_one_between_its_halves_keeps_the_element_count():
    """Padding a regroup plan with 1s may put one between a split's two halves: (3, 2, 3) to
    (3, 1, 2, 3) splits dim 0 as 3 * 1; the second half is not the entry after the first."""
    import z3

    from nnforge.generator.abstract import AbsTensor
    from nnforge.generator.materialize import spec_instance

    op = spec_instance("reshape", [("float32", 3)], "r")
    op.plan, op.drops = [("split", 0, 0), ("one",), ("split", 0, 1), ("merge", (1, 2))], []
    op.sizes = [z3.Int(f"s{i}") for i in range(4)]
    op.attrs["infer_at"] = None
    solver = z3.Solver()
    solver.add(op.target_requires([AbsTensor("float32", [3, 2, 3])]))
    assert solver.check() == z3.sat
    solver.add(op.sizes[2] == 8)  # (3, 1, 8, 6) holds 144 elements, not 18
    assert solver.check() == z3.unsat


def test_instance_norm_with_a_weight_is_never_built_over_an_empty_batch():
    """F.instance_norm with weight and bias raises on a batch of 0 (torch 2.13)."""
    built = _run_one_op_programs_with_empty_dims("instance_norm", 120)
    assert sum(a["layout"] in ("affine", "both") for a in built) >= 20, "too few with a weight to test anything"


def test_layout_picky_ops_get_operands_they_accept():
    """Eager rejects a channels_last_3d input to pixel_shuffle/unshuffle and an expanded running
    mean to instance_norm (which updates it in place), whatever the values: the specs copy."""
    import torch
    import torch.nn.functional as F

    from nnforge.generator.materialize import spec_instance

    x5 = torch.randn(1, 4, 1, 4, 2).contiguous(memory_format=torch.channels_last_3d)
    for name in ("pixel_shuffle", "pixel_unshuffle"):
        op = spec_instance(name, [("float32", 5)], "p")
        op.attrs["factor"] = 1
        assert eval(op.materialize(["x"], op.attrs, [list(x5.shape)]), {"F": F, "x": x5}).shape == x5.shape
    op = spec_instance("instance_norm", [("float32", 3), ("float32", 1), ("float32", 1)], "n")
    op.attrs.update(layout="stats", use_input_stats=True, momentum=0.5, eps=1e-3)
    env = {"F": F, "x": torch.randn(2, 5, 3), "rm": torch.zeros(()).expand(5), "rv": torch.ones(()).expand(5)}
    assert eval(op.materialize(["x", "rm", "rv"], op.attrs, [[2, 5, 3], [5], [5]]), env).shape == (2, 5, 3)


def test_glu_halves_literal_dims_as_integers():
    """A shape may hold a literal 1 (a keepdim reduction's); halving it must stay a z3 Int, or
    a second glu's `% 2` raises (`Z3 integer expression expected`) and generation stops."""
    import z3

    from nnforge.generator.abstract import AbsTensor
    from nnforge.generator.materialize import spec_instance

    op = spec_instance("glu", [("float32", 2)], "g")
    out = op.type_transfer([AbsTensor("float32", [z3.Int("a"), 1])])[0]
    assert all(z3.is_int(d) for d in out.shape)
    again = spec_instance("glu", [("float32", 2)], "h")
    assert again.requires([out])  # builds its constraints on the halved shape
