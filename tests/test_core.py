"""The shared currency: TestCase folders and verdicts survive a round trip; bad folders say why."""

import json

import pytest
import torch

from nnforge.core.calls import CallStep, InputChange
from nnforge.core.testcase import CaseFormatError, TestCase
from nnforge.core.verdict import Frame, Symptom, Verdict, worst

PROGRAM = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return (x + 1,)
def make_inputs():
    return (torch.ones(2),)
"""


def test_testcase_folder_round_trip(tmp_path):
    case = TestCase(
        program=PROGRAM,
        inputs=(torch.arange(3.0), 2),
        state_dict={"w": torch.ones(2, 2)},
        calls=(CallStep(), CallStep(inputs=(InputChange(0, shape=(0,), layout="transposed"),), reset_cache=True,
                                    mode="eval", grad_enabled=False, set_attrs={"k": 3})),
        graph={"nodes": []},
        meta={"origin": "test"},
    )
    back = TestCase.load(case.save(tmp_path / "c"))
    assert back.program == PROGRAM and back.calls == case.calls and back.meta == case.meta and back.graph == case.graph
    assert torch.equal(back.inputs[0], case.inputs[0]) and back.inputs[1] == 2
    assert torch.equal(back.state_dict["w"], case.state_dict["w"])
    assert back.case_id == case.case_id


def test_loading_a_bad_folder_says_what_is_wrong(tmp_path):
    with pytest.raises(CaseFormatError, match="not a folder"):
        TestCase.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CaseFormatError, match="no program.py"):
        TestCase.load(tmp_path / "empty")
    bad = tmp_path / "bad"
    TestCase(program=PROGRAM).save(bad)
    (bad / "calls.json").write_text(json.dumps([{"bogus": 1}]))
    with pytest.raises(CaseFormatError, match="unknown keys"):
        TestCase.load(bad)


def test_verdict_json_round_trip_and_worst():
    v = Verdict(target="inductor", symptom=Symptom.MISMATCH, rung="inductor", max_abs_err=0.5,
                frames=(Frame("a.py", 3, "f"),), timings={"compile": 1.0})
    assert Verdict.from_json(json.loads(v.dumps())) == v
    ok = Verdict(target="ort", symptom=Symptom.PASS)
    inv = Verdict(target="tvm", symptom=Symptom.INVALID)
    assert worst([ok, inv, v]) is Symptom.MISMATCH
    assert worst([ok, inv]) is Symptom.INVALID
    assert worst([ok]) is Symptom.PASS


def test_replayed_inputs_keep_their_layout_strides_and_overlap():
    """Each call copies its inputs; the copy must keep the layout the case asked for (TAXONOMY I1),
    or strided slices and expanded tensors would never reach a compiler."""
    import torch

    from nnforge.core.replay import copy_value

    base = torch.arange(24.0).reshape(4, 6)
    for x in (base[:, ::2], base.t(), torch.randn(1, 3).expand(4, 3), base[1:, 2:],
              torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)):
        c = copy_value(x)
        assert torch.equal(c, x) and c.stride() == x.stride() and not c.is_contiguous()
        assert c.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()  # a copy, not an alias
