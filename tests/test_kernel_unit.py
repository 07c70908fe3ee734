"""Inductor's C++ kernels of one graph built in one compiler run (oracle/kernel_unit.py, #19)."""

from __future__ import annotations

import pytest
import torch

from nnforge.oracle import kernel_unit
from nnforge.oracle.sandbox import WorkerPool

EXEC = "nnforge.oracle.worker:exec_program"

SCALE = ("extern \"C\" void kernel(const float* in_ptr0, float* out_ptr0, const int64_t n)\n"
         "{ for (int64_t i = 0; i < n; ++i) out_ptr0[i] = in_ptr0[i] * 3.0f; }\n")
SHIFT = ("extern \"C\" void kernel(const float* in_ptr0, float* out_ptr0, const int64_t n)\n"
         "{ for (int64_t i = 0; i < n; ++i) out_ptr0[i] = in_ptr0[i] + 0.5f; }\n")
BROKEN = "extern \"C\" void kernel(const float* in_ptr0, float* out_ptr0)\n{ out_ptr0[0] = no_such_name; }\n"
ARGS = ["const float*", "float*", "const int64_t"]


@pytest.fixture
def compiler_runs(tmp_path, monkeypatch):
    """A fresh Inductor cache, and the kernel modules the C++ compiler was asked to build there."""
    import torch._inductor.cpp_builder as cpp_builder
    from torch._inductor.codecache import CppPythonBindingsCodeCache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    CppPythonBindingsCodeCache.cache_clear()
    runs: list[str] = []
    build = cpp_builder.CppBuilder.build

    def recording(self, *a, **k):
        line = self.get_command_line()
        if ".main.cpp" in line:  # kernel modules, not precompiled headers or ISA probes
            runs.append(line)
        return build(self, *a, **k)

    monkeypatch.setattr(cpp_builder.CppBuilder, "build", recording)
    return runs


def test_kernels_in_one_unit_compute_what_inductors_own_builds_compute(compiler_runs):
    x = torch.randn(37)
    unit = kernel_unit._build([(ARGS, SCALE), (ARGS, SHIFT)])
    assert len(compiler_runs) == 1
    assert kernel_unit.stats()["units"] >= 1
    from torch._inductor.codecache import CppPythonBindingsCodeCache

    alone = [CppPythonBindingsCodeCache.load_pybinding(ARGS, src) for src in (SCALE, SHIFT)]
    assert len(compiler_runs) == 3
    for built, stock in zip(unit, alone):
        a, b = torch.empty(37), torch.empty(37)
        built(x, a, 37)
        stock(x, b, 37)
        assert torch.equal(a, b)
    assert torch.equal(a, x + 0.5)


def test_a_kernel_that_does_not_compile_fails_as_inductor_fails_on_it(compiler_runs):
    from torch._inductor.exc import CppCompileError

    before = kernel_unit.stats()["fallbacks"]
    with pytest.raises(CppCompileError, match="no_such_name"):
        kernel_unit._build([(ARGS, SCALE), (["const float*", "float*"], BROKEN)])
    assert kernel_unit.stats()["fallbacks"] == before + 1
    # the unit, then each kernel on its own through Inductor's path, up to the one that fails
    assert len(compiler_runs) == 3


def test_an_unknown_mode_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv(kernel_unit.ENV, "both")
    with pytest.raises(ValueError, match="one, each"):
        kernel_unit.mode()
    monkeypatch.setenv(kernel_unit.ENV, "each")
    assert kernel_unit.mode() == "each"


GRAPH = """
import torch
from nnforge.oracle import kernel_unit
from nnforge.oracle.torch_backends import configure_torch

def main():
    configure_torch()
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(16, 4)

    def f(x, w):  # relu, an extern matmul between, then tanh and a sum: two C++ kernels
        return torch.tanh(torch.relu(x * 1.5) @ w).sum(0)

    with torch.no_grad():
        out = torch.compile(f)(x, w)
    return {"mode": kernel_unit.mode(), "stats": kernel_unit.stats(), "out": out.tolist(),
            "eager": f(x, w).tolist()}
"""


@pytest.mark.slow
def test_a_worker_builds_a_graphs_kernels_in_one_unit_with_the_stock_result(tmp_path, monkeypatch):
    monkeypatch.delenv(kernel_unit.ENV, raising=False)
    results = {}
    for mode in ("default", "each"):
        env = {} if mode == "default" else {kernel_unit.ENV: "each"}
        with WorkerPool(size=1, timeout_s=240, env=env, inductor_cache_dir=str(tmp_path / "inductor"),
                        sandbox="basic") as pool:
            assert pool.kernel_unit == ("one" if mode == "default" else "each")  # what summary.md will say
            out = pool.call(EXEC, {"program": GRAPH, "entry": "main", "args": []})
        assert out.status == "ok", out.traceback
        results[mode] = out.value
    one, each = results["default"], results["each"]
    assert one["mode"] == "one" and each["mode"] == "each"
    assert one["stats"]["units"] == 1 and one["stats"]["kernels"] >= 2 and one["stats"]["fallbacks"] == 0
    assert each["stats"] == {"units": 0, "kernels": 0, "fallbacks": 0}
    assert one["out"] == each["out"]  # bit for bit: the same kernels, the same flags
    assert one["out"] == pytest.approx(one["eager"], rel=1e-4, abs=1e-5)
