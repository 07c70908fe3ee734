"""The training path: a call may run a backward, and its gradients are judged like its outputs,
with real torch.compile, a test-only backend whose backward alone is wrong, and the repro."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from nnforge.core.backward import call_gradients, with_grad_inputs
from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom
from nnforge.oracle.oracle import Oracle
from nnforge.triage.interesting import same_bug
from nnforge.triage.report import issue_title
from nnforge.triage.repro import write_repro
from programs import LINEAR_SIN

SQRT_AT_ZERO = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return (torch.sqrt(x * 0.0),)

def make_inputs():
    return (torch.rand(5) + 0.5,)
'''

IN_PLACE = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        x.mul_(2.0)
        return (x.exp(),)

def make_inputs():
    return (torch.randn(3),)
'''

BACKWARD = (CallStep(backward=True),)


def test_a_backward_step_round_trips_and_older_steps_read_as_forward_only():
    assert CallStep.from_json(CallStep(backward=True).to_json()).backward
    assert CallStep.from_json({}).backward is False and "backward" not in CallStep().to_json()


def test_gradients_are_named_by_input_and_parameter_and_weighted_alike_in_every_run():
    lin = torch.nn.Linear(3, 2)
    args, leaves = with_grad_inputs((torch.randn(4, 3), torch.arange(3)))
    assert set(leaves) == {0} and not args[1].is_floating_point()
    grads = call_gradients(lin, leaves, lin(args[0]), seed=7)
    assert set(grads) == {"input 0", "param weight", "param bias"}
    args2, leaves2 = with_grad_inputs((leaves[0].detach(),))
    again = call_gradients(lin, leaves2, lin(args2[0]), seed=7)
    assert all(torch.equal(grads[k], again[k]) for k in grads)  # the same cotangents from the same seed


def test_a_wrong_gradient_is_a_mismatch_naming_it_and_only_a_backward_sees_it(pool):
    oracle = Oracle(pool, ["faulty_grad_perturb"])
    forward = oracle.check(TestCase(program=LINEAR_SIN)).verdicts[0]
    assert forward.symptom is Symptom.PASS
    v = oracle.check(TestCase(program=LINEAR_SIN, calls=BACKWARD)).verdicts[0]
    assert v.symptom is Symptom.MISMATCH and v.rung == "faulty_grad_perturb"
    assert v.gradient == "param lin.weight" and "gradients" in v.detail and "dynamo: pass" in v.detail
    assert "wrong gradient of param lin.weight" in issue_title(v, TestCase(program=LINEAR_SIN, calls=BACKWARD))
    forward_bug = v.__class__(**{**v.__dict__, "gradient": None})
    assert not same_bug(v, forward_bug)  # a reducer never trades a wrong gradient for a wrong output


@pytest.mark.slow
def test_inductor_backward_agrees_with_eager_and_the_repro_of_a_wrong_gradient_reproduces(pool, tmp_path):
    healthy = Oracle(pool, ["inductor"]).check(TestCase(program=LINEAR_SIN, calls=BACKWARD)).verdicts[0]
    assert healthy.symptom is Symptom.PASS, healthy.detail
    found = Oracle(pool, ["faulty_grad_perturb"]).check(TestCase(program=LINEAR_SIN, calls=BACKWARD))
    repro = tmp_path / "repro.py"
    repro.write_text(write_repro(found.case, found.verdicts[0]))
    run = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 1 and "BUG PRESENT" in run.stdout, run.stdout + run.stderr
    clean = found.case  # the same script against healthy inductor passes
    repro.write_text(write_repro(clean, healthy.__class__(**{**healthy.__dict__, "symptom": Symptom.MISMATCH})))
    run = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_gradient_that_is_not_finite_at_the_values_makes_the_test_invalid_not_a_finding(pool):
    v = Oracle(pool, ["aot_eager"]).check(TestCase(program=SQRT_AT_ZERO, calls=BACKWARD)).verdicts[0]
    assert v.symptom is Symptom.INVALID and "gradient of input 0" in v.detail and "not finite" in v.detail


def test_a_program_writing_into_its_input_stays_valid_under_a_backward(pool):
    v = Oracle(pool, ["aot_eager"]).check(TestCase(program=IN_PLACE, calls=BACKWARD)).verdicts[0]
    assert v.symptom is Symptom.PASS, v.detail


def test_a_gradient_routed_by_the_index_of_tied_values_is_not_compared_and_the_others_are():
    """max(dim) of a constant row sends its gradient to whichever index it chose: another backend
    choosing another is right. The eager reference records that, through the backward too."""
    from nnforge.oracle.backend import Call
    from nnforge.oracle.compare import Unspecified, compare_outputs
    from nnforge.oracle.torch_backends import EagerBackend

    class RowMaxAndSin(torch.nn.Module):
        def forward(self, x, y):
            return (x.max(dim=1).values * 2, y.sin())

    eager = EagerBackend(record=True)
    out = eager.compile_and_run(RowMaxAndSin(), [Call(args=(torch.full((2, 4), 3.0), torch.randn(3)), backward=True)])
    masks = eager.grad_tie_masks[0]
    assert masks == {"['input 0']": Unspecified()}  # input 1's gradient does not depend on a tie
    grads = out[0].grads
    other_choice = {**grads, "input 0": grads["input 0"].flip(1)}
    assert compare_outputs(grads, other_choice, tie_masks=masks).ok
    assert not compare_outputs(grads, {**grads, "input 1": grads["input 1"] + 1}, tie_masks=masks).ok


# -- training sequences -----------------------------------------------------------------------------------
def _train(**kw):
    return CallStep(backward=True, **kw)


def test_training_steps_round_trip_and_contradictions_are_refused():
    step = _train(optimizer="adam", zero_grad=True, param_requires_grad={"lin": False}, retain_graph=True)
    assert CallStep.from_json(step.to_json()) == step
    with pytest.raises(ValueError, match="needs the call's backward"):
        CallStep(optimizer="sgd")
    with pytest.raises(ValueError, match="unknown optimizer"):
        _train(optimizer="lbfgs")
    with pytest.raises(ValueError, match="no_grad"):
        CallStep(backward=True, grad_enabled=False)
    # what older cases said (a no_grad call "with" a backward) is what ran: forward only
    assert CallStep.from_json({"backward": True, "grad_enabled": False}).backward is False
    assert CallStep(grad_enabled=False).with_backward() == CallStep(backward=True)
    assert step.forward_only() == CallStep(zero_grad=True, param_requires_grad={"lin": False})


def test_an_optimizer_sequence_moves_the_parameters_each_step_and_compiled_agrees(pool):
    from nnforge.oracle.backend import Call
    from nnforge.oracle.program_loader import load_program
    from nnforge.oracle.torch_backends import EagerBackend

    module = load_program(LINEAR_SIN, name="train_seq")
    torch.manual_seed(0)
    model = module.Model()
    before = model.lin.weight.detach().clone()
    x = torch.randn(2, 4)
    outs = EagerBackend().compile_and_run(model, [Call(args=(x,), backward=True, optimizer="adam"),
                                                  Call(args=(x,), backward=True, optimizer="adam"), Call(args=(x,))])
    w = [o.state_after["lin.weight"] for o in outs]
    assert not torch.equal(w[0], before) and not torch.equal(w[1], w[0]) and torch.equal(w[2], w[1])
    seq = (_train(optimizer="sgd"), _train(optimizer="sgd", zero_grad=True), CallStep(grad_enabled=False))
    v = Oracle(pool, ["aot_eager"]).check(TestCase(program=LINEAR_SIN, calls=seq)).verdicts[0]
    assert v.symptom is Symptom.PASS, v.detail
    wrong = Oracle(pool, ["faulty_grad_perturb"]).check(TestCase(program=LINEAR_SIN, calls=seq)).verdicts[0]
    assert wrong.symptom is Symptom.MISMATCH and wrong.gradient == "param lin.weight" and wrong.call_index == 0


def test_a_second_backward_through_the_retained_graph_is_compared_and_a_frozen_parameter_has_no_gradient(pool):
    seq = (_train(retain_graph=True),)
    v = Oracle(pool, ["faulty_grad_perturb"]).check(TestCase(program=LINEAR_SIN, calls=seq)).verdicts[0]
    assert v.symptom is Symptom.MISMATCH
    from nnforge.oracle.backend import Call
    from nnforge.oracle.program_loader import load_program
    from nnforge.oracle.torch_backends import EagerBackend
    from nnforge.core.replay import apply_state

    module = load_program(LINEAR_SIN, name="freeze_seq")
    model = module.Model()
    freeze = _train(param_requires_grad={"lin": False})
    outs = EagerBackend().compile_and_run(model, [
        Call(args=(torch.randn(2, 4),), backward=True, retain_graph=True),
        Call(args=(torch.randn(2, 4),), backward=True, before=lambda m: apply_state(freeze, m, module))])
    assert {"param lin.weight (second backward)", "input 0 (second backward)"} <= set(outs[0].grads)
    assert set(outs[1].grads) == {"input 0"}  # lin's parameters no longer require grad


NAN_GRADIENT = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x, y):
        return (torch.sqrt(x) + torch.acos(torch.tanh(20.0 * y)),)

def make_inputs():
    x = torch.rand(4, 4)
    x[0, 0] = 0.0  # sqrt is finite at 0, its slope is not
    return (x, torch.randn(4, 4))
'''


def test_value_search_moves_values_off_a_pole_of_the_derivative_when_the_test_runs_a_backward(pool):
    from nnforge.oracle.value_search import ValueSearch
    from nnforge.oracle.program_loader import load_program

    module = load_program(NAN_GRADIENT, name="nan_gradient")
    model, inputs = module.Model(), module.make_inputs()
    assert ValueSearch(seed=0).run(model, inputs).initially_finite  # the forward alone is fine
    res = ValueSearch(seed=0, backward=True, budget_ms=3000).run(model, inputs)
    assert res.success and not res.initially_finite
    args, leaves = with_grad_inputs(tuple(res.inputs))
    grads = call_gradients(model, leaves, model(*args), seed=0)
    assert all(bool(torch.isfinite(g).all()) for g in grads.values())
    v = Oracle(pool, ["aot_eager"]).check(TestCase(program=NAN_GRADIENT, calls=BACKWARD)).verdicts[0]
    assert v.symptom is Symptom.PASS, v.detail  # judged, not invalid


def test_what_is_computed_from_the_sign_of_a_zero_is_not_compared():
    """copysign(x, y) where y holds a zero: 0.0 == -0.0, and a compiler may make either (a fully
    masked attention row of zeros, x * 0 for a negative x); with no zero there it is compared."""
    from nnforge.oracle.compare import TieRecorder, Unspecified

    x = torch.randn(6)
    with TieRecorder() as rec:
        out = (torch.copysign(x, torch.tensor([1.0, 0.0, -2.0, 3.0, 1.0, 1.0])) * 2,
               torch.copysign(x, torch.tensor([1.0, -4.0, -2.0, 3.0, 1.0, 1.0])) * 2)
    assert rec.masks_for(out) == {"[0]": Unspecified()}


def test_a_gradient_that_is_none_on_one_side_and_zeros_on_the_other_is_the_same_answer():
    from nnforge.oracle.job import unused_as_zero

    exp, act = unused_as_zero({"param w": None, "input 0": torch.ones(2)}, {"param w": torch.zeros(3), "input 0": torch.ones(2)})
    assert torch.equal(exp["param w"], act["param w"])
    exp, act = unused_as_zero({"param w": None}, {"param w": torch.tensor([0.0, 1.0])})
    assert exp["param w"] is None  # a gradient that is not zero where eager has none stays a mismatch
