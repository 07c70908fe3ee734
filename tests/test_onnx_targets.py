"""ONNX targets judge what reaches them: real exporters, ONNX Runtime and the oracle in real
sandboxed workers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom
from nnforge.oracle.oracle import Oracle
from nnforge.triage.repro import write_repro

RRELU_EVAL = '''
import torch
import torch.nn.functional as F

class Model(torch.nn.Module):
    def forward(self, x):
        return F.rrelu(x, lower=0.1, upper=0.3, training=False) * 2.0

def make_inputs():
    return (torch.randn(3, 4),)
'''

DROPOUT_TRAINING = RRELU_EVAL.replace("F.rrelu(x, lower=0.1, upper=0.3, training=False)", "F.dropout(x, p=0.5, training=True)")

MATMUL = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x, y):
        return (torch.sin(x) @ y).relu().sum(0)

def make_inputs():
    return (torch.randn(3, 4), torch.randn(4, 5))
'''


@pytest.mark.slow
def test_a_seeded_op_that_draws_nothing_is_judged_and_one_that_draws_is_invalid(pool) -> None:
    [deterministic] = Oracle(pool, ["ort"], 100.0).check(TestCase(program=RRELU_EVAL)).verdicts
    assert deterministic.symptom is Symptom.PASS, deterministic.detail  # rrelu(training=False) is a leaky relu
    [random] = Oracle(pool, ["ort"], 100.0).check(TestCase(program=DROPOUT_TRAINING)).verdicts
    assert random.symptom is Symptom.INVALID and "random numbers" in random.detail


@pytest.mark.slow
def test_the_onnx_export_target_judges_the_dynamo_exporter_and_its_repro_agrees(pool, tmp_path) -> None:
    from nnforge.agent.campaign_config import CampaignConfig

    assert "onnx_export" not in CampaignConfig(out="x", budget_s=1).targets  # off by default
    checked = Oracle(pool, ["onnx_export"], 100.0).check(TestCase(program=MATMUL))
    [verdict] = checked.verdicts
    assert verdict.symptom is Symptom.PASS and "onnx_dynamo_export: pass" in verdict.detail
    script = write_repro(checked.case, verdict, target="onnx_export")
    assert "dynamo=True" in script
    path = tmp_path / "repro.py"
    path.write_text(script)
    out = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "torch.onnx.export(dynamo=True)" in out.stdout
