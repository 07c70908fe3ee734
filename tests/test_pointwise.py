"""Pointwise feasibility: elementwise chains that no single value keeps finite are not built."""

import torch

from nnforge.generator.engine import GeneratorConfig, GraphGenerator
from nnforge.generator.materialize import spec_instance
from nnforge.generator.pointwise import finite_somewhere, lineages, root_grid
from nnforge.generator.spec import all_ops


def _generator(dtype: str):
    ops = all_ops()
    gen = GraphGenerator(GeneratorConfig(n_nodes=1, seed=0))
    x = gen.add_placeholder((dtype, 2))

    def out_of(name, *ins):
        assert gen.insert_forward(ops[name], list(ins)), name
        return gen.nodes[-1].outputs[0]

    return gen, ops, x, out_of


def test_chains_whose_ops_want_disjoint_values_of_one_input_are_refused():
    for dtype in ("float32", "int32"):
        gen, ops, x, out_of = _generator(dtype)
        out_of("xlogy", x, x)  # x * log(x): NaN for x < 0
        neg = out_of("neg", x)
        # log(-x) needs x < 0: each op alone has room, interval facts see no conflict
        assert not gen.insert_forward(ops["log"], [neg]), dtype
        flat = out_of("flatten", neg) if dtype == "int32" else neg
        assert not gen.insert_forward(ops["log"], [flat]), dtype  # a rearrangement keeps every element
        assert gen.insert_forward(ops["acos"], [neg]), dtype  # x in [0, 1] suits both
        assert gen.insert_forward(ops["exp"], [neg])


def test_operands_paired_across_positions_are_not_one_chain():
    f = ("float32", 2)
    reshape = spec_instance("flatten", [f], "a")
    mul = spec_instance("xlogy", [f, ("float32", 1)], "b")
    log = spec_instance("log", [f], "c")
    steps = [(reshape, [0], [1]), (mul, [0, 1], [2]), (log, [0], [3])]
    chains = lineages(steps)
    assert chains[1] == (0, False) and chains[3] == (0, True)
    assert 2 not in chains  # x[i] * log(flatten(x)[j]): two scalars, not one


def test_grid_and_evaluation_follow_the_dtype():
    grid16 = root_grid("float16", float("-inf"), float("inf"), False, None, True, False, False)
    assert grid16.dtype == torch.float16 and bool(torch.isfinite(grid16).all()) and not bool((grid16 == 0).any())
    assert grid16.max() >= 60000  # reaches float16's range, where exp overflows
    ints = root_grid("uint8", 0, 31, True, None, False, False, False)
    assert ints.tolist() == list(range(32))
    f = ("float16", 1)
    exp = spec_instance("exp", [f], "e")
    # exp overflows float16 above ~11: a root bounded below by 12 leaves no finite point
    big = root_grid("float16", 12.0, float("inf"), False, None, True, False, False)
    assert not finite_somewhere([(exp, [0], [1])], 0, big)
    assert finite_somewhere([(exp, [0], [1])], 0, root_grid("float16", 10.0, float("inf"), False, None, True,
                                                             False, False))


def test_values_of_a_small_integer_input_are_followed_exactly_through_its_chain():
    gen, ops, x, out_of = _generator("int8")
    for seed in range(80):  # bitwise_and with a scalar: x & 0 is 0 whatever x: digamma's pole
        gen.rng.seed(seed)
        if gen.insert_forward(ops["bitwise_and"], [x]):
            n = gen.nodes[-1]
            if "scalar" in n.spec.attrs and int(n.spec.attrs["scalar"]) == 0:
                break
    else:
        raise AssertionError("no bitwise_and(x, 0) drawn")
    masked = n.outputs[0]
    assert gen.facts[masked].values == (0.0,)
    as_float = out_of("to_float32", masked)
    assert not gen.insert_forward(ops["digamma"], [as_float]) and not gen.insert_forward(ops["log"], [as_float])
    assert gen.insert_forward(ops["abs"], [as_float])


def test_a_float_that_must_hit_one_exact_value_is_refused_but_a_window_is_not():
    gen, ops, x, out_of = _generator("float32")
    out_of("acos", x)  # x <= 1
    assert not gen.insert_forward(ops["acosh"], [x])  # x >= 1: only x == 1 exactly, never hit by search
    assert gen.insert_forward(ops["acosh"], [out_of("exp", out_of("neg", x))])  # exp(-x) >= 1: x in [-1, 0]
    gen, ops, x, out_of = _generator("float32")
    out_of("atanh", x)
    assert gen.insert_forward(ops["acosh"], [out_of("exp", x)])  # x in [0, 1)


def test_a_step_function_of_a_float_input_is_bounded_by_the_values_it_takes():
    gen, ops, x, out_of = _generator("float32")
    # hypot(x, x) is sqrt(2) |x|: 0 only at x == 0, which search never lands on (interval facts
    # say [0, inf], so sgn in [0, 1]); its sgn is 1 at every point of x's grid
    ones = out_of("sgn", out_of("hypot", x, x))
    assert gen.facts[ones].lo == gen.facts[ones].hi == 1
    mean = out_of("mean", ones)  # a reduction ends the chain; its facts carry the bound on
    assert not gen.insert_forward(ops["atanh"], [mean])  # atanh(1) is inf
    assert gen.insert_forward(ops["atanh"], [out_of("mean", out_of("tanh", x))])


def test_a_root_is_bounded_for_its_other_readers_by_what_its_chain_allows():
    gen, ops, x, out_of = _generator("float64")  # (in float32, exp(-2e-8) rounds to 1)
    out_of("acosh", out_of("exp", x))  # exp(x) >= 1: x >= 0 in any all-finite run
    assert gen.facts[x].lo >= 0
    assert not gen.insert_forward(ops["rsqrt"], [out_of("neg", out_of("mean", x))])  # -mean(x) <= 0
    assert gen.insert_forward(ops["rsqrt"], [out_of("mean", x)])


def test_a_chain_bound_on_a_float_reaches_an_integer_cast_of_it():
    gen, ops, x, out_of = _generator("float32")
    y = gen.add_placeholder(("int64", 1))  # (an int8 would wrap: int8(-200) is 56)
    out_of("rsqrt", out_of("neg", x))  # x < 0
    whole = out_of("type_as", x, y)  # int64(x), <= 0 once x < 0 bounds x for every reader
    assert not gen.insert_forward(ops["lgamma"], [whole])  # lgamma's poles: 0, -1, -2, ...
    assert gen.insert_forward(ops["exp"], [whole])


def test_a_concatenation_bounded_by_its_readers_bounds_its_operands():
    gen, ops, _, out_of = _generator("float32")
    x, y = (gen.add_placeholder(("float32", 2), bin_now=False) for _ in range(2))  # dims free to match
    joined = out_of("cat", x, y)
    out_of("rsqrt", out_of("log", joined))  # log(cat) > 0: every element of x and y above 1
    assert gen.facts[x].lo >= 1 and gen.facts[y].lo >= 1
    assert not gen.insert_forward(ops["erfinv"], [x])  # |x| < 1
    assert gen.insert_forward(ops["acosh"], [y])


def test_a_chain_goes_on_through_ops_that_pick_some_of_its_elements():
    gen, ops, x, out_of = _generator("int64")
    ach = out_of("acosh", x)  # x >= 1
    part = out_of("narrow", ach)  # some of the same elements
    out_of("atanh", out_of("rrelu", part))  # acosh(x) < 1: x = 1 where narrow picks
    assert lineages(gen._steps())[part] == (x, False)
    assert not gen.insert_forward(ops["log"], [ach])  # acosh(x) > 0 needs x >= 2
    assert gen.insert_forward(ops["exp"], [ach])


def test_an_op_whose_domain_dooms_an_op_already_built_is_refused():
    from nnforge.generator.value_facts import value_set

    gen, ops, x, out_of = _generator("int8")
    divisor = out_of("relu", x)  # 0 or more: a divisor with room, while x is free
    y = gen.add_placeholder(("float32", 2), bin_now=False)
    out_of("div_promote", y, divisor)
    neg = out_of("neg", x)
    # acos(-x) leaves x in {-1, 0, 1}: relu(x) would be 0 or 1, a mask no division survives
    assert not gen.insert_forward(ops["acos"], [neg])
    assert value_set(gen.facts[divisor]) is None and len(gen.nodes) == 3
    assert gen.insert_forward(ops["acos"], [out_of("sgn", neg)])  # sgn(-x) is in [-1, 1] whatever x


def test_a_chain_goes_on_through_every_op_the_numerics_say_keeps_elements_but_not_through_indices():
    # eval-mode dropout and pixel shuffles keep every element; a split into one piece keeps them
    # all too; argsort's one result is indices, which are no elements of its operand
    f = ("float32", 3)
    drop = spec_instance("dropout", [f], "a")
    shuffle = spec_instance("pixel_shuffle", [f], "b")
    piece = spec_instance("chunk", [f], "c")
    piece.attrs["n_out"] = 1
    argsort = spec_instance("sort", [f], "d")
    argsort.attrs["fn"] = "argsort"
    chains = lineages([(drop, [0], [1]), (shuffle, [1], [2]), (piece, [2], [3]), (argsort, [3], [4])])
    assert chains[1] == chains[2] == chains[3] == (0, False)
    assert 4 not in chains


def test_evaluating_a_chain_never_hands_an_integer_kernel_the_dtypes_minimum():
    # lcm(INT_MIN, INT_MAX) is a SIGFPE in torch's eager kernel: evaluated in the campaign's parent
    # (the generator runs there), it killed the campaign with no word. In a child, so that a
    # regression fails this test instead of killing the test run.
    import subprocess
    import sys

    code = """if True:
        from nnforge.generator.materialize import spec_instance
        from nnforge.generator.pointwise import chain_values, root_grid
        i = ("int32", 1)
        steps = [(spec_instance("bitwise_not", [i], "a"), [0], [1]),   # ~INT_MIN == INT_MAX
                 (spec_instance("lcm", [i, i], "b"), [0, 1], [2])]
        grid = root_grid("int32", float("-inf"), float("inf"), True, None, False, False, False)
        assert int(grid.min()) == -2**31
        got = chain_values(steps, 0, grid)
        assert got is not None and got[0][2].dtype.is_floating_point is False
        print("evaluated")
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "evaluated" in r.stdout, (r.returncode, r.stderr[-2000:])
