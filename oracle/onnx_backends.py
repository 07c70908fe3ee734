"""ONNX export and ONNX Runtime as rungs.

Ladder for target `ort`: `onnx_export` (the exported graph run by `onnx.reference`'s
ReferenceEvaluator: if even that disagrees with eager, the exporter is guilty; skipped when the
evaluator cannot run the graph) -> `ort_kernels` (ORT with every graph optimisation off) ->
`ort_optimizer` (ORT_ENABLE_ALL).

Every call is exported afresh with that call's arguments and model state, so invocation
sequences that change shapes or attributes are followed; export traces forward exactly once, so
the program's Python side effects happen once per call, as in eager.
"""

from __future__ import annotations

from typing import Any

from nnforge.oracle.backend import Backend, ExportFailed, RungSkipped, TargetSpec, Unsupported, register_backend, register_target

_UNSUPPORTED_EXPORT_PHRASES = (
    "is not supported",
    "not supported",
    "Unsupported",
    "Only tuples, lists and Variables",
    "Could not export",
    "unsupported",
    "does NOT support",  # "ONNX export does NOT support exporting bitwise OR for non-boolean input values"
    "No ONNX function found",  # the torch.export-based exporter has no translation for an ATen op
)


class OnnxBackend(Backend):
    """Exports each call with `generator.to_onnx.export_onnx`, then runs the graph somehow."""

    flat_outputs = True
    needs_export = True
    dynamo_export: bool = False  # the torch.export-based exporter instead of the TorchScript one
    exporter_under_test: bool = False  # an export failure is this rung's own finding, not a gate's

    def run_one(self, model: Any, args: tuple[Any, ...], call_index: int) -> Any:
        import torch

        onnx_bytes = export_for_backend(model, args, dynamo=self.dynamo_export)
        feeds = feeds_for(onnx_bytes, args)
        outs = self.execute(onnx_bytes, feeds)
        return [torch.from_numpy(_np_array(o).copy()) for o in outs]

    def execute(self, onnx_bytes: bytes, feeds: dict[str, Any]) -> list[Any]:
        raise NotImplementedError


def export_for_backend(model: Any, args: tuple[Any, ...], *, dynamo: bool = False) -> bytes:
    """Export, telling a limitation of ONNX (Unsupported) from an exporter failure (ExportFailed)."""
    import torch

    from nnforge.generator.to_onnx import export_onnx

    for a in args:
        if isinstance(a, torch.Tensor) and a.dtype in (torch.bfloat16,) or isinstance(a, (list, tuple, dict)):
            raise Unsupported(f"ONNX backends take no {'bfloat16 tensors' if isinstance(a, torch.Tensor) else 'nested inputs'} as inputs")
    try:
        onnx_bytes = export_onnx(model, args, dynamo=dynamo)
    except Exception as e:
        errors = getattr(torch.onnx, "errors", None)
        unsupported_type = getattr(errors, "UnsupportedOperatorError", ()) if errors else ()
        if (unsupported_type and isinstance(e, unsupported_type)) or any(p in str(e) for p in _UNSUPPORTED_EXPORT_PHRASES):
            raise Unsupported(f"the ONNX exporter cannot express this program: {type(e).__name__}: {_first_line(e)}") from e
        raise ExportFailed(f"ONNX export failed: {type(e).__name__}: {_first_line(e)}") from e
    check_exported(onnx_bytes)
    return onnx_bytes


def check_exported(onnx_bytes: bytes) -> None:
    """An exported model that breaks ONNX's own typing rules (e.g. MaxPool on int32) is the
    exporter's fault: without this check, the runtime that refuses it would be blamed."""
    import onnx

    try:
        onnx.checker.check_model(onnx.load_from_string(onnx_bytes), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ExportFailed(f"the exporter wrote an invalid ONNX model: {type(e).__name__}: {_first_line(e)}") from e


def feeds_for(onnx_bytes: bytes, args: tuple[Any, ...]) -> dict[str, Any]:
    """Graph input name -> numpy array (the exporter drops inputs the graph does not use)."""
    import onnx
    import torch

    from nnforge.generator.to_onnx import input_name

    graph_inputs = {i.name for i in onnx.load_from_string(onnx_bytes).graph.input}
    feeds = {}
    for pos, a in enumerate(args):
        name = input_name(pos)
        if name in graph_inputs and isinstance(a, torch.Tensor):
            feeds[name] = a.detach().resolve_conj().resolve_neg().contiguous().numpy()
    missing = graph_inputs - set(feeds)
    if missing:
        raise ExportFailed(f"the exported graph has inputs no argument feeds: {sorted(missing)}")
    return feeds


def _np_array(x: Any) -> Any:
    import numpy as np

    return np.asarray(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


@register_backend
class OnnxReferenceBackend(OnnxBackend):
    """The exported graph, run by onnx's pure-Python reference evaluator: judges the exporter."""

    name = "onnx_export"
    # numpy computes float16 reductions and normalisations in float16, where eager accumulates in
    # float32: a value-only difference there says nothing about the exporter (job.judge_outputs)
    imprecise_in_low_precision = True

    @classmethod
    def available(cls) -> bool:
        try:
            import onnx.reference  # noqa: F401
        except ImportError:
            return False
        return True

    @classmethod
    def version(cls) -> str:
        import onnx

        return onnx.__version__

    def execute(self, onnx_bytes: bytes, feeds: dict[str, Any]) -> list[Any]:
        import onnx
        from onnx.helper import tensor_dtype_to_np_dtype
        from onnx.reference import ReferenceEvaluator

        proto = onnx.load_from_string(onnx_bytes)
        try:
            outs = ReferenceEvaluator(proto).run(None, feeds)
        except (ValueError, IndexError) as e:
            # numpy refused what an operator was given (a Reshape to a size the data does not have, an
            # axis a 0-d tensor lacks): the exported graph contradicts itself, which ORT and TVM would
            # then be blamed for
            raise ExportFailed(f"the exported graph cannot be evaluated (onnx.reference): {type(e).__name__}: "
                               f"{_first_line(e)}") from e
        except Exception as e:  # an operator or dtype the reference evaluator does not implement
            raise RungSkipped(f"onnx.reference cannot run the exported graph: {type(e).__name__}: {_first_line(e)}") from e
        outs = [_np_array(o) for o in outs]
        for decl, o in zip(proto.graph.output, outs):
            want = tensor_dtype_to_np_dtype(decl.type.tensor_type.elem_type)
            if o.dtype != want:
                raise RungSkipped(f"onnx.reference returned {o.dtype} for output {decl.name} declared {want}")
        return outs


@register_backend
class OnnxDynamoExportBackend(OnnxReferenceBackend):
    """The exporter PyTorch maintains today (`torch.onnx.export(..., dynamo=True)`, onnxscript)
    under test: its graph, run by onnx's reference evaluator, against eager. Export crashes and
    checker rejections are its findings; an ATen op it has no translation for is unsupported."""

    name = "onnx_dynamo_export"
    dynamo_export = True
    exporter_under_test = True

    @classmethod
    def available(cls) -> bool:
        import importlib.util

        return super().available() and importlib.util.find_spec("onnxscript") is not None


class OrtBackend(OnnxBackend):
    level_name: str = ""

    @classmethod
    def available(cls) -> bool:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return False
        return True

    @classmethod
    def version(cls) -> str:
        import onnxruntime

        return onnxruntime.__version__

    def execute(self, onnx_bytes: bytes, feeds: dict[str, Any]) -> list[Any]:
        import onnxruntime as ort
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

        opts = ort.SessionOptions()
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, self.level_name)
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            session = ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])
            return session.run(None, feeds)
        except ort_state.NotImplemented as e:
            raise Unsupported(f"ONNX Runtime has no kernel for this: {_first_line(e)}") from e


@register_backend
class OrtKernelsBackend(OrtBackend):
    """ORT with graph optimisations off: its kernels alone."""

    name = "ort_kernels"
    level_name = "ORT_DISABLE_ALL"


@register_backend
class OrtOptimizerBackend(OrtBackend):
    """ORT with every graph optimisation on (fusions, constant folding, layout changes)."""

    name = "ort_optimizer"
    level_name = "ORT_ENABLE_ALL"


register_target(TargetSpec("ort", ("onnx_export", "ort_kernels", "ort_optimizer"), family="onnx", gate_rungs=("onnx_export",),
                           doc="ONNX Runtime; blames the exporter, ORT's kernels or ORT's optimiser"))
register_target(TargetSpec("onnx_export", ("onnx_dynamo_export",), family="onnx",
                           doc="the ONNX exporter itself (torch.onnx.export dynamo=True) in onnx.reference; "
                               "off by default"))
