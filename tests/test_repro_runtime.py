"""The runtime every repro.py embeds (triage/repro_runtime.py), tested as the module it is: the
comparison rules a maintainer's run applies, and the exit status that says "bug present"."""

from __future__ import annotations

import pytest
import torch

from nnforge.triage import repro_runtime as rt
from nnforge.triage.repro import RUNTIME_MARKER, runtime_source


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def _call(model, fn, reset):
    args = rt.repro_args(0)
    return fn(*args), args


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch):
    """The settings a repro.py defines for a one-call float program."""
    monkeypatch.setattr(rt, "Model", Scale)
    monkeypatch.setattr(rt, "REPRO_INPUTS", (torch.linspace(-3, 3, 12).reshape(3, 4),))
    monkeypatch.setattr(rt, "REPRO_CALLS", [_call])
    monkeypatch.setattr(rt, "REPRO_SYMPTOM", "mismatch")
    monkeypatch.setattr(rt, "REPRO_TARGET_LABEL", "a test target")
    return monkeypatch


def test_shape_is_compared_before_values_so_broadcasting_hides_nothing() -> None:
    problem = rt.repro_compare("output", torch.tensor(1.5), torch.tensor([[1.5]]), None)
    assert problem == "output, leaf 0: shape (1, 1) instead of ()"
    assert rt.repro_compare("output", torch.ones(2), torch.ones(2, dtype=torch.float64), None) == \
        "output, leaf 0: dtype torch.float64 instead of torch.float32"


def test_a_value_outside_tolerance_is_described_with_numbers() -> None:
    expected = torch.tensor([1.0, 2.0, 3.0])
    problem = rt.repro_compare("call 0, output", expected, torch.tensor([1.0, 2.5, 3.0]), expected.double())
    assert problem is not None
    assert "max abs err 0.5" in problem
    assert "expected [1.0, 2.0, 3.0]" in problem and "actual   [1.0, 2.5, 3.0]" in problem


def test_the_leaf_described_is_the_wrong_one_not_the_first_outside_tolerance() -> None:
    # A stop-38 report showed a bfloat16 output the compiled run got closer to float64 than eager
    # (outside tolerance, not a bug) and not the gradient that made the whole result wrong.
    eager_out = torch.tensor([0.4121, 0.2148]).bfloat16()
    compiled_out = eager_out + torch.tensor([0.0, 0.0059], dtype=torch.bfloat16)
    exact_out = eager_out.double() + torch.tensor([0.0, 0.004], dtype=torch.float64)  # compiled is closer
    grad = torch.tensor([0.88, -1.25])
    expected = (eager_out, {"gradients": {"input 0": grad}})
    actual = (compiled_out, {"gradients": {"input 0": torch.tensor([-0.34, -0.17])}})
    reference = (exact_out, {"gradients": {"input 0": grad.double()}})
    problem = rt.repro_compare("call 0, output", expected, actual, reference)
    assert problem is not None and problem.startswith("call 0, output, leaf 1 [1]['gradients']['input 0']:"), problem
    assert "expected [0.8799999952316284, -1.25]" in problem


def test_rounding_no_worse_than_eager_against_float64_is_not_a_bug() -> None:
    exact = torch.tensor([1.0, 1e-3], dtype=torch.float64)
    eager = torch.tensor([1.001, 1e-3])  # eager is off by as much as the compiled result is
    compiled = torch.tensor([0.999, 1e-3])
    assert rt.repro_compare("output", eager, compiled, exact) is None


def test_nan_where_eager_and_float64_agree_on_it_is_a_bug_however_nan_fools_dynamos_same() -> None:
    # Softshrink of NaN: eager and float64 propagate it, Inductor's comparisons give 0 (a real
    # stop-36 finding whose repro.py exited 0 because `same` passes anything once its float64
    # reference holds a NaN).
    nan = float("nan")
    eager = torch.tensor([nan, 0.5, nan, 1.25])
    compiled = torch.tensor([0.0, 0.5, 0.0, 1.25])
    problem = rt.repro_compare("call 0, output", eager, compiled, eager.double())
    assert problem == "call 0, output, leaf 0: 2 of 4 positions differ in NaN/Inf (first at (0,): expected nan, got 0.0)"
    # eager overflowed where float64 did not and the compiled value sides with float64: not a bug
    exact = torch.tensor([1e39, 2.0], dtype=torch.float64)
    assert rt.repro_compare("output", torch.tensor([float("inf"), 2.0]), torch.tensor([3.4e38, 2.0]),
                            exact) is not None  # 3.4e38 is not float64's 1e39
    assert rt.repro_compare("output", torch.tensor([float("inf"), 2.0]), torch.tensor([float("inf"), 2.0]),
                            exact) is None
    assert rt.repro_compare("output", torch.tensor([nan, 2.0]), torch.tensor([1.0, 2.0]),
                            torch.tensor([1.0, 2.0], dtype=torch.float64)) is None


def test_main_exits_1_on_a_wrong_compiled_result_and_0_on_a_right_one(script: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture) -> None:
    script.setattr(rt, "repro_target", lambda model: (lambda x: model(x) + 0.25, lambda: None))
    assert rt.repro_main() == 1
    out = capsys.readouterr().out
    assert "BUG PRESENT" in out and "max abs err 0.25" in out
    script.setattr(rt, "repro_target", lambda model: (torch.compile(model, backend="eager"), torch._dynamo.reset))
    assert rt.repro_main() == 0


def test_main_cannot_tell_when_eager_itself_fails(script: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    script.setattr(rt, "REPRO_INPUTS", (torch.ones(3, 5),))  # fine for Scale: give it a program that fails
    script.setattr(rt, "Model", lambda: torch.nn.Linear(4, 2))
    script.setattr(rt, "repro_target", lambda model: (model, lambda: None))
    assert rt.repro_main() == 2
    assert "cannot tell: eager itself raises" in capsys.readouterr().out


def test_an_exception_only_the_compiled_run_raises_is_the_bug(script: pytest.MonkeyPatch) -> None:
    def broken(model):
        def fn(x):
            raise RuntimeError("lowering failed")
        return fn, lambda: None

    script.setattr(rt, "REPRO_SYMPTOM", "crash")
    script.setattr(rt, "REPRO_ERROR", "RuntimeError")
    script.setattr(rt, "repro_target", broken)
    assert rt.repro_main() == 1
    script.setattr(rt, "REPRO_ERROR", "AssertionError")  # a different error than reported: cannot tell
    assert rt.repro_main() == 2


def test_scripts_embed_the_module_below_its_marker_and_nothing_above() -> None:
    src = runtime_source()
    assert "def repro_main():" in src and "def repro_compare(" in src
    assert RUNTIME_MARKER not in src and "placeholders a test can set" not in src
    assert "Model: Any = None" not in src  # each script defines its own
    compile(src, "repro_runtime", "exec")


def test_a_failed_compilers_own_error_line_is_printed(script: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import subprocess

    def broken(model):
        def fn(x):
            raise subprocess.CalledProcessError(1, ["g++", "k.cpp"], output=b"k.cpp:3:1: error: 'tmp0' was not declared\n")
        return fn, lambda: None

    script.setattr(rt, "REPRO_SYMPTOM", "crash")
    script.setattr(rt, "REPRO_ERROR", "subprocess.CalledProcessError")
    script.setattr(rt, "repro_target", broken)
    assert rt.repro_main() == 1
    assert "k.cpp:3:1: error: 'tmp0' was not declared" in capsys.readouterr().out
