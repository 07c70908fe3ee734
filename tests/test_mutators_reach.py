"""Mutators reach their category in the compiler: TorchDynamo's own record (mutators/reach.py) of a
mutant shows the category's signal and its seed's does not. Real generator seeds, real Dynamo runs in
sandbox workers (backend recording the captured graphs), real eager validation."""

from __future__ import annotations

import random

import pytest

from nnforge.core.testcase import TestCase
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.mutators.ast_tools import ProgramTree
from nnforge.mutators.base import get_mutator, parse_case
from nnforge.mutators.reach import MEASURE_FN, reach
from nnforge.mutators.sequence import reads_mode
from nnforge.mutators.validate import check_case, eager_probe, payload_for

pytestmark = pytest.mark.slow
FIXED = ("e2_raising_with", "e2_grad_mode_region", "j1_size_branch", "k1_empty_tensors", "i1_input_layout",
         "i1_intermediate_layout")


@pytest.fixture(scope="module")
def seed(pool):
    """The first float generator seed that runs in eager and that every mutator under test applies to."""
    for s in range(20):
        case = generate_case(GeneratorConfig(n_nodes=6, seed=s, dtypes=("float32",)))[0]
        if all(get_mutator(n).applicable(case) for n in FIXED) and check_case(pool.call, case).ok:
            return case
    pytest.fail("no generator seed in 0..19 suits every mutator under test")


@pytest.fixture(scope="module")
def seed_record(pool, seed):
    return measure(pool, seed)


def measure(pool, case: TestCase) -> dict:
    out = pool.call(MEASURE_FN, {**payload_for(case), "reset_run": len(case.calls) > 1})
    assert out.ok, out
    assert out.value["ok"], out.value["error"]
    return out.value


def variants(name: str, case: TestCase, markers: dict[str, str], probe=None) -> dict[str, TestCase]:
    """One mutant per variant, told apart by a marker string in its program."""
    found: dict[str, TestCase] = {}
    for k in range(40):
        m = get_mutator(name).mutate(case, random.Random(k), probe)
        assert m is not None
        kind = next((v for v, mark in markers.items() if mark in m.program), None)
        if kind is not None:
            found.setdefault(kind, m)
        if len(found) == len(markers):
            return found
    pytest.fail(f"{name}: variants {set(markers) - set(found)} never drawn")


def test_raising_with_blocks_flip_grad_mode_that_dynamo_restores_on_the_exception_path(pool, seed, seed_record):
    muts = variants("e2_raising_with", seed, {"try": "finally:", "manager": "__exit__", "generator": "contextmanager"})
    assert seed.calls[0].grad_enabled is False  # a plain no_grad() would leave no trace here
    assert "_set_grad_enabled" not in seed_record["ops"]
    for kind, m in muts.items():
        assert check_case(pool.call, m).ok, kind
        rec = measure(pool, m)
        assert "_set_grad_enabled" in rec["ops"], (kind, rec["ops"])
        assert reach("E2", rec, seed_record), kind


def test_grad_mode_regions_show_in_the_graph_of_an_inference_seed(pool, seed, seed_record):
    for k in range(4):
        m = get_mutator("e2_grad_mode_region").mutate(seed, random.Random(k))
        rec = measure(pool, m)
        assert reach("E2", rec, seed_record), m.program


def test_size_branch_resizes_existing_inputs_so_dynamo_guards_on_the_size_and_recompiles(pool, seed, seed_record):
    m = get_mutator("j1_size_branch").mutate(seed, random.Random(0), eager_probe(pool.call))
    n_inputs = len(get_params(seed))
    changed = {ch.index for st in m.calls for ch in st.inputs if ch.shape is not None}
    assert changed and max(changed) < n_inputs, "the probe path resizes the seed's own inputs"
    assert all(st.grad_enabled is False for st in m.calls)  # no grad-mode flip to muddy the recompiles
    assert check_case(pool.call, m).ok
    rec = measure(pool, m)
    assert rec["recompiles"] >= 1 and rec["symbolic_inputs"] and not seed_record["symbolic_inputs"]
    assert any("size mismatch" in f or "size()" in f for f in rec["guard_failures"]), rec["guard_failures"]
    assert not any("grad_mode" in f for f in rec["guard_failures"])
    assert reach("J1", rec, seed_record)


def test_size_branch_without_a_probe_drives_the_branch_by_a_new_dynamic_input(pool, seed, seed_record):
    m = get_mutator("j1_size_branch").mutate(seed, random.Random(1))
    assert m.meta["dynamic_inputs"] == {str(len(get_params(seed))): [0]}
    assert check_case(pool.call, m).ok
    rec = measure(pool, m)
    assert rec["recompiles"] >= 1 and reach("J1", rec, seed_record)


def test_empty_tensor_variants_put_zero_size_values_in_the_captured_graph(pool, seed, seed_record):
    muts = variants("k1_empty_tensors", seed, {"cat": "torch.cat", "batch": "prod(0", "matmul": "torch.matmul"})
    assert not seed_record["empty_values"]
    for kind, m in muts.items():
        assert check_case(pool.call, m).ok, kind
        rec = measure(pool, m)
        assert rec["empty_values"] and reach("K1", rec, seed_record), kind


def test_input_layouts_survive_the_argument_copy_and_reach_dynamo_non_contiguous(pool, seed, seed_record):
    assert not seed_record["noncontiguous_inputs"]
    for k in range(3):
        m = get_mutator("i1_input_layout").mutate(seed, random.Random(k))
        assert check_case(pool.call, m).ok
        rec = measure(pool, m)
        assert rec["noncontiguous_inputs"] and reach("I1", rec, seed_record), m.meta["layout"]


def test_a_stepped_intermediate_counts_as_a_non_contiguous_value(pool, seed, seed_record):
    rule = get_mutator("i1_intermediate_layout")
    m = next(m for k in range(40) if "::2" in (m := rule.mutate(seed, random.Random(k))).program)
    rec = measure(pool, m)
    assert rec["noncontiguous_values"] > seed_record["noncontiguous_values"] and reach("I1", rec, seed_record)


def test_grad_mode_sequences_reach_and_mode_sequences_need_a_program_that_reads_the_mode(pool, seed):
    g = get_mutator("seq_grad_mode").mutate(seed, random.Random(0))
    rec = measure(pool, g)
    assert rec["recompiles"] >= 1 and any("grad_mode" in f for f in rec["guard_failures"])
    assert reach("stateful", rec, {"ok": True})
    mode = get_mutator("seq_mode")
    assert not mode.applicable(seed) and not reads_mode(get_tree(seed))
    rule = get_mutator("k1_random_ops")
    dropout = next(m for k in range(20) if "self.training" in (m := rule.mutate(seed, random.Random(k))).program)
    assert mode.applicable(dropout) and reads_mode(get_tree(dropout))
    switched = mode.mutate(dropout, random.Random(0))
    rec = measure(pool, switched)
    assert rec["recompiles"] >= 1 and reach("stateful", rec, {"ok": True})


def get_tree(case: TestCase) -> ProgramTree:
    tree = parse_case(case)
    assert tree is not None
    return tree


def get_params(case: TestCase) -> list[str]:
    return get_tree(case).params()
