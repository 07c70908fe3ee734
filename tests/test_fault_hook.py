"""The fault-injection harness (bench/faults/): a planted fault reaches a fresh interpreter through
its `.pth` line and changes what the real compiler does; with the activation file gone, nothing
is imported and nothing is patched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FAULTS_DIR = Path(__file__).resolve().parent.parent / "bench" / "faults"
sys.path.insert(0, str(FAULTS_DIR))

import fault_hook  # noqa: E402

# A child that reads site-packages the way a new interpreter does (addsitedir runs .pth lines),
# then reports what Inductor's C++ code generator emits for floor() in a vectorised loop.
CHILD = textwrap.dedent("""
    import json, site, sys
    site.addsitedir(sys.argv[1])
    from torch._inductor.codegen import cpp
    hook = sys.modules.get("fault_hook")
    print(json.dumps({"floor": cpp.CppVecOverrides.floor("v"),
                      "hook_loaded": hook is not None,
                      "applied": hook.APPLIED if hook else {}}))
""")


def _child(site_dir: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(site_dir)], capture_output=True, text=True,
                         timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def site_dir(tmp_path: Path) -> Path:
    d = tmp_path / "site"
    d.mkdir()
    (d / "nnforge_fault_hook.pth").write_text(fault_hook.pth_line(tmp_path / "active.json"))
    return d


def test_planted_fault_patches_the_compiler_in_a_fresh_interpreter(site_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "fired.log"
    fault_hook.write_active(["inductor_vec_floor_trunc"], tmp_path / "active.json", fired_log=log)
    got = _child(site_dir)
    assert got["floor"] == "v.trunc()"
    assert got["applied"] == {"torch._inductor.codegen.cpp": ["inductor_vec_floor_trunc"]}
    # the child took the wrong branch once (one floor emitted), and said so in the fired log
    assert fault_hook.fired_counts(log) == {"inductor_vec_floor_trunc": 1}


def test_a_process_that_can_write_no_log_says_once_on_stderr_which_fault_fired(site_dir: Path, tmp_path: Path) -> None:
    # a confined repro check cannot write a fired log outside its folder: the attribution of
    # bench/faults/together.py reads these lines from its output instead
    fault_hook.write_active(["inductor_vec_floor_trunc"], tmp_path / "active.json", fired_stderr=True)
    twice = CHILD.replace('print(json.dumps(', 'cpp.CppVecOverrides.floor("w")\nprint(json.dumps(')
    out = subprocess.run([sys.executable, "-c", twice, str(site_dir)], capture_output=True, text=True,
                         timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    marks = [ln for ln in out.stderr.splitlines() if ln.startswith(fault_hook.FIRED_MARK)]
    assert marks == [f"{fault_hook.FIRED_MARK} inductor_vec_floor_trunc"], out.stderr


def test_a_fault_that_never_takes_its_wrong_branch_logs_nothing(site_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "fired.log"
    fault_hook.write_active(["inductor_atan2_scalar_cpp"], tmp_path / "active.json", fired_log=log)
    got = _child(site_dir)  # emits a vectorised floor only: atan2 is patched but never reached
    assert got["applied"] == {"torch._inductor.codegen.cpp": ["inductor_atan2_scalar_cpp"]}
    assert got["floor"] == "v.floor()"
    assert fault_hook.fired_counts(log) == {}


def test_without_the_activation_file_nothing_is_imported_or_patched(site_dir: Path) -> None:
    got = _child(site_dir)
    assert got == {"floor": "v.floor()", "hook_loaded": False, "applied": {}}


def test_every_fault_has_a_trigger_case_and_names_a_known_layer() -> None:
    faults = fault_hook.load_catalogue()
    assert len(faults) >= 15
    for name, fault in faults.items():
        assert (FAULTS_DIR / "triggers" / name / "program.py").is_file(), name
        assert fault.layer in fault_hook.LAYERS
    assert (FAULTS_DIR / "near_miss" / "program.py").is_file()


def test_unknown_fault_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="no_such_fault"):
        fault_hook.write_active(["no_such_fault"], tmp_path / "active.json")
    assert not (tmp_path / "active.json").exists()


COMPILED_CHILD = textwrap.dedent("""
    import site, sys
    site.addsitedir(sys.argv[1])
    import torch
    x = torch.linspace(-4.25, 3.75, 64)
    got = torch.compile(torch.floor, backend="inductor")(x)
    sys.exit(0 if torch.equal(got, torch.floor(x)) else 1)
""")


@pytest.mark.slow
@pytest.mark.parametrize("planted", [True, False])
def test_a_planted_codegen_fault_changes_what_compiled_code_computes(site_dir: Path, tmp_path: Path,
                                                                      planted: bool) -> None:
    if planted:
        (tmp_path / "active.json").write_text(json.dumps({"faults": ["inductor_vec_floor_trunc"]}))
    out = subprocess.run([sys.executable, "-c", COMPILED_CHILD, str(site_dir)], capture_output=True, text=True,
                         timeout=600, env={"PATH": "/usr/bin:/bin", "TORCHINDUCTOR_CACHE_DIR": os.environ["TORCHINDUCTOR_CACHE_DIR"]})
    assert out.returncode == (1 if planted else 0), out.stderr[-2000:]
