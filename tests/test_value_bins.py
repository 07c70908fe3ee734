"""Value bins: each test's values come from a bin (all positive, ties, constant, ...) whose
property value search keeps while it repairs NaN/Inf, so bugs that depend on the values, not on
the graph, are in reach: an integer amin that starts from 0 is wrong only on all-positive rows."""

from __future__ import annotations

import pytest
import torch

from nnforge.agent.scheduler import Scheduler
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.oracle.oracle import Oracle
from nnforge.oracle.program_loader import load_program, unload_program
from nnforge.oracle.value_bins import BINS, FAMILIES, NORMAL, apply_family, bin_for, describe_tensor, plan_holds
from nnforge.oracle.value_search import ValueSearch
from nnforge.triage.report import values_line
from nnforge.triage.value_need import needs_its_values


def _leaves(model: torch.nn.Module, inputs: tuple, plan) -> list[tuple[object, torch.Tensor]]:
    from torch.utils._pytree import tree_flatten

    flat, _ = tree_flatten(tuple(inputs))
    params = dict(model.named_parameters())
    return [(b, flat[i]) for i, b in plan.inputs.items()] + [(b, params[n]) for n, b in plan.params.items()]


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != NORMAL])
def test_each_bin_draws_values_with_its_property_on_generator_programs(family):
    binned = 0
    for seed in range(6):
        case, _ = generate_case(GeneratorConfig(n_nodes=6, seed=seed))
        module = load_program(case.program, name=f"vb_{family}_{seed}")
        try:
            torch.manual_seed(seed)
            model = module.Model()
            inputs, plan = apply_family(family, model, tuple(module.make_inputs()), seed)
            for b, t in _leaves(model, inputs, plan):
                assert b.name == family or b is bin_for(family, t), (b.name, family)
                assert b.holds(t), f"{family} bin {b.kind}:{b.name} drew values without its property: {t}"
                binned += 1
            assert all(plan_holds(plan, model, inputs).values())
        finally:
            unload_program(module)
    assert binned >= 3  # a program with a leaf of a kind the family bins has at least one binned


def test_the_normal_family_leaves_the_programs_own_values():
    case, _ = generate_case(GeneratorConfig(n_nodes=5, seed=3))
    module = load_program(case.program, name="vb_normal")
    try:
        torch.manual_seed(0)
        made = tuple(module.make_inputs())
        inputs, plan = apply_family(NORMAL, module.Model(), made, 0)
        assert plan.leaves() == {} and all(a is b for a, b in zip(inputs, made))
    finally:
        unload_program(module)


class LogShifted(torch.nn.Module):
    def forward(self, x):
        return (torch.log(x + 0.5),)


def test_value_search_keeps_a_negative_input_negative_while_it_repairs_a_log():
    # drawn from the negative bin, x is mostly below -0.5, where log(x + 0.5) is NaN: the repair
    # must bring every value into (-0.5, 0) without crossing 0
    model = LogShifted()
    torch.manual_seed(0)
    inputs, plan = apply_family("negative", model, (torch.randn(64),), seed=1)
    assert plan.inputs[0].name == "negative" and bool((inputs[0] < -0.5).any())
    res = ValueSearch(seed=1).run(model, inputs, plan=plan)
    assert res.success and res.bins_kept and res.method != "none"
    x = res.inputs[0]
    assert bool((x < 0).all()), "value search left the negative bin"
    assert bool(torch.isfinite(torch.log(x + 0.5)).all())


class IntLogAndCount(torch.nn.Module):
    def forward(self, i):
        return (torch.log(i.float() - 3.0), i.amin(1))


def test_value_search_keeps_integers_positive_and_constants_constant():
    model = IntLogAndCount()
    for family, holds in (("positive", lambda t: bool((t > 0).all())),
                          ("constant", lambda t: int(torch.unique(t).numel()) == 1)):
        inputs, plan = apply_family(family, model, (torch.randint(-8, 9, (4, 16), dtype=torch.int32),), seed=2)
        res = ValueSearch(seed=2).run(model, inputs, plan=plan)
        assert res.success and res.bins_kept, family
        assert holds(res.inputs[0]), (family, res.inputs[0])
        assert bool((res.inputs[0] > 3).all())  # log(i - 3) is finite


class Impossible(torch.nn.Module):
    def forward(self, x):
        return (torch.log(x),)


def test_a_program_that_cannot_be_finite_inside_its_bin_falls_back_to_a_wider_one():
    model = Impossible()
    inputs, plan = apply_family("negative", model, (torch.randn(8),), seed=0)
    res = ValueSearch(budget_ms=3000, seed=0).run(model, inputs, plan=plan)
    assert res.success and not res.bins_kept
    assert bool((res.inputs[0] > 0).all())


AMIN_ROWS = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return (x.amin(dim=1),)

def make_inputs():
    return (torch.randint(-8, 9, (6, 16), dtype=torch.int32),)
'''


@pytest.mark.slow
def test_a_fault_on_all_positive_rows_is_found_with_value_bins_and_not_without(pool):
    without = [Oracle(pool, ["faulty_amin_zero_init"], 200.0, seed=s).check(TestCase(program=AMIN_ROWS)).verdicts[0]
               for s in range(3)]
    assert all(v.symptom is Symptom.PASS for v in without), [v.detail for v in without]
    assert all(v.value_bin == "normal" for v in without)
    found = Oracle(pool, ["faulty_amin_zero_init"], 200.0).check(TestCase(program=AMIN_ROWS, meta={"value_bin": "positive"}))
    v = found.verdicts[0]
    assert v.symptom is Symptom.MISMATCH and v.value_bin == "positive", v.detail
    assert found.case.meta["values"]["bin"] == "positive" and found.case.meta["values"]["kept"]
    line = values_line(found.case, v)
    assert line is not None and "all positive" in line and "`positive`" in line
    # triage asks whether the bug needs such values: with a default draw the fault stays silent
    assert needs_its_values(pool, found.case, v, timeout_s=60, value_search_budget_ms=200.0) is True
    assert "did not show" in values_line(found.case, v, {"values_needed": True})


def test_the_scheduler_learns_which_value_bin_pays_and_persists_it():
    s = Scheduler(["generator"], [], ["inductor"], value_bins=FAMILIES, seed=0)
    for _ in range(60):
        b = s.pick_bin()
        assert b in FAMILIES
        s.reward_bin(b, 1.0 if b == "ties" else 0.0)
    picks = [s.pick_bin() for _ in range(40)]
    assert picks.count("ties") > 20
    again = Scheduler(["generator"], [], ["inductor"], value_bins=FAMILIES, seed=1)
    again.restore(s.to_json())
    assert again.bins["ties"].pulls == s.bins["ties"].pulls > 0
    off = Scheduler(["generator"], [], ["inductor"], seed=0)
    assert off.pick_bin() is None


def test_what_a_report_says_about_values_is_read_from_the_values():
    assert describe_tensor(torch.tensor([3, 1, 2, 7], dtype=torch.int32)) == ["all positive"]
    assert describe_tensor(torch.full((4, 4), 2.5)) == ["all equal"]
    assert "exact integers and halves" in describe_tensor(torch.tensor([0.5, -1.0, 2.0, 1.5]))
    assert describe_tensor(torch.tensor([True, True])) == ["all true"]
    assert describe_tensor(torch.tensor([-1.0, 2.3])) == []
    assert all(f"{b.kind}:{b.name}" in BINS for b in BINS.values())
