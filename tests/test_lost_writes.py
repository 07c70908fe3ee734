"""A lost write to Python state (a module attribute, a program global) is seen on the call that
made it and named by what was written, whatever ops the program holds: the test-only target
`faulty_lost_write` undoes a call's writes to int attributes, as Dynamo does when it fails to
replay a side effect after its graph."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nnforge.agent.cmd_triage import import_cases, triage_findings
from nnforge.agent.store import Store
from nnforge.core.python_state import python_state, side_effect_kind
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom
from nnforge.oracle.oracle import Oracle
from nnforge.triage.repro import write_repro

COUNTER_SUB_CLAMP = '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.clamp(x - 1.0, min=0.0)

def make_inputs():
    return (torch.randn(3, 4),)
'''

COUNTER_TRIU_MATMUL = '''
import torch

_SEEN = []

class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hits = 3

    def forward(self, x):
        self.hits = self.hits + 2
        return torch.triu(x @ x.T)

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        _SEEN.append(x.shape[0])
        return self.inner(x).sigmoid()

def make_inputs():
    return (torch.randn(5, 2),)
'''


def test_python_state_holds_plain_data_of_every_module_and_global_but_not_nn_internals() -> None:
    import torch

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.count = 2
            self._seen = [1.5, "a"]
            self.fn = len  # a function is no data

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.lin = torch.nn.Linear(2, 2)
            self.cache = torch.zeros(2)

    state = python_state(Outer(), {"_LOG": [1, 2], "torch": torch, "__name__": "x", "LIMIT": 3})
    assert state["self.inner.count"] == 2 and state["self.inner._seen"] == [1.5, "a"]
    assert state["self.lin.in_features"] == 2 and torch.equal(state["self.cache"], torch.zeros(2))
    assert state["global _LOG"] == [1, 2] and state["global LIMIT"] == 3
    assert not any(k.endswith(("._parameters", ".fn", "._modules", "lin.weight")) for k in state)
    assert "global torch" not in state and "global __name__" not in state
    assert side_effect_kind("self.inner.count", 2) == "module attribute (int)"
    assert side_effect_kind("global _LOG", [1]) == "global (container)"


@pytest.mark.slow
def test_a_lost_int_attribute_write_is_a_mismatch_on_the_first_call_naming_the_write(pool) -> None:
    checked = Oracle(pool, ["faulty_lost_write", "eager"], 100.0).check(TestCase(program=COUNTER_SUB_CLAMP))
    lost, healthy = checked.verdicts
    assert lost.symptom is Symptom.MISMATCH and lost.rung == "faulty_lost_write" and lost.call_index == 0
    assert lost.side_effect == "module attribute (int)"
    assert "self.calls" in lost.detail and "expected 1, got 0" in lost.detail
    assert healthy.symptom is Symptom.PASS  # real Dynamo replays the write


@pytest.mark.slow
def test_lost_writes_in_programs_with_different_ops_end_in_one_cluster_whose_repro_reproduces(
        tmp_path, pool, settings) -> None:
    for name, program in (("a", COUNTER_SUB_CLAMP), ("b", COUNTER_TRIU_MATMUL)):
        TestCase(program=program).save(tmp_path / "inbox" / name)
    camp = tmp_path / "camp"
    with Store(camp) as store:
        ids = import_cases(store, pool, tmp_path / "inbox", camp, ["faulty_lost_write"], settings)
        assert len(ids) == 2
        outcomes = triage_findings(store, pool, camp, settings=settings, reduce=True, budget_s=20, per_key=2)
        assert not [o.error for o in outcomes if o.error]
        [cluster] = store.clusters()  # one root cause, though the programs share no op
        assert cluster.count == 2 and cluster.repro_status == "reproduced"
        assert "lost side effect" in cluster.signature.key and "module attribute (int)" in cluster.signature.key
        assert "write to a module attribute (int)" in cluster.title
    report = (camp / "findings" / cluster.cluster_id / "report.md").read_text()
    assert "loses or changes a write the model makes to a module attribute (int)" in report
    assert "self.calls: expected 1, got 0" in report or "self.inner.hits" in report  # the repro's own words
    repro = camp / "findings" / cluster.cluster_id / "repro.py"
    out = subprocess.run([sys.executable, str(repro)], cwd=repro.parent, capture_output=True, text=True, timeout=240)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Python state after the call" in out.stdout


@pytest.mark.slow
def test_a_repro_of_a_program_writing_globals_passes_on_healthy_dynamo(tmp_path, pool) -> None:
    """The script restores the program's globals before each run, as the oracle loads a fresh
    module: eager's appends to `_SEEN` must not count against the compiled run."""
    checked = Oracle(pool, ["faulty_lost_write"], 100.0).check(TestCase(program=COUNTER_TRIU_MATMUL))
    [verdict] = checked.verdicts
    assert verdict.symptom is Symptom.MISMATCH and verdict.side_effect == "module attribute (int)"
    for target, expected_rc in (("faulty_lost_write", 1), ("eager", 0)):
        path = tmp_path / target / "repro.py"
        path.parent.mkdir()
        path.write_text(write_repro(checked.case, verdict, target=target))
        out = subprocess.run([sys.executable, str(path)], cwd=path.parent, capture_output=True, text=True, timeout=240)
        assert out.returncode == expected_rc, (target, out.stdout + out.stderr)
