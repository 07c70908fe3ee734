"""Materialise a PyTorch model as an ONNX graph, for the ONNX Runtime and TVM backends.

Uses the TorchScript-based exporter (`dynamo=False`): about 0.1 s for a small model, where the
torch.export-based one takes seconds. Export is kept literal: no constant folding (folding is an
optimisation, and optimisations belong to the runtime under test), and the model's train/eval
mode is preserved rather than forced to eval.

Graph inputs are named `in_<i>` after the position of the tensor in `inputs`; non-tensor
inputs are baked in as constants by tracing.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

DEFAULT_OPSET = 17
DYNAMO_OPSET = 18  # the lowest opset the torch.export-based exporter writes


def input_name(position: int) -> str:
    return f"in_{position}"


def export_onnx(model: Any, inputs: tuple[Any, ...], opset: int = DEFAULT_OPSET, *, dynamo: bool = False) -> bytes:
    """The ONNX model (serialized) computing `model(*inputs)`; runs forward once to trace it.

    `dynamo=True`: the torch.export-based exporter PyTorch maintains today (needs onnxscript),
    with its own defaults, for the `onnx_export` target that tests the exporter itself."""
    import torch

    inputs = tuple(inputs)
    names = [input_name(i) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    if dynamo:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(model, inputs, input_names=names, opset_version=DYNAMO_OPSET, dynamo=True,
                                        verbose=False)
        return program.model_proto.SerializeToString()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            inputs,
            buf,
            input_names=names,
            opset_version=opset,
            dynamo=False,
            do_constant_folding=False,
            training=torch.onnx.TrainingMode.PRESERVE,
        )
    return buf.getvalue()
