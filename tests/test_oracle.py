"""The oracle end to end: TestCases judged in real sandboxed workers with real compilers."""

from __future__ import annotations

import pytest
import torch

from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom
from nnforge.oracle.oracle import Oracle
from nnforge.oracle.sandbox import WorkerPool
from programs import LINEAR_SIN

pytestmark = pytest.mark.slow

SMALL = LINEAR_SIN  # a Linear then sin: cheap to compile, floats only

# log of a normal sample is NaN half the time: value search must make x positive first.
NAN_AT_START = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        y = torch.log(x)
        return (y * 2).tanh() + y.exp()

def make_inputs():
    return (-torch.rand(3, 5) - 0.5,)
'''

EAGER_RAISES = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return x @ torch.ones(7, 2)

def make_inputs():
    return (torch.randn(2, 4),)
'''

ABORT_WHEN_COMPILED = '''
import os
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_compiling():
            os.abort()
        return x + 1

def make_inputs():
    return (torch.randn(3),)
'''

LOOP_WHEN_COMPILED = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_compiling():
            while True:
                x = x + 1
        return x + 1

def make_inputs():
    return (torch.randn(3),)
'''

STATE_CHANGES = '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.0
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x) * self.scale

def make_inputs():
    return (torch.randn(4, 4),)
'''


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(size=1, timeout_s=120, memory_mb=6000) as p:
        yield p


def test_value_search_repairs_a_nan_start_and_inductor_then_passes(pool):
    result = Oracle(pool, ["inductor"]).check(TestCase(program=NAN_AT_START))
    assert result.search["success"] and not result.search["initially_finite"]
    assert bool((result.case.inputs[0] > 0).all())  # the chosen values, ready to save
    assert [v.symptom for v in result.verdicts] == [Symptom.PASS], result.verdicts[0].detail
    assert result.values_chosen and result.symptom is Symptom.PASS


def test_a_program_whose_eager_raises_is_invalid_for_every_target(pool):
    result = Oracle(pool, ["eager", "ort"]).check(TestCase(program=EAGER_RAISES))
    assert [v.symptom for v in result.verdicts] == [Symptom.INVALID, Symptom.INVALID]
    assert result.verdicts[0].exc_type == "RuntimeError" and "eager raises" in result.invalid_reason
    assert not result.is_bug


def test_given_values_are_used_and_a_call_sequence_with_state_changes_passes(pool):
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    calls = (CallStep(mode="eval"), CallStep(set_attrs={"scale": 2.5}), CallStep(mode="train", grad_enabled=False))
    result = Oracle(pool, ["eager"]).check(TestCase(program=STATE_CHANGES, inputs=(x,), calls=calls))
    assert result.search is None and not result.values_chosen
    assert torch.equal(result.case.inputs[0], x)
    v = result.verdicts[0]
    assert v.symptom is Symptom.PASS, v.detail  # dropout in train mode: same RNG as eager
    assert not v.stateful


def test_program_aborting_inside_compiled_forward_is_a_segfault(pool):
    result = Oracle(pool, ["eager"], blame_deaths=False).check(TestCase(program=ABORT_WHEN_COMPILED))
    assert result.verdicts[0].symptom is Symptom.SEGFAULT
    assert any(f.file == "program.py" for f in result.verdicts[0].frames)  # faulthandler saw where


def test_planted_abort_is_a_segfault_blamed_on_its_rung_and_the_pool_survives(pool):
    oracle = Oracle(pool, ["faulty_segv", "eager"])
    result = oracle.check(TestCase(program=SMALL))
    segv, eager = result.verdicts
    assert segv.symptom is Symptom.SEGFAULT and segv.rung == "faulty_segv"
    assert "rung in flight: faulty_segv" in segv.detail  # blamed from the worker's log, no reruns
    assert "SIGABRT" in segv.exc_message
    assert eager.symptom is Symptom.PASS  # the next target ran in a fresh worker


def test_infinite_loop_under_compile_is_a_timeout(pool):
    # Last in this module: the restart after the kill is paid by nobody.
    result = Oracle(pool, ["eager"], timeout_s=5).check(TestCase(program=LOOP_WHEN_COMPILED))
    assert result.verdicts[0].symptom is Symptom.TIMEOUT


def test_unsorted_topk_is_compared_as_the_set_it_is():
    """topk(sorted=False) may return its k results in any order: a backend that orders them
    differently is right, one that returns other values is not."""
    import torch

    from nnforge.oracle.compare import TieRecorder, Unordered, compare_outputs

    x = torch.tensor([[3.0, 9.0, 1.0, 7.0, 5.0]])
    with TieRecorder() as rec:
        out = torch.topk(x, 3, sorted=False)
    masks = rec.masks_for(tuple(out))
    assert masks["[0]"] == Unordered(1) and bool(masks["[1]"].all())
    values, indices = out
    shuffled = (values.flip(-1), indices.flip(-1))
    assert compare_outputs(tuple(out), shuffled, tie_masks=masks).ok
    wrong = (torch.tensor([[9.0, 7.0, 3.0]]), indices)
    assert not compare_outputs(tuple(out), wrong, tie_masks=masks).ok
    with TieRecorder() as rec:
        ordered = torch.topk(x, 3, sorted=True)
    assert not compare_outputs(tuple(ordered), (ordered[0].flip(-1), ordered[1]), tie_masks=rec.masks_for(tuple(ordered))).ok


def test_what_is_computed_from_unspecified_indices_is_not_compared_and_the_rest_still_is():
    """An ORT cluster 'wrong result on topk -> matmul' was x @ topk(x, sorted=False).indices: ORT
    returned the same two indices in the other order. Indices of ties (argmax of a constant row)
    are as free: what is computed from them is unspecified; what is not stays compared."""
    import torch

    from nnforge.oracle.compare import TieRecorder, Unspecified, compare_outputs

    x = torch.tensor([8, 7])
    rows = torch.full((2, 4), 3.0)
    with TieRecorder() as rec:
        _, idx = torch.topk(x, 2, sorted=False)
        out = (torch.matmul(x, idx), rows.argmax(1).float() * 2.0, x * 2, torch.tensor([1.0, 5.0]).argmax())
    masks = rec.masks_for(out)
    assert masks["[0]"] == Unspecified() and masks["[1]"] == Unspecified()
    assert "[2]" not in masks and "[3]" not in masks  # not computed from free indices; no tie in [1, 5]
    other_order = (torch.matmul(x, idx.flip(0)), torch.tensor([2.0, 4.0]), x * 2, out[3])
    assert compare_outputs(out, other_order, tie_masks=masks).ok
    assert not compare_outputs(out, (*other_order[:2], x * 3, out[3]), tie_masks=masks).ok


def test_what_is_computed_from_an_undefined_float_to_int_conversion_is_not_compared():
    """A cluster 'bfloat16 -> int32: eager INT_MIN, compiled 0' was an out-of-range conversion,
    which C leaves undefined: eager wraps 300.0 into int8 as 44, Inductor's vectorised code
    saturates it to 127. Such results are unspecified; in-range conversions stay compared."""
    import torch

    from nnforge.oracle.compare import TieRecorder, Unspecified, compare_outputs

    def f(x):
        return x.to(torch.int8) + 1

    x = torch.tensor([300.0, -3.5, 1.5, float("nan"), 7.0, -900.0, 2.0])
    with TieRecorder() as rec:
        eager = (f(x), x.nan_to_num(0.0).abs().clamp(max=100.0).to(torch.int8), x.to(torch.bool))
    compiled = (torch.compile(f, backend="inductor", fullgraph=True)(x), eager[1], eager[2])
    assert not torch.equal(eager[0], compiled[0]), "torch 2.13's vectorised cast saturates, eager's wraps"
    masks = rec.masks_for(eager)
    assert masks == {"[0]": Unspecified()}  # the clamped conversion and the bool one are defined
    assert compare_outputs(eager, compiled, tie_masks=masks).ok
    assert not compare_outputs(eager, (compiled[0], eager[1] + 1, eager[2]), tie_masks=masks).ok
    with TieRecorder() as rec:
        inside = (x.clamp(-100.0, 100.0).nan_to_num(0.0).to(torch.int32), x.nan_to_num(0.0).to(torch.float16).to(torch.int64))
    assert rec.masks_for(inside) == {}  # in range (int64 holds 300 and -900; NaN -> int64 is not, see next)
    with TieRecorder() as rec:
        nan_cast = torch.tensor([float("nan")]).to(torch.int64)
    assert rec.masks_for(nan_cast) == {"": Unspecified()}


def test_a_passing_top_rung_is_the_only_rung_run_and_a_failing_one_is_blamed_by_the_ladder(pool):
    ok = Oracle(pool, ["aot_eager"]).check(TestCase(program=SMALL)).verdicts[0]
    assert ok.symptom is Symptom.PASS
    assert {k for k in ok.timings if k != "reference_s"} == {"aot_autograd_s"}, ok.timings  # Dynamo alone never ran
    bad = Oracle(pool, ["faulty_perturb"]).check(TestCase(program=SMALL)).verdicts[0]
    assert bad.symptom is Symptom.MISMATCH and bad.rung == "faulty_perturb"
    assert "dynamo: pass" in bad.detail and {"dynamo_s", "faulty_perturb_s"} <= set(bad.timings)
    assert bad.detail.index("dynamo") < bad.detail.index("faulty_perturb:")  # the trail reads cheapest first
