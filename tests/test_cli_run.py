"""`nnforge run CASE_DIR`: exit status 0 pass, 1 bug, 2 invalid or unreadable case."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from nnforge.agent.cli import _register_commands, app
from nnforge.core.testcase import TestCase

PROGRAM = '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2

def make_inputs():
    return (torch.randn(2, 4),)
'''

BROKEN = PROGRAM.replace("torch.randn(2, 4)", "torch.randn(2, 5)")  # Linear(4, 3) on 5 features

_register_commands()
runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, ["run", *args])


@pytest.mark.slow
def test_passing_case_exits_0_and_saves_the_chosen_values(tmp_path):
    folder = TestCase(program=PROGRAM).save(tmp_path / "case")
    result = _run(str(folder), "--targets", "eager", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["symptom"] == "pass" and out["verdicts"][0]["target"] == "eager" and out["saved_values"]
    saved = TestCase.load(folder)
    assert saved.inputs is not None and saved.inputs[0].shape == (2, 4) and "lin.weight" in saved.state_dict


@pytest.mark.slow
def test_case_with_a_bug_exits_1_and_names_the_guilty_rung(tmp_path):
    folder = TestCase(program=PROGRAM).save(tmp_path / "case")
    result = _run(str(folder), "--targets", "faulty_perturb,eager", "--json")
    assert result.exit_code == 1, result.output
    perturbed, eager = json.loads(result.stdout)["verdicts"]
    assert (perturbed["symptom"], perturbed["rung"]) == ("mismatch", "faulty_perturb")
    assert eager["symptom"] == "pass"


@pytest.mark.slow
def test_invalid_case_exits_2(tmp_path):
    folder = TestCase(program=BROKEN).save(tmp_path / "case")
    result = _run(str(folder), "--targets", "eager")
    assert result.exit_code == 2, result.output
    assert "invalid" in result.output
    assert not (folder / "inputs.pt").exists()  # no values are saved for an invalid case


def test_missing_or_malformed_folder_exits_2_with_a_clear_message(tmp_path):
    result = _run(str(tmp_path / "nowhere"))
    assert result.exit_code == 2 and "not a folder" in result.output
    (tmp_path / "empty").mkdir()
    result = _run(str(tmp_path / "empty"))
    assert result.exit_code == 2 and "no program.py" in result.output
    folder = TestCase(program=PROGRAM).save(tmp_path / "case")
    result = _run(str(folder), "--targets", "no_such_target")
    assert result.exit_code == 2 and "unknown target" in result.output


def test_case_files_that_do_not_hold_what_they_must_are_one_line_errors_naming_the_file(tmp_path):
    folder = TestCase(program=PROGRAM).save(tmp_path / "case")
    torch.save({"x": torch.ones(2, 4)}, folder / "inputs.pt")  # a dict: forward would get its keys
    result = _run(str(folder), "--targets", "eager")
    assert result.exit_code == 2 and "inputs.pt: must hold a tuple or list" in result.output, result.output
    (folder / "inputs.pt").write_bytes(b"\x80\x05 not a tensor file")
    result = _run(str(folder), "--targets", "eager")
    assert result.exit_code == 2 and "inputs.pt: not a tensor file" in result.output, result.output
    (folder / "inputs.pt").unlink()
    (folder / "meta.json").write_text("[1, 2]")
    result = _run(str(folder), "--targets", "eager")
    assert result.exit_code == 2 and "meta.json: must hold a JSON object, not a list" in result.output


def test_make_inputs_returning_a_bare_tensor_is_an_invalid_case(tmp_path):
    from nnforge.core.verdict import Symptom
    from nnforge.oracle.oracle import Oracle
    from nnforge.oracle.sandbox import WorkerPool

    bare = PROGRAM.replace("return (torch.randn(2, 4),)", "return torch.randn(2, 4)")
    with WorkerPool(size=1, timeout_s=60) as pool:
        result = Oracle(pool, ["eager"], 50.0).check(TestCase(program=bare))
    assert result.verdicts[0].symptom is Symptom.INVALID
    assert "make_inputs() must return a tuple or list" in result.invalid_reason


def test_a_bad_setting_is_one_line_naming_the_key_and_exits_2(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / ".env").write_text("NNFORGE_WORKER_TIMEOUT_S=sixty\n")
    exe = os.path.join(os.path.dirname(sys.executable), "nnforge")
    p = subprocess.run([exe, "run", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NNFORGE_WORKER_MEMORY_MB": "-5"})
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines == ["error: setting NNFORGE_WORKER_TIMEOUT_S='sixty': must be a valid number, unable to parse string "
                     "as a number",
                     "error: setting NNFORGE_WORKER_MEMORY_MB='-5': must be greater than or equal to 256"], lines


WRITES_AROUND_ITS_CASE = '''
import os
import torch

for path in ({around!r}, {inside!r}):
    try:
        open(path, "w").write("written by the program")
    except OSError:
        pass

class Model(torch.nn.Module):
    def forward(self, x):
        return x + 1

def make_inputs():
    return (torch.ones(3),)
'''


@pytest.mark.slow
def test_a_program_run_by_nnforge_run_writes_neither_its_case_nor_the_folder_around_it(tmp_path):
    around, inside = tmp_path / "written-beside-the-case", tmp_path / "case" / "written-in-the-case"
    folder = TestCase(program=WRITES_AROUND_ITS_CASE.format(around=str(around), inside=str(inside))).save(
        tmp_path / "case")
    result = _run(str(folder), "--targets", "eager")
    assert result.exit_code == 0, result.output
    assert not around.exists() and not inside.exists()
