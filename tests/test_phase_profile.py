"""The phase split of bench/phases.py (#19): which part of a compile the seconds belong to."""

from __future__ import annotations

import pytest

from nnforge.oracle.phase_profile import PHASES, profile_case, split_compile

# torch 2.13, one 10-node program (timers as measured): code generation is Python only, and
# loading the module waits for the C++ compiler
TORCH_2_13 = {"_compile.compile_inner": 3.288, "OutputGraph.call_user_compiler": 2.964, "compile_fx_inner": 2.739,
              "GraphLowering.codegen": 0.284, "PyCodeCache.load_by_key_path": 2.313, "compile_file": 2.291}
# the older layout: the C++ compiler runs inside code generation
OLDER = {"_compile.compile_inner": 3.0, "OutputGraph.call_user_compiler": 2.8, "compile_fx_inner": 2.6,
         "GraphLowering.codegen": 2.0, "PyCodeCache.load_by_key_path": 0.2, "compile_file": 1.5}


@pytest.mark.parametrize("timers, rung_s", [(TORCH_2_13, 3.5), (OLDER, 3.2)])
def test_split_takes_the_cpp_compile_out_of_the_phase_that_holds_it(timers, rung_s):
    phases = split_compile(timers, rung_s)
    assert phases["c++ compile"] == pytest.approx(timers["compile_file"])
    assert phases["inductor codegen"] > 0.1  # not swallowed by the compiler's seconds
    assert phases["loading"] <= timers["PyCodeCache.load_by_key_path"]
    assert phases["inductor codegen"] + phases["loading"] + phases["c++ compile"] == pytest.approx(
        timers["GraphLowering.codegen"] + timers["PyCodeCache.load_by_key_path"])  # the compiler counted once
    assert min(phases.values()) >= 0
    assert sum(phases.values()) == pytest.approx(rung_s)


def test_split_on_torch_2_13_gives_loading_only_what_is_not_the_compiler():
    phases = split_compile(TORCH_2_13, 3.5)
    assert phases["loading"] == pytest.approx(2.313 - 2.291)
    assert phases["inductor codegen"] == pytest.approx(0.284)
    assert phases["inductor lowering"] == pytest.approx(2.739 - 2.291 - 0.284 - 0.022)


def test_split_with_the_compile_measured_in_both_places():
    """A fresh process: the ISA probes compile inside code generation, the kernel while loading."""
    timers = {**TORCH_2_13, "GraphLowering.codegen": 7.258, "PyCodeCache.load_by_key_path": 2.884,
              "compile_file": 8.899, "compile_fx_inner": 10.48, "OutputGraph.call_user_compiler": 12.258,
              "_compile.compile_inner": 12.261}
    phases = split_compile(timers, 14.7, cpp_in_codegen=6.035)
    assert phases["inductor codegen"] == pytest.approx(7.258 - 6.035)
    assert phases["loading"] == pytest.approx(2.884 - (8.899 - 6.035))
    assert sum(phases.values()) == pytest.approx(14.7)


@pytest.mark.slow
def test_profile_of_a_real_compile_sees_codegen_and_the_cpp_compiler(tmp_path, monkeypatch):
    """torch renames its timers now and then: on the installed torch, a program compiled from
    nothing must show code generation and a C++ compiler run, not zeros."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # nothing compiled yet
    program = (
        "import torch\n\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return (x * 3.25).cos() - y.abs().sqrt() * 0.5\n\n"
        "def make_inputs():\n"
        "    return (torch.randn(3, 5), torch.randn(3, 5))\n"
    )
    out = profile_case({"program": program, "calls": [], "seed": 0, "target": "inductor"})
    assert out["status"] == "ok", out
    assert set(out["phases"]) == set(PHASES)
    assert out["cpp_compiles"] >= 1
    assert out["phases"]["c++ compile"] > 0
    assert out["phases"]["inductor codegen"] > 0
    assert set(out["rungs"]) == {"dynamo", "aot_autograd", "inductor"}
