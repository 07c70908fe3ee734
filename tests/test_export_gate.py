"""What the ONNX export gate cannot see, the specs say: a chunk whose exported split ORT refuses."""

from __future__ import annotations

import pytest

CHUNK_FEWER = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        a, b, c = torch.chunk(x, 5, dim=1)
        return a + 1.0, b, c

def make_inputs():
    return (torch.randn(2, 3),)
'''


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
