"""Programs headed for ort or tvm pass the ONNX export gate before they become tests: the gate's
own steps (real exporter, ONNX checker, onnx.reference against eager) on the probe worker, a
refusal redraws or remutates, and what the gate cannot see (a split ORT refuses) the specs say."""

from __future__ import annotations

import random

import pytest

from nnforge.agent.export_gate import GateCheck, export_is_gate
from nnforge.core.testcase import TestCase

PERMUTE_NEGATIVE = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x).permute((0, -1, 1)) * 2.0

def make_inputs():
    return (torch.randn(2, 3, 4),)
'''
PERMUTE_POSITIVE = PERMUTE_NEGATIVE.replace("(0, -1, 1)", "(0, 2, 1)")
DROPOUT = PERMUTE_POSITIVE.replace("torch.sin(x)", "torch.nn.functional.dropout(x, p=0.5, training=True)")
# an int intermediate into an operator that takes none once exported: each op alone exports
INT_INTO_CUMSUM = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum((x > 0).to(torch.uint8), dim=0).float() + x

def make_inputs():
    return (torch.randn(5, 3),)
'''
CHUNK_FEWER = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        a, b, c = torch.chunk(x, 5, dim=1)
        return a + 1.0, b, c

def make_inputs():
    return (torch.randn(2, 3),)
'''


def test_only_targets_that_gate_on_the_export_are_checked() -> None:
    assert export_is_gate("ort") and export_is_gate("tvm")
    assert not export_is_gate("onnx_export")  # the exporter is what it tests: its refusals are findings
    assert not export_is_gate("inductor")


def test_refusals_are_counted_by_exception_and_onnx_operator_not_by_shapes() -> None:
    from nnforge.agent.export_gate import _reason_head

    checker = ("onnx_export: crash at call 0 (onnx.onnx_cpp2py_export.shape_inference.InferenceError: "
               "[ShapeInferenceError] Inference error(s): (op_type:Transpose, node name: /Transpose): "
               "[TypeInferenceError] Invalid attribute perm {{{}}}, input shape = {{2, 3, 4}})")
    assert _reason_head(checker.format("0, -1, 1")) == _reason_head(checker.format("-3, 1, 2")) \
        == "InferenceError on Transpose"
    assert _reason_head("onnx_export: mismatch at call 0 (output: [1]: shape (1,) instead of ())") \
        == _reason_head("onnx_export: mismatch at call 2 (output: [0]: shape (4, 5) instead of (5, 4))")


@pytest.mark.slow
def test_the_gate_check_refuses_what_the_gate_stops_and_admits_what_passes_it(pool) -> None:
    gate = GateCheck(pool.call)
    assert gate(TestCase(program=PERMUTE_POSITIVE))
    assert not gate(TestCase(program=PERMUTE_NEGATIVE))  # the exporter writes perm (0, -1, 1): the checker refuses
    assert not gate(TestCase(program=INT_INTO_CUMSUM))  # CumSum takes no uint8
    assert not gate(TestCase(program=DROPOUT))  # random: an ONNX test of it is invalid
    assert gate.checked == 4 and sum(gate.refused.values()) == 3
    assert "3 refused" in gate.line()


@pytest.mark.slow
def test_generated_onnx_seeds_are_drawn_again_until_the_gate_admits_them(pool, tmp_path) -> None:
    from nnforge.agent.campaign_config import CampaignConfig
    from nnforge.agent.seed_sources import GeneratorSource
    from nnforge.agent.store import CampaignStore

    store = CampaignStore(tmp_path / "camp")
    source = GeneratorSource(store, CampaignConfig(out=str(tmp_path / "camp"), budget_s=1, nodes=8, seed=0))
    gate = GateCheck(pool.call)
    source.admit = lambda case, target: gate(case)
    cases = [source.draw("tvm", random.Random(0))[0] for _ in range(12)]
    store.close()
    assert gate.refused  # some draws stop at the gate: those were drawn again
    # (without the export table most draws break a spec's claim, and only the eighth redraw goes out so)
    claimed = [c for c in cases if c.meta.get("onnx_exportable")]
    again = GateCheck(pool.call)
    assert len(claimed) >= 4 and sum(again(c) for c in claimed) >= len(claimed) - 1, again.refused

def test_chunk_into_fewer_pieces_than_asked_is_not_claimed_exportable_as_ort_refuses_its_split() -> None:
    import onnxruntime as ort
    import torch
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

    from nnforge.generator.engine import GeneratorConfig, generate_graph
    from nnforge.oracle.onnx_backends import OnnxReferenceBackend, export_for_backend, feeds_for
    from nnforge.oracle.program_loader import load_program

    module = load_program(CHUNK_FEWER, name="chunk_fewer")
    args = module.make_inputs()
    onnx_bytes = export_for_backend(module.Model(), args)  # the checker has no word against it
    feeds = feeds_for(onnx_bytes, args)
    OnnxReferenceBackend().execute(onnx_bytes, feeds)  # nor does onnx.reference: the gate passes it
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    with pytest.raises(ort_state.Fail, match="split"):
        session.run(None, feeds)  # ORT refuses the negative piece the exporter wrote
    torch.chunk(torch.zeros(2, 3), 5, dim=1)  # eager is fine with it
    seen = 0
    for seed in range(60):
        gen = generate_graph(GeneratorConfig(n_nodes=3, seed=seed, ops=("chunk", "add", "sin"), onnx_only=True))
        for node in gen.graph.nodes:
            if node.op == "chunk":
                seen += 1
                if gen.onnx_exportable:
                    assert node.attrs["n_out"] == node.attrs["chunks"], node.attrs
    assert seen
