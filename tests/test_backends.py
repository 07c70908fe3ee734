"""Comparison rules, backends and blame ladders, run in-process with real compilers.

The job module loads programs into the current directory, so every test that runs one chdirs
to a temporary folder first.
"""

from __future__ import annotations

import pytest
import torch

from nnforge.core.verdict import Symptom
from nnforge.oracle.backend import Call, parse_target, target_names
from nnforge.oracle.compare import TieRecorder, compare_outputs, compare_tensors, default_tolerance
from nnforge.oracle.job import run_case

CONV_MATMUL = '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.weight = torch.nn.Parameter(torch.randn(6, 5))

    def forward(self, x):
        y = self.conv(x).relu()
        z = y @ self.weight
        return z, z.sum(-1).argmax(-1)

def make_inputs():
    return (torch.randn(2, 3, 8, 8),)
'''


# -- compare.py on synthetic tensors ---------------------------------------------------------------
def test_float16_result_closer_to_float64_than_eager_is_not_a_bug():
    exact = torch.linspace(-3, 3, 64, dtype=torch.float64)
    eager = (exact + 0.01).to(torch.float16)  # eager is off by 1e-2: outside float16 tolerance
    compiled = exact.to(torch.float16)  # the compiled value is as exact as float16 allows
    assert not bool(torch.allclose(eager.double(), compiled.double(), rtol=1e-3, atol=1e-5))
    assert compare_tensors(eager, compiled, fp64=exact).ok
    # ... but a compiled result further from float64 than eager is a mismatch, with the evidence.
    worse = (exact - 0.05).to(torch.float16)
    c = compare_tensors(eager, worse, fp64=exact)
    assert c.symptom is Symptom.MISMATCH
    assert c.fp64_rmse_actual > 2 * c.fp64_rmse_eager
    # Without float64 evidence tolerances alone decide.
    assert compare_tensors(eager, compiled).symptom is Symptom.MISMATCH


def test_argmax_ties_are_not_compared_but_other_positions_are():
    x = torch.tensor([[1.0, 5.0, 5.0], [2.0, 0.0, 1.0]])
    with TieRecorder() as rec:
        idx = x.argmax(dim=1)
    masks = rec.masks_for((idx,))
    assert masks["[0]"].tolist() == [True, False]
    other_tie_choice = torch.tensor([2, 0])  # row 0 ties between 1 and 2: either is right
    assert compare_outputs((idx,), (other_tie_choice,), tie_masks=masks).ok
    wrong = torch.tensor([1, 2])  # row 1 has a unique maximum at 0
    assert compare_outputs((idx,), (wrong,), tie_masks=masks).symptom is Symptom.MISMATCH
    assert compare_outputs((idx,), (other_tie_choice,)).symptom is Symptom.MISMATCH  # no mask: exact


def test_nan_positions_are_compared_on_their_own():
    e = torch.tensor([1.0, float("nan"), float("inf")])
    assert compare_tensors(e, e.clone()).ok
    assert compare_tensors(e, torch.tensor([1.0, 0.5, float("inf")])).symptom is Symptom.NAN_MISMATCH
    assert compare_tensors(e, torch.tensor([1.0, float("nan"), float("-inf")])).symptom is Symptom.NAN_MISMATCH
    # Eager overflowed where float64 did not; the compiled value agrees with float64: not a bug.
    r = torch.tensor([1.0, 2.0, 70000.0], dtype=torch.float64)
    eager16 = torch.tensor([1.0, 2.0, float("inf")], dtype=torch.float16)
    compiled16 = torch.tensor([1.0, 2.0, 65504.0], dtype=torch.float16)
    assert compare_tensors(eager16, compiled16, fp64=r).symptom is Symptom.NAN_MISMATCH  # 65504 is not 70000
    assert compare_tensors(torch.tensor([1.0, float("inf")]), torch.tensor([1.0, 3.0]),
                           fp64=torch.tensor([1.0, 3.0], dtype=torch.float64)).ok


def test_integers_exact_structure_shape_and_dtype_must_match():
    a = {"n": 3, "t": (torch.tensor([1, 2, 3]), torch.ones(2))}
    assert compare_outputs(a, {"n": 3, "t": (torch.tensor([1, 2, 3]), torch.ones(2))}).ok
    c = compare_outputs(a, {"n": 3, "t": (torch.tensor([1, 2, 4]), torch.ones(2))})
    assert c.symptom is Symptom.MISMATCH and c.path == "['t'][0]" and c.max_abs_err == 1.0
    assert not compare_outputs(a, {"n": 4, "t": a["t"]}).ok
    assert "structure" in compare_outputs(a, {"n": 3, "t": (a["t"][0],)}).detail
    assert "shape" in compare_tensors(torch.ones(2, 3), torch.ones(3, 2)).detail
    assert "dtype" in compare_tensors(torch.ones(2), torch.ones(2, dtype=torch.float64)).detail
    tol = default_tolerance(torch.float32)
    assert compare_tensors(torch.ones(4), torch.ones(4) + tol.atol / 2).ok
    # int16(1 / x), x bfloat16: eager rounds the reciprocal to bfloat16 first
    eager, compiled = torch.tensor([32000, 7], dtype=torch.int16), torch.tensor([32149, 7], dtype=torch.int16)
    assert compare_tensors(eager, compiled, fp64=torch.tensor([32126, 7], dtype=torch.int16)).ok
    assert not compare_tensors(eager, compiled, fp64=torch.tensor([31990, 7], dtype=torch.int16)).ok  # eager nearer
    assert not compare_tensors(eager, compiled, fp64=eager.clone()).ok  # integer arithmetic: float64 is eager


# -- registries and backends ----------------------------------------------------------------------------
def test_targets_resolve_to_ladders_and_test_faults_stay_hidden():
    assert {"inductor", "aot_eager", "eager", "ort", "tvm"} <= set(target_names())
    assert not any(n.startswith("faulty") for n in target_names())
    assert [b.name for b in parse_target("inductor").ladder()] == ["dynamo", "aot_autograd", "inductor"]
    assert [b.name for b in parse_target("ort").ladder()] == ["onnx_export", "ort_kernels", "ort_optimizer"]
    assert [b.name for b in parse_target("tvm").ladder()] == ["onnx_export", "tvm_frontend", "tvm_pipeline"]
    t = parse_target("faulty_crash:sin")
    assert t.params == {"op": "sin"} and [b.name for b in t.ladder()] == ["dynamo", "faulty_crash"]
    assert parse_target("inductor:dynamic=true,mode=max-autotune-no-cudagraphs").params["dynamic"] is True
    with pytest.raises(ValueError, match="does not understand"):
        parse_target("ort:dynamic=true")
    with pytest.raises(ValueError, match="unknown target"):
        parse_target("nope")


def test_compiled_backend_runs_an_invocation_sequence_with_state_changes():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 1.0

        def forward(self, x):
            return x * self.scale

    def set_scale(m):
        m.scale = 3.0

    calls = [Call(args=(torch.ones(3),)), Call(args=(torch.ones(3),), before=set_scale)]
    for backend in parse_target("eager").ladder():
        outs = backend.compile_and_run(M(), calls)
        assert [o.outputs.tolist() for o in outs] == [[1.0] * 3, [3.0] * 3]
        outs = backend.compile_and_run(M(), calls, reset_each_call=True)
        assert outs[1].outputs.tolist() == [3.0] * 3


# -- whole ladders through the in-worker job (run here in-process) --------------------------------------
@pytest.mark.slow
def test_ort_and_tvm_pass_a_conv_matmul_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run_case({"program": CONV_MATMUL, "targets": ["ort", "tvm"], "calls": [{"grad_enabled": False}]})
    assert res["status"] == "ok", res["reason"]
    by_target = {v["target"]: v for v in res["verdicts"]}
    assert by_target["ort"]["symptom"] == "pass", by_target["ort"]["detail"]
    assert by_target["tvm"]["symptom"] == "pass", by_target["tvm"]["detail"]
    assert [o["rung"] for o in res["rungs"]["ort"]] == ["onnx_export", "ort_kernels", "ort_optimizer"]
    assert [o["rung"] for o in res["rungs"]["tvm"]] == ["onnx_export", "tvm_frontend", "tvm_pipeline"]
    assert by_target["ort"]["versions"]["ort_kernels"] and by_target["tvm"]["versions"]["tvm_pipeline"]


@pytest.mark.slow
def test_planted_perturbation_is_a_mismatch_blamed_on_its_rung(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run_case({"program": CONV_MATMUL, "targets": ["faulty_perturb", "faulty_perturb:sin"],
                    "calls": [{"grad_enabled": False}]})
    perturbed, untriggered = (v for v in res["verdicts"])
    assert perturbed["symptom"] == "mismatch" and perturbed["rung"] == "faulty_perturb"
    assert perturbed["call_index"] == 0 and perturbed["output_index"] == 0
    assert perturbed["fp64_rmse_actual"] > perturbed["fp64_rmse_eager"]
    assert untriggered["symptom"] == "pass"  # the program has no sin: the fault does not fire


@pytest.mark.slow
def test_planted_lowering_crash_keeps_its_type_message_and_location(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run_case({"program": CONV_MATMUL, "targets": ["faulty_crash:convolution"], "calls": [{"grad_enabled": False}]})
    v = res["verdicts"][0]
    assert v["symptom"] == "crash" and v["rung"] == "faulty_crash"
    assert v["exc_type"] == "RuntimeError" and v["exc_message"] == "faulty_crash: no lowering for aten.convolution"
    assert v["frames"][-1]["function"] == "lower_faulty_op"
    assert res["rungs"]["faulty_crash:convolution"][0]["symptom"] == "pass"  # dynamo alone is fine


# -- blame.py --------------------------------------------------------------------------------------------
def test_first_failing_rung_is_blamed_and_skipped_rungs_judge_nothing():
    from nnforge.oracle.blame import RungOutcome, blame, blame_death

    outcomes = [RungOutcome("onnx_export", skipped="no reference kernel for Foo"),
                RungOutcome("ort_kernels"),
                RungOutcome("ort_optimizer", Symptom.MISMATCH, call_index=0, output_index=1, max_abs_err=0.5)]
    v = blame("ort", outcomes)
    assert (v.symptom, v.rung, v.output_index) == (Symptom.MISMATCH, "ort_optimizer", 1)
    assert "onnx_export: skipped" in v.detail and set(v.timings) == {"onnx_export_s", "ort_kernels_s", "ort_optimizer_s"}
    assert blame("ort", outcomes[:2]).symptom is Symptom.PASS
    noisy = RungOutcome("inductor", detail="rounding noise: within 4x the spread of perturbed eager runs")
    assert blame("inductor", [noisy]).detail == "inductor: pass (rounding noise: within 4x the spread of perturbed eager runs)"
    export_crash = RungOutcome("tvm_frontend", Symptom.CRASH, blamed_rung="onnx_export")
    assert blame("tvm", [export_crash]).rung == "onnx_export"
    # with the export a gate in front of the system under test, its failures are no findings
    gated = blame("tvm", [export_crash], gates=("onnx_export",))
    assert (gated.symptom, gated.rung) == (Symptom.INVALID, "onnx_export") and gated.detail.startswith("not exportable")
    ref_mismatch = RungOutcome("onnx_export", Symptom.MISMATCH, call_index=0, max_abs_err=2.0)
    assert blame("ort", [ref_mismatch], gates=("onnx_export",)).symptom is Symptom.INVALID
    tvm_bug = RungOutcome("tvm_frontend", Symptom.MISMATCH, call_index=0, max_abs_err=2.0)
    assert blame("tvm", [RungOutcome("onnx_export"), tvm_bug], gates=("onnx_export",)).symptom is Symptom.MISMATCH
    died = blame("inductor", [])
    died = type(died)(target="inductor", symptom=Symptom.SEGFAULT)
    assert blame_death(died, [("dynamo", Symptom.PASS), ("aot_autograd", Symptom.SEGFAULT)]).rung == "aot_autograd"
    assert blame_death(died, [("dynamo", Symptom.PASS), ("inductor", Symptom.PASS)]).rung == "inductor"


_PROGRAM_WITH = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return ({expr},)

def make_inputs():
    return (torch.randint(-3, 4, [2, 5], dtype=torch.int16),)
"""


def test_an_exported_model_that_breaks_onnx_typing_is_not_exportable_never_a_finding_against_ort(tmp_path, monkeypatch):
    """The TorchScript exporter writes Acos on int16 (eager promotes to float first); ORT refuses
    the model, but the exporter is at fault, and unsupported exports are not bugs at all."""
    monkeypatch.chdir(tmp_path)
    res = run_case({"program": _PROGRAM_WITH.format(expr="torch.acos(x.clamp(-1, 1))"), "targets": ["ort"],
                    "calls": [{"grad_enabled": False}]})
    verdict = res["verdicts"][0]
    # the program never reached ORT: invalid for the target ("not exportable"), never a finding against it
    assert (verdict["symptom"], verdict["rung"]) == ("invalid", "onnx_export"), verdict
    assert verdict["detail"].startswith("not exportable")
    assert "Acos" in verdict["exc_message"] and "int16" in verdict["exc_message"]

    res = run_case({"program": _PROGRAM_WITH.format(expr="torch.bitwise_or(x, x)"), "targets": ["ort"],
                    "calls": [{"grad_enabled": False}]})
    assert res["verdicts"][0]["symptom"] == "invalid", res["verdicts"][0]


_NARROWING = """
import torch

class Model(torch.nn.Module):
    def forward(self, x, n):
        h = x.to(torch.float16) * 3.3
        return (h.float().half() + torch.erf(n), torch.softmax(x, 0, dtype=torch.bfloat16))

def make_inputs():
    return (torch.randn(64), torch.arange(4).reshape(4, 1))
"""


def test_the_float64_run_is_float64_through_explicit_casts_and_default_dtype(tmp_path, monkeypatch):
    """Explicit narrowing casts inside forward must not round the precision reference (else eager
    looks exact and any backend that keeps more precision looks like a bug); integer math that
    promotes to the default dtype must not break the float64 run either."""
    from nnforge.core.calls import SINGLE_CALL
    from nnforge.oracle.job import Program, run_reference

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    prog = Program(source=_NARROWING, inputs=(torch.randn(64), torch.arange(4).reshape(4, 1)), state_dict={},
                   steps=SINGLE_CALL)
    ref = run_reference(prog)
    assert ref.fp64 is not None, "the float64 run failed"
    eager, exact = ref.outputs[0].outputs, ref.fp64[0].outputs
    assert [t.dtype for t in exact] == [torch.float64, torch.float64]
    assert [t.dtype for t in eager] == [torch.float32, torch.bfloat16]  # float16 + erf(int) promotes to float32
    assert float((eager[0].double() - exact[0]).abs().max()) > 0  # eager's rounding is not the reference
    assert torch.get_default_dtype() == torch.float32  # restored


def test_float16_one_rounding_at_the_output_magnitude_is_precision_but_ten_is_not():
    exact = torch.ones(16, dtype=torch.float64)
    eager = exact.to(torch.float16)
    ulp = float(torch.finfo(torch.float16).eps)
    one_off = eager.clone()
    one_off[0] = 1 + 2 * ulp  # outside rtol=1e-3 at that element, but one rounding's worth over the output
    assert compare_tensors(eager, one_off, fp64=exact).ok
    far = (exact + 10 * ulp).to(torch.float16)
    assert compare_tensors(eager, far, fp64=exact).symptom is Symptom.MISMATCH


_HALF_SUM = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return (x.expand(4, 1, 4, 2).sum(dim=(-3, 2, -4, -1)),)

def make_inputs():
    return (torch.tensor([-2.1797, 0.5684], dtype=torch.float16),)
"""

_HALF_LOST_UPDATE = """
import torch
import torch.nn.functional as F

class Model(torch.nn.Module):
    def forward(self, x, w):
        var = torch.tanh(w) + 1.5
        y = F.batch_norm(x, torch.zeros_like(var), var.detach(), training=True, momentum=0.5)
        return (y, torch.sigmoid(var))

def make_inputs():
    return (torch.linspace(-2, 2, 21).to(torch.float16).reshape(3, 7), torch.linspace(-1, 1, 7).to(torch.float16))
"""


@pytest.mark.slow
def test_float16_rounding_of_a_native_backend_is_precision_but_a_lost_update_is_a_bug(tmp_path, monkeypatch):
    """TVM sums 32 halves in float16 and lands 4 roundings from eager (which accumulates in
    float32): precision, not a bug. But an exporter that drops batch_norm's in-place update of
    a running_var that the program reads afterwards is wrong by far more than float16 rounding,
    and is blamed on the exporter, however low the precision."""
    monkeypatch.chdir(tmp_path)
    res = run_case({"program": _HALF_SUM, "targets": ["tvm"], "calls": [{"grad_enabled": False}]})
    v = res["verdicts"][0]
    assert v["symptom"] == "pass", v
    assert "tvm_frontend: skipped" in v["detail"] and "-25.84375" in v["detail"], v["detail"]

    res = run_case({"program": _HALF_LOST_UPDATE, "targets": ["ort"], "calls": [{"grad_enabled": False}]})
    v = res["verdicts"][0]
    assert (v["symptom"], v["rung"]) == ("invalid", "onnx_export"), v  # the exporter's question, not ORT's
    assert "disagrees with eager already in onnx.reference" in v["detail"]


# -- rounding-noise evidence (oracle/rounding_noise.py) ----------------------------------------------
def test_nan_against_inf_is_a_mismatch_unless_rounding_gives_eager_that_kind_there():
    """NaN vs -inf is compared (inductor's softshrink(NaN) = 0 turns eager's NaN into -inf after a
    log: lost NaN propagation, not precision). It passes only where a jittered eager run produced
    the compiled kind at that position (rounding moved an intermediate across a domain edge)."""
    from nnforge.oracle.rounding_noise import NoiseBand

    inf, nan = float("inf"), float("nan")
    eager = torch.tensor([nan, 1.0, -inf])
    compiled = torch.tensor([-inf, 1.0, -inf])
    assert compare_tensors(eager, compiled).symptom is Symptom.NAN_MISMATCH
    band = NoiseBand.observe(eager, [torch.tensor([-inf, 1.0, -inf]), eager.clone()])
    c = compare_tensors(eager, compiled, noise=band)
    assert c.ok and "rounding" in c.detail, c
    for other in (inf, 0.5):  # a kind, or a finite value, that no jittered run produced there
        c = compare_tensors(eager, torch.tensor([other, 1.0, -inf]), noise=band)
        assert c.symptom is Symptom.NAN_MISMATCH, c
    # finite values: within NOISE_MULTIPLIER times the jittered spread, and not beyond
    from nnforge.oracle.rounding_noise import NOISE_MULTIPLIER

    x = torch.linspace(1, 2, 8)
    band = NoiseBand.observe(x, [x + 1e-3, x - 5e-4])
    assert compare_tensors(x, x + (NOISE_MULTIPLIER - 0.5) * 1e-3, noise=band).ok
    assert compare_tensors(x, x + (NOISE_MULTIPLIER + 1) * 1e-3, noise=band).symptom is Symptom.MISMATCH


def test_integer_outputs_pass_only_within_the_values_that_rounding_gave_eager_there():
    from nnforge.oracle.rounding_noise import ExactBand

    eager = torch.tensor([57, 3, 9])
    band = ExactBand.observe(eager, [torch.tensor([56, 3, 9]), eager.clone()])
    assert compare_tensors(eager, torch.tensor([56, 3, 9])).symptom is Symptom.MISMATCH
    assert compare_tensors(eager, torch.tensor([56, 3, 9]), noise=band).ok
    for wrong in ([55, 3, 9], [57, 4, 9]):  # outside what rounding gives; exact where rounding moves nothing
        assert compare_tensors(eager, torch.tensor(wrong), noise=band).symptom is Symptom.MISMATCH
    # int16 of a bfloat16 near -6112 (one ulp 32): rounding gives -6112 or -6144, a float32
    # intermediate (Inductor does not round between fused ops) gives a value between them
    cast = torch.tensor([-6112, 99], dtype=torch.int16)
    band = ExactBand.observe(cast, [torch.tensor([-6144, 99], dtype=torch.int16), cast.clone()])
    assert compare_tensors(cast, torch.tensor([-6121, 99], dtype=torch.int16), noise=band).ok
    for wrong in ([-6145, 99], [-6112, 98]):
        assert compare_tensors(cast, torch.tensor(wrong, dtype=torch.int16), noise=band).symptom is Symptom.MISMATCH
    flags = torch.tensor([True, False])
    band = ExactBand.observe(flags, [torch.tensor([True, True])])
    assert compare_tensors(flags, torch.tensor([True, True]), noise=band).ok
    assert compare_tensors(flags, torch.tensor([False, False]), noise=band).symptom is Symptom.MISMATCH


_JITTER_PROBES = """
import torch
import torch.nn.functional as F

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x, w, k):
        y = self.conv(x).relu().sum(-1)
        noisy = x[0, 0, 0] + torch.rand(8)
        edge = torch.log(F.softshrink(torch.log1p(w), 1.0))
        return y, y.argmax(-1), noisy, edge, torch.floor(k * 4), (k * 4).long()

def make_inputs():
    return (torch.randn(2, 3, 8, 8), torch.tensor([-0.6328125, 0.5], dtype=torch.bfloat16),
            torch.tensor([0.25, 0.5, 1.0, 2.75]))
"""


def test_jittered_eager_runs_move_rounding_only_and_cross_a_domain_edge(tmp_path, monkeypatch):
    """On a program that does not amplify rounding the spread stays within a few ulps; random ops
    draw what eager drew (the jitter has its own generator); exact results (floor, small
    integers) are not moved; and a log1p that rounds to exactly -1 in bfloat16 (softshrink gives
    0, log -inf) is pushed one ulp below by the all-down run, which gives NaN there."""
    from nnforge.core.calls import SINGLE_CALL
    from nnforge.oracle.job import Program, run_reference

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 8, 8), torch.tensor([-0.6328125, 0.5], dtype=torch.bfloat16),
              torch.tensor([0.25, 0.5, 1.0, 2.75]))
    prog = Program(source=_JITTER_PROBES, inputs=inputs, state_dict={}, steps=SINGLE_CALL)
    ref = run_reference(prog)
    noise = ref.rounding_noise()
    assert noise is not None and noise.runs == 8 and noise.moved_ops > 0
    bands = noise.for_part(0, "output")
    y = ref.outputs[0].outputs[0]
    conv = bands["[0]"]
    assert 0 < float(conv.spread.max()) <= 64 * torch.finfo(torch.float32).eps * float(y.abs().max())
    assert bool((bands["[1]"].values == y.argmax(-1)).all())  # no flipped argmax without a near tie
    assert float(bands["[2]"].spread.max()) < 1e-5  # torch.rand drew the same numbers in every run
    edge = bands["[3]"]
    assert float(ref.outputs[0].outputs[3][0]) == float("-inf") and bool(edge.nan[0]) and not bool(edge.nan[1])
    assert float(bands["[4]"].spread.max()) == 0.0  # floor of exact products: nothing to move
    assert bool((bands["[5]"].values == torch.tensor([1, 2, 4, 11])).all())  # exact: no truncation flips


_AMPLIFIED = """
import torch
import torch.nn.functional as F

class Model(torch.nn.Module):
    def forward(self, base, x):
        e = F.lp_pool1d(x, 0.5, 7, stride=1)  # bfloat16, ~30-64: one ulp is 0.25
        return (x.float() * 3 + 1, base ** e)

def make_inputs():
    base = torch.tensor([[1.14, 6.03, 1.62, 8.46, 10.33, 4.85], [9.16, 3.28, 2.58, 8.81, 1.45, 6.07]], dtype=torch.float64)
    x = torch.tensor([[0.98046875, 0.453125, 1.8515625, 0.384765625, 1.0390625, 1.3515625, 0.70703125,
                       1.6875, 1.0390625, 1.4765625, 2.078125, 0.65625],
                      [1.6953125, 0.55078125, 0.32421875, 1.46875, 0.546875, 0.63671875, 0.55078125,
                       1.0390625, 0.220703125, 0.6015625, 0.83984375, 1.5703125]], dtype=torch.bfloat16)
    return (base, x)
"""


@pytest.mark.slow
def test_bfloat16_rounding_amplified_into_a_float64_output_is_precision_but_a_planted_fault_is_not(tmp_path, monkeypatch):
    """Inductor keeps the bfloat16 exponent in float32 (eager rounds it to bfloat16), and the
    float64 power moves by ~3% per ulp: outside float64's tolerance and, by luck of which side
    lands nearer the float64 run, outside the RMSE rule too. Rounding-noise evidence says
    precision. The planted fault on the other, rounding-insensitive output stays a mismatch."""
    monkeypatch.chdir(tmp_path)
    res = run_case({"program": _AMPLIFIED, "targets": ["inductor", "faulty_perturb"], "search": False,
                    "calls": [{"grad_enabled": False}]})
    assert res["status"] == "ok", res["reason"]
    inductor, faulty = res["verdicts"]
    assert inductor["symptom"] == "pass", inductor["detail"]
    assert "rounding" in res["rungs"]["inductor"][-1]["detail"], res["rungs"]["inductor"][-1]
    assert (faulty["symptom"], faulty["rung"], faulty["output_index"]) == ("mismatch", "faulty_perturb", 0), faulty


# -- known limitations (oracle/limitations.py) -------------------------------------------------------
def test_a_converters_own_refusal_is_unsupported_and_anything_else_stays_a_crash():
    from nnforge.core.verdict import Frame
    from nnforge.oracle.limitations import known_limitation

    fe = (Frame(file="tvm/relax/frontend/onnx/onnx_frontend.py", line=5271, function="_impl_v11"),)
    assert known_limitation("tvm_frontend", "ValueError", "TopK sorted must be 1 for Relax frontend", fe) is not None
    # the same words raised elsewhere, by another rung, or with another type are no limitation
    elsewhere = (Frame(file="tvm/relax/op/base.py", line=1, function="f"),)
    assert known_limitation("tvm_frontend", "ValueError", "TopK sorted must be 1 for Relax frontend", elsewhere) is None
    assert known_limitation("ort_kernels", "ValueError", "TopK sorted must be 1 for Relax frontend", fe) is None
    assert known_limitation("tvm_frontend", "TypeError", "TopK sorted must be 1 for Relax frontend", fe) is None
    assert known_limitation("tvm_frontend", "tvm.error.InternalError", "Check failed: (x) is false", fe) is None
    ort = ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for BitShift(11) node "
           "with name '/BitShift'")
    assert known_limitation("ort_kernels", "onnxruntime.capi.onnxruntime_pybind11_state.NotImplemented", ort) is not None


@pytest.mark.slow
def test_an_unsorted_topk_is_unsupported_on_tvm_not_a_frontend_crash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    program = _PROGRAM_WITH.format(expr="torch.topk(x.float(), 2, dim=1, sorted=False).values")
    res = run_case({"program": program, "targets": ["tvm"], "calls": [{"grad_enabled": False}]})
    v = res["verdicts"][0]
    assert v["symptom"] == "invalid" and "unsupported: the TopK converter's own check" in v["detail"], v


def test_tvm_layer_norm_of_float64_is_its_documented_limitation_not_a_frontend_crash(tmp_path, monkeypatch):
    """TOPI's layer_norm implements float32 and float16 only and says so: a campaign listed it as
    a TVM bug (cluster 2dd4a0115fd4 of stop 27's ort/tvm run)."""
    monkeypatch.chdir(tmp_path)
    program = _PROGRAM_WITH.format(expr="torch.nn.functional.layer_norm(x.double(), (x.shape[-1],))")
    res = run_case({"program": program, "targets": ["tvm"], "calls": [{"grad_enabled": False}]})
    v = res["verdicts"][0]
    assert v["symptom"] == "invalid" and "unsupported: TOPI's layer_norm" in v["detail"], v


def test_a_float_result_promoted_from_integers_is_jittered_and_its_cast_explained():
    """tanh of a uint8 computes in float32 by promotion: 0.99999994 at 9, where Inductor's
    vectorised tanh gives 1.0 and so uint8 1 after the cast. The jitter must move that rounded
    result (its float64 recompute widens the integer input too), so the cast's 1 is precision."""
    import torch

    from nnforge.oracle.rounding_noise import RoundingJitter

    x = torch.tensor([9, 15, 0], dtype=torch.uint8)
    with RoundingJitter(direction=1):
        up = torch.tanh(x)
    assert up[0].item() == 1.0 and up[2].item() == 0.0  # rounded: moved; exact tanh(0) = 0: not
    with RoundingJitter(direction=1):
        assert torch.tanh(x).to(torch.uint8).tolist() == [1, 1, 0]
