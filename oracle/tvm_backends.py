"""Apache TVM (Relax) as rungs, fed by the ONNX exporter.

Ladder for target `tvm`: `onnx_export` (the exported graph in onnx.reference: judges the exporter,
as for `ort`) -> `tvm_frontend` (relax.frontend.onnx.from_onnx, then only the lowering
TVM cannot do without: `default_build`, i.e. LegalizeOps and VM lowering with no folding or
fusion, under opt_level 0) -> `tvm_pipeline` (the CPU default pipeline: FoldConstant, FuseOps,
FuseTIR, under opt_level 3). If `tvm_frontend` is the first to disagree with eager, the importer (or TVM's
operator legalisation) is guilty; if only `tvm_pipeline` does, an optimising pass is.
"""

from __future__ import annotations

from typing import Any

from nnforge.oracle.backend import TargetSpec, Unsupported, register_backend, register_target
from nnforge.oracle.onnx_backends import OnnxBackend, _first_line


class TvmBackend(OnnxBackend):
    optimise: bool = False
    # TVM's legalised kernels reduce float16 in float16 (a ReduceSum over 32 halves is off by a few
    # roundings); value-only differences within job.LOW_PRECISION_SLACK_EPS are precision
    imprecise_in_low_precision = True

    @classmethod
    def available(cls) -> bool:
        try:
            import tvm  # noqa: F401
            from tvm.relax.frontend.onnx import from_onnx  # noqa: F401
        except Exception:
            return False
        return True

    @classmethod
    def version(cls) -> str:
        import tvm

        return tvm.__version__

    def execute(self, onnx_bytes: bytes, feeds: dict[str, Any]) -> list[Any]:
        import onnx
        import tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx

        proto = onnx.load_from_string(onnx_bytes)
        order = [i.name for i in proto.graph.input]
        try:
            mod = from_onnx(
                proto,
                shape_dict={n: list(feeds[n].shape) for n in order},
                dtype_dict={n: str(feeds[n].dtype) for n in order},
                keep_params_in_input=False,
            )
        except (tvm.error.OpNotImplemented, tvm.error.OpAttributeUnImplemented, NotImplementedError) as e:
            raise Unsupported(f"TVM's ONNX importer does not support this: {type(e).__name__}: {_first_line(e)}") from e
        target = tvm.target.Target("llvm")
        if self.optimise:
            with tvm.transform.PassContext(opt_level=3):
                exe = tvm.compile(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))
        else:
            with tvm.transform.PassContext(opt_level=0):
                exe = tvm.compile(mod, target=target, relax_pipeline="default_build")
        vm = relax.VirtualMachine(exe, tvm.cpu())
        out = vm["main"](*(tvm.runtime.tensor(feeds[n]) for n in order))
        return _flatten_tvm(out)


def _flatten_tvm(value: Any) -> list[Any]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    if isinstance(value, (list, tuple)) or type(value).__name__ == "Array":
        out: list[Any] = []
        for v in value:
            out.extend(_flatten_tvm(v))
        return out
    import numpy as np

    return [np.asarray(value)]


@register_backend
class TvmFrontendBackend(TvmBackend):
    name = "tvm_frontend"
    optimise = False


@register_backend
class TvmPipelineBackend(TvmBackend):
    name = "tvm_pipeline"
    optimise = True


# onnx_export first: an exporter that writes the wrong graph must not be blamed on TVM's importer
register_target(TargetSpec("tvm", ("onnx_export", "tvm_frontend", "tvm_pipeline"), family="onnx", gate_rungs=("onnx_export",),
                           doc="TVM Relax via ONNX; blames the exporter, the importer/legalisation or the optimising pipeline"))
