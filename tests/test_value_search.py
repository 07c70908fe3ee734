"""Value search finds values for which no operator of a program yields NaN or Inf."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from nnforge.oracle.value_search import SearchResult, ValueSearch, checked_call, first_nonfinite

# Generous budget: these tests check what is found, not how fast (the suite may share cores).
SEARCH = dict(budget_ms=2000.0, max_iters=300)


def assert_repaired(model: nn.Module, inputs: tuple, res: SearchResult) -> None:
    assert res.success, res
    assert first_nonfinite(model, res.inputs) is None
    assert len(res.inputs) == len(inputs)
    for old, new in zip(inputs, res.inputs):
        if isinstance(old, torch.Tensor):
            assert (new.dtype, new.shape, new.stride()) == (old.dtype, old.shape, old.stride())
            assert new.requires_grad == old.requires_grad


class ArgmaxOfLog(nn.Module):
    def forward(self, x):
        return torch.argmax(torch.log(x))


class WhereLog(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, torch.log(x), torch.zeros_like(x))


def test_nan_hidden_behind_argmax_is_detected_and_repaired():
    model, inputs = ArgmaxOfLog(), (torch.tensor([-1.0, 2.0, -3.0, 0.5]),)
    assert torch.isfinite(model(*inputs).float()).all()  # the output alone looks fine
    assert first_nonfinite(model, inputs) == "log"
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert res.culprit is None and not res.initially_finite and res.method == "gradient"
    assert_repaired(model, inputs, res)
    assert (res.inputs[0] > 0).all()


def test_nan_masked_by_where_is_detected_and_repaired():
    model, inputs = WhereLog(), (torch.tensor([[-1.0, 2.0], [0.0, -0.5]]),)
    assert torch.isfinite(model(*inputs)).all()
    assert first_nonfinite(model, inputs) == "log"
    assert_repaired(model, inputs, ValueSearch(**SEARCH).run(model, inputs))


def test_division_by_value_near_zero_is_repaired():
    class DivShift(nn.Module):
        def forward(self, x):
            return x / (x - 0.5)

    model, inputs = DivShift(), (torch.tensor([0.5, 1.0, 0.5, -2.0]),)
    assert first_nonfinite(model, inputs) == "div"
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert ((res.inputs[0] - 0.5).abs() > 1e-3).all()


def test_sqrt_of_negative_weights_is_repaired_through_parameters():
    class SqrtWeight(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.full((4,), -2.0))

        def forward(self, x):
            return x * torch.sqrt(self.w)

    model = SqrtWeight()
    inputs = (torch.randn(3, 4),)
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert torch.equal(res.inputs[0], inputs[0])  # nothing to change there: no gradient
    assert (model.w > 0).all() and torch.equal(res.state_dict["w"], model.w.detach())
    assert model.w.requires_grad and model.w.grad is None


def test_asin_out_of_range_is_repaired():
    class Asin(nn.Module):
        def forward(self, x):
            return torch.asin(3.0 * x)

    model, inputs = Asin(), (torch.linspace(-2.0, 2.0, 9),)
    assert first_nonfinite(model, inputs) == "asin"
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert (3 * res.inputs[0].abs() <= 1).all()


def test_floor_and_relu_before_log_are_crossed_by_straight_through_gradient():
    class FloorRelu(nn.Module):
        def forward(self, x):
            return torch.log(torch.floor(torch.relu(x)))

    model, inputs = FloorRelu(), (-torch.rand(6) - 0.1,)
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.method == "gradient"  # the true gradient is zero everywhere here
    assert (res.inputs[0] >= 1).all()


def test_comparison_and_int_cast_pass_gradient_through_shadows():
    class Casts(nn.Module):
        def forward(self, x):
            return torch.log((x > 0.3).float() + x.long().float())

    model, inputs = Casts(), (-torch.rand(5),)
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.method == "gradient"


def test_float16_exp_overflow_is_repaired_keeping_dtype():
    class Exp(nn.Module):
        def forward(self, x):
            return torch.exp(x).sum(-1)

    model, inputs = Exp(), (torch.tensor([[20.0, 1.0], [3.0, 30.0]], dtype=torch.float16),)
    assert first_nonfinite(model, inputs) == "exp"
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.inputs[0].dtype == torch.float16
    assert (res.inputs[0].float() < math.log(65504.0)).all()


def test_float16_parameter_is_optimised_through_float32_master():
    class HalfSqrt(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.full((4,), -2.0, dtype=torch.float16))

        def forward(self, x):
            return x * torch.rsqrt(self.w)

    model = HalfSqrt()
    inputs = (torch.ones(4, dtype=torch.float16),)
    assert_repaired(model, inputs, ValueSearch(**SEARCH).run(model, inputs))
    assert model.w.dtype == torch.float16 and (model.w > 0).all()


def test_finite_program_returns_at_once():
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh())
    inputs = (torch.randn(2, 4),)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert res.success and res.iterations == 0 and res.initially_finite
    assert res.method == "none" and res.culprit is None
    assert res.inputs[0] is inputs[0] or torch.equal(res.inputs[0], inputs[0])
    assert all(torch.equal(before[k], v) for k, v in res.state_dict.items())
    assert first_nonfinite(model, inputs) is None


def test_constant_infinity_fails_within_budget_and_restores_parameters():
    class AlwaysInf(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x) + torch.full((3,), float("inf"))

    model = AlwaysInf()
    inputs = (torch.randn(2, 3),)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = ValueSearch(budget_ms=100.0, max_iters=10_000).run(model, inputs)
    assert not res.success and res.culprit == "full"
    assert res.elapsed_ms < 100.0 + 1000.0  # the budget, plus one slow iteration at most
    assert res.iterations > 0
    assert torch.equal(res.inputs[0], inputs[0])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_program_that_raises_is_reported_not_propagated():
    class IntDivZero(nn.Module):
        def forward(self, i):
            return torch.div(i, i - 1, rounding_mode="floor")

    res = ValueSearch(**SEARCH).run(IntDivZero(), (torch.tensor([0, 1, 2]),))
    assert not res.success and res.culprit.startswith("exception: RuntimeError")
    with pytest.raises(RuntimeError):
        first_nonfinite(IntDivZero(), (torch.tensor([0, 1, 2]),))


def test_integer_driven_divisor_is_repaired_by_gradient_on_its_float_shadow():
    class DivByIndex(nn.Module):
        def forward(self, x, i):
            return x / i.float()

    inputs = (torch.randn(4), torch.tensor([0, 1, 2, 3]))
    res = ValueSearch(**SEARCH).run(DivByIndex(), inputs)
    assert_repaired(DivByIndex(), inputs, res)
    assert res.method == "gradient"  # integers descend through a rounded float master
    assert (res.inputs[1] != 0).all() and res.inputs[1].min() >= 0 and res.inputs[1].max() <= 3


def test_integer_input_reaching_log_through_arithmetic_is_repaired():
    # generator programs feed integer inputs straight into log/acos/rsqrt after int arithmetic
    class IntChain(nn.Module):
        def forward(self, a, b):
            return torch.acos(torch.rsqrt(torch.clip(a, min=b)) - 1.0)

    inputs = (torch.tensor([0, 5, 9, 0], dtype=torch.uint8), torch.tensor([0, 0, 3, 15], dtype=torch.uint8))
    assert first_nonfinite(IntChain(), inputs) == "rsqrt"
    res = ValueSearch(**SEARCH).run(IntChain(), inputs)
    assert_repaired(IntChain(), inputs, res)
    assert all(0 <= int(v) <= 15 for t in res.inputs for v in t)


def test_integer_scalar_with_a_single_value_gets_room_to_move():
    class SqrtOfScalar(nn.Module):
        def forward(self, i):
            return torch.sqrt(i - 1)

    inputs = (torch.tensor(-1, dtype=torch.int32),)
    res = ValueSearch(**SEARCH).run(SqrtOfScalar(), inputs)
    assert_repaired(SqrtOfScalar(), inputs, res)
    assert int(res.inputs[0]) >= 1


def test_all_true_mask_is_among_boolean_samples():
    class LgammaOfMask(nn.Module):
        def forward(self, m):
            return torch.lgamma(m.float())  # lgamma(0) = inf: every element must be True

    inputs = (torch.zeros(64, dtype=torch.bool),)
    res = ValueSearch(**SEARCH).run(LgammaOfMask(), inputs)
    assert_repaired(LgammaOfMask(), inputs, res)
    assert bool(res.inputs[0].all())


def test_running_variance_behind_detach_is_repaired():
    class EvalNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.mean = nn.Parameter(torch.zeros(4))

        def forward(self, x, v):
            return F.batch_norm(x, self.mean.detach(), torch.floor(v).detach(), training=False)

    inputs = (torch.randn(2, 4), torch.tensor([-2.0, 1.0, -0.5, 3.0]))
    assert first_nonfinite(EvalNorm(), inputs) == "batch_norm"
    res = ValueSearch(**SEARCH).run(EvalNorm(), inputs)
    assert_repaired(EvalNorm(), inputs, res)


def test_control_flow_containers_and_inplace_ops():
    class Messy(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)

        def forward(self, xs, cfg):
            out = []
            for x in xs:
                if x.sum() > 0:
                    y = x.clone()
                    y.sub_(cfg["shift"]).sqrt_()
                else:
                    y = self.bn(x).log()
                out.append(y)
            x0 = xs[0]
            x0.mul_(2.0)  # mutates its input: the search must work on copies
            return {"ys": out, "n": len(out)}

    model = Messy()
    xs = [torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.1, 0.2]]), -torch.rand(4, 3)]
    inputs = (xs, {"shift": 2.5})
    snapshot = [x.clone() for x in xs]
    bn_before = model.bn.running_mean.clone()
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert res.success, res
    assert all(torch.equal(a, b) for a, b in zip(snapshot, xs))  # caller's tensors untouched
    assert torch.equal(model.bn.running_mean, bn_before)  # buffers as they were
    assert first_nonfinite(model, res.inputs) is None


def test_output_only_nonfinite_and_checked_call():
    class Identity(nn.Module):
        def forward(self, x):
            return x

    assert first_nonfinite(Identity(), (torch.tensor([1.0, float("nan")]),)) == "output"
    out, culprit = checked_call(WhereLog(), (torch.tensor([-1.0, 2.0]),))
    assert culprit == "log" and torch.isfinite(out).all()  # the run is complete, not cut short


def test_same_seed_gives_the_same_values():
    def fresh():
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(4, 4), nn.Softplus())

        class Wrap(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = model

            def forward(self, x, y):
                return torch.log(self.inner(x) - 1.0) / (y - 0.25)

        return Wrap(), (torch.randn(3, 4), torch.full((3, 1), 0.25))

    results = []
    for seed in (7, 7):
        model, inputs = fresh()
        res = ValueSearch(budget_ms=10_000.0, max_iters=300, seed=seed).run(model, inputs)
        assert_repaired(model, inputs, res)
        results.append(res)
    a, b = results
    assert a.iterations == b.iterations and a.method == b.method
    assert all(torch.equal(x, y) for x, y in zip(a.inputs, b.inputs))
    assert all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict)


def test_same_seed_gives_the_same_samples():
    class DivByMask(nn.Module):
        def forward(self, x, m):
            return x / (m.float() - 1.0)  # booleans are only ever resampled

    inputs = (torch.randn(6), torch.tensor([False, True, False, True, True, False]))
    a, b = (ValueSearch(**SEARCH, seed=3).run(DivByMask(), inputs) for _ in range(2))
    assert a.success and a.method == "sampling"
    assert a.iterations == b.iterations
    assert all(torch.equal(x, y) for x, y in zip(a.inputs, b.inputs))


def test_gamma_poles_are_left_without_forcing_positive_values():
    class Gamma(nn.Module):
        def forward(self, x):
            return torch.lgamma(x) + torch.digamma(x - 1)

    inputs = (torch.tensor([-1.0, -2.0, 0.0, -1.5, 3.0]),)
    assert first_nonfinite(Gamma(), inputs) == "lgamma"
    res = ValueSearch(**SEARCH).run(Gamma(), inputs)
    assert_repaired(Gamma(), inputs, res)
    assert res.inputs[0][3] == -1.5  # negative non-integers are inside the domain: left alone


def test_log1p_behind_threshold_is_repaired_through_its_flat_side():
    # F.threshold reaches the interceptor as `_threshold`; it must still pass gradient straight through.
    class ThresholdLog(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(8))

        def forward(self, x):
            return torch.log1p(F.threshold(self.w, 2.0, -2.0)) + x

    model, inputs = ThresholdLog(), (torch.randn(8),)
    assert first_nonfinite(model, inputs) == "log1p"
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert res.success and res.method == "gradient", res
    assert (model.w > 2.0).all()


def test_failure_is_classified_and_constant_operands_are_diagnosed():
    from nnforge.oracle.value_search import FAILURE_CLASSES, diagnose

    class RsqrtOfZero(nn.Module):
        def forward(self, x):
            return torch.rsqrt(x - x) + torch.log(x)

    model, inputs = RsqrtOfZero(), (torch.rand(5) + 0.5,)
    res = ValueSearch(budget_ms=100.0, max_iters=40).run(model, inputs)
    assert not res.success and res.culprit == "rsqrt"
    assert res.failure in FAILURE_CLASSES and res.to_json()["failure"] == res.failure
    assert diagnose(model, inputs) == ("constant operand", "rsqrt")
    # A repairable program is not diagnosed as hopeless.
    assert diagnose(ArgmaxOfLog(), (torch.tensor([-1.0, 2.0, -3.0, 0.5]),)) is None


def test_unsigned_scalar_widens_down_to_zero_for_acos():
    # a lone uint8 12 must reach {0, 1}: its widened range includes the small values
    class AcosOfByte(nn.Module):
        def forward(self, i):
            return torch.acos(i) + torch.remainder(torch.sinc(i.float()), torch.sinc(i.float()))

    inputs = (torch.tensor(12, dtype=torch.uint8),)
    res = ValueSearch(**SEARCH).run(AcosOfByte(), inputs)
    assert_repaired(AcosOfByte(), inputs, res)
    assert int(res.inputs[0]) in (0, 1)  # outside 4..20, the range a +-8 widening gave


def test_bitwise_ops_pass_gradient_to_their_integer_operand():
    class RsqrtOfOr(nn.Module):
        def forward(self, v):
            return torch.rsqrt((v | 0).float()) + torch.log2((~v).float().neg())

    inputs = (torch.tensor([-8, -3, 0, 2, 5, 7, -1, 4], dtype=torch.int64),)
    assert first_nonfinite(RsqrtOfOr(), inputs) == "rsqrt"
    res = ValueSearch(**SEARCH).run(RsqrtOfOr(), inputs)
    assert_repaired(RsqrtOfOr(), inputs, res)
    assert bool((res.inputs[0] > 0).all())


def test_sweep_gives_two_integer_inputs_different_narrow_ranges():
    # no gradient reaches either input (equality tests): only discrete draws, one input at a
    # time, find a == 0 everywhere and b >= 1 everywhere
    class TwoMasks(nn.Module):
        def forward(self, a, b):
            return torch.lgamma((a == 0).float()) + torch.log((b >= 1).float())

    inputs = (torch.tensor([3, -2, 5, 1, -7, 0], dtype=torch.int32), torch.tensor([-4, 6, 0, 2, 8, -3], dtype=torch.int32))
    res = ValueSearch(**SEARCH).run(TwoMasks(), inputs)
    assert_repaired(TwoMasks(), inputs, res)
    assert bool((res.inputs[0] == 0).all()) and bool((res.inputs[1] >= 1).all())


def test_sign_of_a_bitwise_not_passes_gradient_straight_through():
    # digamma(sign(~v)) needs ~v > 0, i.e. v <= -1 ... and sign(~v) == 1 means v <= -2
    class SignNot(nn.Module):
        def forward(self, v):
            return torch.digamma(torch.sign(~v))

    inputs = (torch.tensor([3, -1, 0, 5, -7, 2, 8, -2]),)
    res = ValueSearch(**SEARCH).run(SignNot(), inputs)
    assert_repaired(SignNot(), inputs, res)
    assert bool((res.inputs[0] <= -2).all())


def test_several_results_of_an_integer_op_carry_shadows():
    # cummax returns (values, indices): the values need the float input's gradient, which only
    # a per-result shadow carries (no draw from the sampling ranges reaches 4)
    class CummaxLog(nn.Module):
        def forward(self, x):
            return torch.log(torch.cummax(x.long(), 0).values.float() - 3.5)

    inputs = (torch.zeros(6),)
    res = ValueSearch(**SEARCH).run(CummaxLog(), inputs)
    assert_repaired(CummaxLog(), inputs, res)
    assert res.method == "gradient"


def test_integer_dtype_arguments_and_integer_casts_keep_the_shadow():
    class CumsumLog(nn.Module):
        def forward(self, x):
            return torch.log(torch.cumsum(x.long().to(torch.int16), 0, dtype=torch.int32).float() - 1.5)

    inputs = (torch.zeros(6),)
    res = ValueSearch(**SEARCH).run(CumsumLog(), inputs)
    assert_repaired(CumsumLog(), inputs, res)
    assert res.method == "gradient"


def test_op_that_refuses_gradient_operands_runs_without_them_and_keeps_its_loss():
    # the straight-through `detach` hands batch_norm running statistics that require grad, which
    # it refuses; the op reruns on detached operands, and its loss still reaches the variance
    class NormOfRunningVar(nn.Module):
        def __init__(self):
            super().__init__()
            self.mean = nn.Parameter(torch.zeros(3))
            self.var = nn.Parameter(-torch.ones(3))

        def forward(self, x):
            return F.instance_norm(x, self.mean.detach(), self.var.detach(), use_input_stats=False)

    model, inputs = NormOfRunningVar(), (torch.randn(2, 3, 4),)
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.method == "gradient" and bool((model.var + 1e-5 > 0).all())  # var + eps > 0


def test_a_step_that_breaks_an_earlier_operator_is_taken_back_and_shortened():
    # sqrt(x - 1) then log(1.3 - sqrt(...)): x must land in [1, 2.56); from 20..60 the log's
    # steps overshoot below 1 unless they are shortened
    class Window(nn.Module):
        def forward(self, x):
            return torch.log(1.3 - torch.sqrt(x - 1.0))

    inputs = (torch.linspace(20.0, 60.0, 64),)
    res = ValueSearch(**SEARCH).run(Window(), inputs)
    assert_repaired(Window(), inputs, res)


def test_flat_gradient_of_tanhshrink_in_bfloat16_gets_an_identity_floor():
    # tanhshrink(x) = x - tanh(x) rounds to 0 in bfloat16 for |x| < ~0.05, and so does its
    # gradient: rsqrt needs x clearly positive, i.e. w clearly negative, which only a floor
    # under that gradient reaches (no sampling range gives all 12 the same sign)
    class RsqrtTanhshrink(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.full((12,), 0.01, dtype=torch.bfloat16))

        def forward(self, x):
            return x * torch.rsqrt(F.tanhshrink(self.w / -2.5))

    model, inputs = RsqrtTanhshrink(), (torch.ones(12, dtype=torch.bfloat16),)
    res = ValueSearch(**SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert bool((model.w < 0).all()) and model.w.dtype == torch.bfloat16


def test_integer_shadow_carries_the_integer_values_not_the_float_ones():
    # digamma(int8(x)) for x in (0, 1): the cast gives 0, digamma's pole. A shadow equal to x
    # (0.3, well off any pole) would hide that; the shadow must read 0 and push x up to 1
    class DigammaOfInt8(nn.Module):
        def forward(self, x):
            return torch.digamma(x.to(torch.int8))

    inputs = (torch.linspace(0.05, 0.9, 16),)
    res = ValueSearch(**SEARCH).run(DigammaOfInt8(), inputs)
    assert_repaired(DigammaOfInt8(), inputs, res)
    assert bool((res.inputs[0] >= 1).all()) and res.method == "gradient"


def test_integer_op_without_derivative_passes_gradient_straight_through():
    # heaviside has no autograd formula: its shadow must not be differentiated (the backward
    # would raise and no step could be taken); log needs x >= 5 (heaviside(x, x) + x - 5 > 0),
    # far above what integer draws over 64 elements give all at once
    class HeavisideLog(nn.Module):
        def forward(self, x):
            return torch.log(torch.heaviside(x, x) + x - 5)

    inputs = (torch.arange(-8, 8, dtype=torch.int32).repeat(4),)
    res = ValueSearch(**SEARCH).run(HeavisideLog(), inputs)
    assert_repaired(HeavisideLog(), inputs, res)
    assert bool((res.inputs[0] >= 5).all())


def test_integer_input_is_held_when_its_unit_step_breaks_an_earlier_operator():
    # acosh(y - acos(i)): i = 1 is right (acos(1) = 0), y must rise to 1. The infinite
    # slope of acos at 1 kicks i to 2 (acos NaN) on every step unless i is held while y moves
    class AcoshMinusAcos(nn.Module):
        def forward(self, i, y):
            return torch.acosh(y - torch.acos(i))

    inputs = (torch.tensor(1), torch.linspace(-0.9, 0.9, 24).to(torch.bfloat16))
    res = ValueSearch(**SEARCH).run(AcoshMinusAcos(), inputs)
    assert_repaired(AcoshMinusAcos(), inputs, res)
    assert int(res.inputs[0]) == 1 and bool((res.inputs[1] >= 1).all())


def test_steps_lengthen_when_the_domain_is_far_away():
    # log(x - 60): x must travel from about 0 to 60, hundreds of steps of the base length
    # (and far outside every sampling range); steps that double while the loss falls slowly get
    # there in a few dozen
    class FarLog(nn.Module):
        def forward(self, x):
            return torch.log(x - 60.0)

    inputs = (torch.linspace(-1.0, 1.0, 8).to(torch.bfloat16),)
    res = ValueSearch(**SEARCH).run(FarLog(), inputs)
    assert_repaired(FarLog(), inputs, res)
    assert res.iterations < 60


# -- gradient stand-ins for operators whose own gradient is missing or points the wrong way


class GroupNormBiasOnly(nn.Module):
    """log needs the bias above every standardised value; group_norm's backward raises when it
    has a bias but no weight, so the gradient must reach the bias some other way."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.tensor([0.5, -1.0, 0.2, 1.0]))

    def forward(self, x):
        return torch.log10(F.group_norm(x, 4, None, self.bias, eps=1e-12))


class FloorDivideByNegative(nn.Module):
    """x // -1 grows as x falls: an identity straight-through gradient pushes x the wrong way."""

    def __init__(self, rounding: bool):
        super().__init__()
        self.rounding = rounding

    def forward(self, x):
        q = torch.div(x, -2.0, rounding_mode="floor") if self.rounding else x // -1.0
        return torch.log(q)


class FmodNeedsLargerDivisor(nn.Module):
    """acosh(fmod(x, d)) needs fmod >= 1, so d > 1: fmod's true derivative in d, -trunc(x / d),
    pulls d down whenever x > d."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(1.3))

    def forward(self, x):
        return torch.acosh(torch.fmod(x, torch.log1p(torch.acosh(self.w))))


@pytest.mark.parametrize("seed", [0, 1])
def test_group_norm_bias_without_weight_is_reached_by_the_gradient(seed):
    torch.manual_seed(seed)
    model, inputs = GroupNormBiasOnly(), (torch.randn(3, 4, 7),)
    res = ValueSearch(seed=seed, **SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.method == "gradient"
    assert bool((model.bias > 0).all())  # each group has positive standardised values to lift


@pytest.mark.parametrize("rounding", [False, True])
def test_floor_divide_by_negative_moves_its_operand_down(rounding):
    model, inputs = FloorDivideByNegative(rounding), (torch.rand(16) + 0.5,)
    res = ValueSearch(seed=0, **SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert bool((res.inputs[0] < 0).all())


def test_fmod_result_that_must_grow_grows_the_divisor():
    torch.manual_seed(0)
    model, inputs = FmodNeedsLargerDivisor(), (torch.rand(16) + 0.2,)
    res = ValueSearch(seed=0, **SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert float(model.w.detach()) > 2.8  # log1p(acosh(w)) > 1 needs w > cosh(e - 1)


class BatchNormOfIntegers(nn.Module):
    """atanh(expm1(.)) of standardised integers needs them crowded around their channel's mean
    (the 0.1 eps then keeps the standardised values small), digamma needs none exactly at it: a
    long, steady descent of one-unit integer steps, longer than `max_descent`."""

    def forward(self, x):
        e = torch.expm1(F.batch_norm(x.float(), None, None, training=True, eps=0.1))
        return torch.atanh(e), torch.digamma(e)


# (Which draws descend in one go is luck: of seeds 1-6, three do. Without the longer descent,
# none does.)
@pytest.mark.parametrize("seed", [2, 3])
def test_descent_that_keeps_lowering_its_loss_runs_past_max_descent(seed):
    torch.manual_seed(seed)
    model, inputs = BatchNormOfIntegers(), (torch.randint(0, 16, [16, 15, 14], dtype=torch.uint8),)
    # (iterations bound the search, not time: a loaded machine must not end the descent early)
    res = ValueSearch(seed=seed, budget_ms=20000.0, max_iters=SEARCH["max_iters"]).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.method == "gradient"


class ErfinvOfSteepPower(nn.Module):
    """x ** -80 at x ~ 0.6: slopes near 1e20, whose squares overflow Adam's float32 moment."""

    def forward(self, x):
        return torch.erfinv(torch.pow(x, -80.0))


def test_steep_gradients_still_move_the_values():
    torch.manual_seed(0)
    model, inputs = ErfinvOfSteepPower(), (torch.full([4], 0.6) + 0.05 * torch.rand(4),)
    res = ValueSearch(seed=0, max_iters=40, budget_ms=2000.0).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.method == "gradient"  # one descent, no resampling


class LogitOfBatchNormWithDetachedStatistics(nn.Module):
    """batch_norm refuses a gradient on its running statistics (reached here through detach):
    its weight and bias must keep theirs, since only they can bring every output into (0, 1)."""

    def __init__(self):
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(3))
        self.var = nn.Parameter(torch.ones(3))
        self.weight = nn.Parameter(torch.full([3], 2.0))
        self.bias = nn.Parameter(torch.full([3], 0.5))

    def forward(self, x):
        y = F.batch_norm(x, self.mean.detach(), self.var.detach(), weight=self.weight, bias=self.bias,
                         training=True, momentum=1.0)
        return torch.logit(y)


def test_op_refusing_some_gradient_operands_keeps_the_others():
    torch.manual_seed(0)
    model, inputs = LogitOfBatchNormWithDetachedStatistics(), (torch.randn(16, 3),)
    res = ValueSearch(seed=0, max_iters=60, budget_ms=2000.0).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.method == "gradient"
    assert float(model.weight.abs().max()) < 0.5  # repaired through the weight


class TanOfGatheredIntegers(nn.Module):
    """tan(k) of integers k must lie in (-1, 1) and not be 0: k in {+-3, +-6, +-7, ...}, which
    no sub-range draws; the gradient reaches k through gather although the index has a shadow
    (it comes from an integer input) too."""

    def forward(self, a, i):
        k = torch.gather(a, 0, torch.remainder(i, a.size(0)))
        t = torch.tan(k)
        q = torch.div(t, t, rounding_mode="floor")
        return q, torch.erfinv(t)


def test_gradient_reaches_integer_data_through_an_integer_index():
    torch.manual_seed(0)
    model = TanOfGatheredIntegers()
    inputs = (torch.randint(-8, 9, [8, 5]), torch.randint(-8, 9, [6, 5]))
    # Resampling alone needs some 45 iterations (a lucky draw); descending, about 10.
    res = ValueSearch(seed=0, max_iters=20, budget_ms=2000.0).run(model, inputs)
    assert_repaired(model, inputs, res)


class LogOfAtan2OnExactZeros(nn.Module):
    """log(atan2(0, w)) is finite only where w < 0 (atan2(0, w) = pi). atan2's true slope in w is
    0 where y is exactly 0, so only the proxy gradient can pull w across."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(12) + 0.5)

    def forward(self, x):
        y = torch.erfinv(torch.heaviside(x, torch.zeros(())))  # exactly 0 wherever x <= 0
        return torch.log(torch.atan2(y, self.w))


def test_atan2_with_an_exactly_zero_numerator_moves_its_denominator():
    model, inputs = LogOfAtan2OnExactZeros(), (-torch.rand(12) - 0.5,)
    res = ValueSearch(seed=0, **SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert bool((model.w.detach() < 0).all())


class LgammaOfNegatedInteger(nn.Module):
    """lgamma(-i) is finite only for i <= -1; log(digamma(j)) only for j >= 2."""

    def forward(self, i, j):
        return torch.lgamma(torch.neg(i)), torch.log(torch.digamma(j))


def test_integer_inputs_reach_values_beyond_the_few_they_were_drawn_with():
    # Two zeros (of randint(-8, 9)) and a span of [-6, 1] say nothing about where the values
    # may go: i must turn negative, j must pass 2.
    inputs = (torch.zeros(2, dtype=torch.int8), torch.tensor([-2, -6, 0, 1, 1, 0, 0, -3]))
    assert first_nonfinite(LgammaOfNegatedInteger(), inputs) == "lgamma"
    res = ValueSearch(**SEARCH).run(LgammaOfNegatedInteger(), inputs)
    assert_repaired(LgammaOfNegatedInteger(), inputs, res)
    assert bool((res.inputs[0] <= -1).all()) and bool((res.inputs[1] >= 2).all())


class AcoshOfFlooredByte(nn.Module):
    """acosh(uint8(w) // 3) needs w >= 3; `div(..., rounding_mode="floor")` of the float shadow
    has a gradient of 0, so only a stand-in (w / 3) moves w."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(6, dtype=torch.float64) * 2.0)

    def forward(self, x):
        return torch.acosh(torch.div(self.w.to(torch.uint8), 3, rounding_mode="floor")) + x


class ErfinvOfReciprocalFloor(nn.Module):
    """erfinv(1.0 // w) is finite only for w > 1 (1.0 // w is then 0): the divisor is the only
    operand with a gradient."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(8) * 0.5 + 0.4)

    def forward(self, x):
        return torch.erfinv(1.0 // self.w) + x


@pytest.mark.parametrize("case", [
    # floor division of an integer cast's float shadow (its own slope is 0) moves the float
    (AcoshOfFlooredByte, torch.randn(6), "acosh", lambda m: True),
    # floor division of a constant moves the divisor, the only operand with a gradient
    (ErfinvOfReciprocalFloor, torch.randn(8), "erfinv", lambda m: bool((m.w.detach() > 1.0).all())),
], ids=["integer-cast-dividend", "constant-dividend"])
def test_floor_division_passes_the_quotient_slope_to_what_can_move(case):
    cls, x, culprit, moved = case
    torch.manual_seed(0)
    model, inputs = cls(), (x,)
    assert first_nonfinite(model, inputs) == culprit
    res = ValueSearch(seed=0, **SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.method == "gradient" and moved(model)


class LgammaOfSaturatedClamp(nn.Module):
    """softshrink(hardtanh(w, -2, -1), 1) lies in [-1, 0]; lgamma needs it off both ends, i.e.
    w in (-2, -1). Wherever w >= -1 it is exactly 0, a pole: pushed up (the default way off a
    pole) the clamp never lets it go; only down does."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        return torch.lgamma(F.softshrink(F.hardtanh(self.w, -2.0, -1.0), 1.0)) + x


@pytest.mark.parametrize("seed", [0, 1])
def test_value_exactly_on_a_pole_behind_a_clamp_leaves_it_the_way_the_clamp_allows(seed):
    torch.manual_seed(seed)
    model, inputs = LgammaOfSaturatedClamp(), (torch.randn(16),)
    assert first_nonfinite(model, inputs) == "lgamma"
    res = ValueSearch(seed=seed, **SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    w = model.w.detach()
    assert bool(((w > -2.0) & (w < -1.0)).all())


class LogOfTanOfClampedValues(nn.Module):
    """tan is positive on [-2, -1] only below its pole at -pi/2: values just above it (tan very
    negative) are sent up by tan's slope, into the clamp at -1, and stay negative there."""

    def forward(self, x):
        return torch.log(torch.tan(F.hardtanh(x, -2.0, -1.0)))


class LogOfReciprocal(nn.Module):
    """1 / x changes sign only across its pole at 0: its slope sends a negative x off to -inf."""

    def forward(self, x):
        return torch.log(torch.reciprocal(x))


class LogOfConstantOverWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-2.0, -0.5, 6))

    def forward(self, x):
        return torch.log(2.0 / self.w) + x


@pytest.mark.parametrize("model, inputs", [
    (LogOfTanOfClampedValues(), (torch.linspace(-1.5, -0.5, 12, dtype=torch.float64),)),
    (LogOfReciprocal(), (torch.linspace(-2.0, -0.5, 12),)),
    (LogOfConstantOverWeight(), (torch.zeros(6),)),
], ids=["tan", "reciprocal", "divisor"])
def test_descent_crosses_a_pole_when_its_slope_leads_away(model, inputs):
    res = ValueSearch(seed=0, **SEARCH).run(model, inputs)
    assert_repaired(model, inputs, res)
    assert res.method == "gradient"  # one descent, turned across the pole: no resampling


def test_lone_integer_reaches_beyond_the_range_it_was_drawn_around():
    # softshrink(i // -7, 1) is non-zero only for i <= -14; a scalar drawn as 3 moves within
    # [-8, 11] by its draw bounds, but the generator's facts let it reach [-16, 16]
    class LogOfShrunkQuotient(nn.Module):
        def forward(self, i):
            return torch.log(F.softshrink((i // -7).float(), 1.0))

    inputs = (torch.tensor(3),)
    res = ValueSearch(seed=0, **SEARCH).run(LogOfShrunkQuotient(), inputs)
    assert_repaired(LogOfShrunkQuotient(), inputs, res)
    assert int(res.inputs[0]) <= -14


def test_values_that_reach_a_closed_bound_exactly_settle_there():
    # acosh(sin(x)) needs sin(x) >= 1: only bfloat16's rounding of sin near its peak to exactly
    # 1 gets there. A margin beyond 1 would keep pushing every value, and Adam's normalised
    # steps would jitter them back off the peak for hundreds of steps
    class AcoshOfSine(nn.Module):
        def forward(self, x):
            return torch.acosh(torch.sin(x.expand(8, 8, 8)))

    inputs = (torch.linspace(-2.0, 2.0, 8).to(torch.bfloat16),)
    res = ValueSearch(seed=0, budget_ms=2000.0, max_iters=100).run(AcoshOfSine(), inputs)
    assert_repaired(AcoshOfSine(), inputs, res)
    assert res.method == "gradient"


def test_lengthened_step_that_overshoots_a_narrow_domain_is_taken_back():
    # erfinv(100 + x) needs x within 1 of -100: doubled steps get there in a few dozen, then
    # overshoot the domain by more than its width; walked back at the base length, with the
    # steps doubling again on the way, they overshoot it again and again
    class ErfinvFarAway(nn.Module):
        def forward(self, x):
            return torch.erfinv(100.0 + x)

    torch.manual_seed(0)
    inputs = (torch.randn(16, dtype=torch.float64),)
    res = ValueSearch(seed=0, **SEARCH).run(ErfinvFarAway(), inputs)
    assert_repaired(ErfinvFarAway(), inputs, res)
    assert res.method == "gradient"


class AcoshOfClipToWeight(nn.Module):
    """acosh(clip(x, max=m)) needs the bound m >= 1 as much as x: the straight-through
    gradient that stands in for the clamp's must leave m its own."""

    def __init__(self) -> None:
        super().__init__()
        self.m = nn.Parameter(torch.linspace(-1.0, 0.5, 6))

    def forward(self, x):
        return torch.acosh(torch.clip(x, max=self.m))


@pytest.mark.parametrize("x", [torch.tensor([2.0]), torch.linspace(1.5, 3.0, 6)], ids=["broadcast", "same-shape"])
def test_clamp_bound_tensors_keep_their_gradient(x):
    model = AcoshOfClipToWeight()
    res = ValueSearch(seed=0, **SEARCH).run(model, (x,))
    assert_repaired(model, (x,), res)
    assert res.method == "gradient" and bool((model.m >= 1).all())


class DivisorThroughAKink(nn.Module):
    """1 / k(floor(x)) with k = abs or square: exactly 0, with a zero slope, for x in [0, 1)."""

    def __init__(self, kink):
        super().__init__()
        self.kink = kink

    def forward(self, x):
        return torch.reciprocal(self.kink(torch.floor(x)))


@pytest.mark.parametrize("kink", [torch.abs, torch.square])
def test_a_divisor_at_the_kink_of_abs_or_square_is_moved_off_it(kink):
    model, inputs = DivisorThroughAKink(kink), (torch.full((64,), 0.5),)
    res = ValueSearch(seed=0, budget_ms=2000.0, max_iters=25).run(model, inputs)
    assert_repaired(model, inputs, res)


class FarPlateau(nn.Module):
    """rsqrt(-x // 100): finite only for x <= -100; the quotient is flat (0) all the way there."""

    def forward(self, x):
        return torch.rsqrt(torch.floor_divide(torch.neg(x), 100.0))


def test_a_descent_crosses_a_wide_plateau_of_a_step_function():
    model, inputs = FarPlateau(), (torch.full((16,), -0.5),)
    res = ValueSearch(seed=0, budget_ms=2000.0, max_iters=30).run(model, inputs)
    assert_repaired(model, inputs, res)


class AddcdivByZero(nn.Module):
    """c + 0 * (c / floor(x)): NaN (0 * inf) wherever floor(x) is 0, whatever the value; only
    the divisor can move."""

    def forward(self, x):
        c = torch.full_like(x, 0.88)
        return torch.addcdiv(c, c, torch.floor(x), value=0.0)


def test_addcdiv_with_a_zero_divisor_moves_the_divisor_even_with_value_zero():
    model, inputs = AddcdivByZero(), (torch.full((64,), 0.5),)
    res = ValueSearch(seed=0, budget_ms=2000.0, max_iters=25).run(model, inputs)
    assert_repaired(model, inputs, res)


def test_an_integer_input_of_many_elements_reaches_as_far_as_a_lone_one():
    # expm1(i + 100) overflows float32 unless i <= -12: beyond the [-8, 8] its draws span, within
    # the [-16, 16] the generator's facts count on for any integer input
    class ExpOfShiftedIntegers(nn.Module):
        def forward(self, i):
            return torch.expm1(i + 100)

    torch.manual_seed(0)
    inputs = (torch.randint(-8, 9, [8, 16], dtype=torch.int32),)
    res = ValueSearch(seed=0, **SEARCH).run(ExpOfShiftedIntegers(), inputs)
    assert_repaired(ExpOfShiftedIntegers(), inputs, res)
    assert int(res.inputs[0].max()) <= -12


class AcosOfWrappedDifference(nn.Module):
    """acos(x - 7) with x uint8: below 7 the difference wraps to 249..255, and a domain loss read
    there would pull x down, further from 7 and 8, the only values that work."""

    def forward(self, x):
        return torch.acos(x - 7)


def test_a_narrow_integer_that_wraps_is_moved_the_way_back_into_range():
    torch.manual_seed(0)
    inputs = (torch.randint(0, 16, [10, 15, 3], dtype=torch.uint8),)
    res = ValueSearch(seed=0, budget_ms=2000.0, max_iters=60).run(AcosOfWrappedDifference(), inputs)
    assert_repaired(AcosOfWrappedDifference(), inputs, res)
    assert res.method == "gradient"


class LogOfSignbit(nn.Module):
    """log(signbit(x)): finite only where every x is negative; signbit has no slope of its own."""

    def forward(self, x):
        return torch.log(torch.signbit(x).to(torch.float32))


def test_signbit_passes_its_operand_a_gradient_as_a_comparison_with_zero_does():
    torch.manual_seed(0)
    inputs = (torch.randn(64),)
    res = ValueSearch(seed=0, budget_ms=20000.0, max_iters=60).run(LogOfSignbit(), inputs)
    assert_repaired(LogOfSignbit(), inputs, res)
    assert res.method == "gradient"


class OpsWithoutSlopes(nn.Module):
    """nextafter has a zero derivative, and logit with eps is flat where it clamps (x > 1 - eps):
    acosh needs nextafter(log10(x), .) >= 1, asin needs logit(y, eps) <= 1."""

    def forward(self, x, y):
        return torch.acosh(torch.nextafter(torch.log10(x), x)), torch.asin(torch.logit(y, eps=1e-3))


def test_ops_with_no_slope_of_their_own_still_lead_to_their_operand():
    inputs = (torch.full((5,), 2.0, dtype=torch.float64), torch.full((5,), 3.0))
    res = ValueSearch(seed=0, budget_ms=20000.0, max_iters=200).run(OpsWithoutSlopes(), inputs)
    assert_repaired(OpsWithoutSlopes(), inputs, res)
    assert res.method == "gradient"
