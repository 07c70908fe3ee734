"""`nnforge run CASE_DIR`: exit status 0 pass, 1 bug, 2 invalid or unreadable case."""

from __future__ import annotations

import json

import pytest
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
