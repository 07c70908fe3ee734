"""Faults in TVM Relax: the ONNX importer's converters and the CPU optimising pipeline.

Each is modelled on a class of bug TVM's importers and passes have shipped: an attribute read
under the wrong name (so its default wins), a negative axis normalised off by one, a
multi-axis reduction whose squeezes do not account for the axes already removed, and a
strength reduction that drops the reciprocal of a negative exponent.
"""

from __future__ import annotations

from typing import Any

from fault_hook import fired, plant


def _wrap_converter(cls: Any, version: str, make: Any) -> None:
    """Replace `cls._impl_v<version>` (a classmethod) by `make(original bound method)`."""
    orig = getattr(cls, version)
    setattr(cls, version, classmethod(make(orig)))


def _rank(expr: Any) -> int | None:
    ndim = getattr(getattr(expr, "ty", None), "ndim", None)
    return ndim if isinstance(ndim, int) and ndim >= 0 else None


@plant("tvm_leakyrelu_alpha_default", layer="tvm frontend", module="tvm.relax.frontend.onnx.onnx_frontend",
       symptom="mismatch", target="tvm",
       summary="the ONNX LeakyRelu converter looks its alpha up under the wrong name: a non-default slope becomes 0.01")
def _leakyrelu(fe: Any) -> None:
    def make(orig: Any) -> Any:
        def impl(cls: Any, bb: Any, inputs: Any, attr: Any, params: Any) -> Any:
            if "alpha" in attr and abs(float(attr["alpha"]) - 0.01) > 1e-6:
                fired("tvm_leakyrelu_alpha_default")
            return orig(bb, inputs, {k: v for k, v in attr.items() if k != "alpha"}, params)
        return impl

    _wrap_converter(fe.LeakyRelu, "_impl_v1", make)


@plant("tvm_concat_neg_axis_off_by_one", layer="tvm frontend", module="tvm.relax.frontend.onnx.onnx_frontend",
       symptom="mismatch", target="tvm",
       summary="the ONNX Concat converter normalises a negative axis against rank - 1: axis=-1 joins along the "
               "second-to-last dimension of tensors of rank >= 2")
def _concat(fe: Any) -> None:
    def make(orig: Any) -> Any:
        def impl(cls: Any, bb: Any, inputs: Any, attr: Any, params: Any) -> Any:
            axis = attr.get("axis", 0)
            ndim = _rank(inputs[0]) if inputs else None
            if axis < 0 and ndim is not None and ndim >= 2:
                fired("tvm_concat_neg_axis_off_by_one")
                attr = {**attr, "axis": axis + ndim - 1}
            return orig(bb, inputs, attr, params)
        return impl

    _wrap_converter(fe.Concat, "_impl_v13", make)


@plant("tvm_reducemax_multi_axis_squeeze", layer="tvm frontend", module="tvm.relax.frontend.onnx.onnx_frontend",
       symptom="crash", target="tvm",
       summary="ReduceMax with keepdims=0 over several axes reduces with keepdims and then squeezes the axes one at a "
               "time without shifting the later ones: the second squeeze is out of range or hits a non-1 dimension")
def _reducemax(fe: Any) -> None:
    from tvm import relax

    def make(orig: Any) -> Any:
        def impl(cls: Any, bb: Any, inputs: Any, attr: Any, params: Any) -> Any:
            axes = attr.get("axes", None)
            ndim = _rank(inputs[0])
            if attr.get("keepdims", 1) != 0 or not axes or len(axes) < 2 or ndim is None:
                return orig(bb, inputs, attr, params)
            fired("tvm_reducemax_multi_axis_squeeze")
            out = bb.normalize(relax.op.max(inputs[0], list(axes), True))
            for axis in sorted(a % ndim for a in axes):
                out = bb.normalize(relax.op.squeeze(out, [axis]))
            return out
        return impl

    _wrap_converter(fe.ReduceMax, "_impl_v11", make)


@plant("tvm_pipeline_pow_neg_exponent", layer="tvm passes", module="tvm.relax.backend.cpu_generic.pipeline",
       symptom="mismatch", target="tvm",
       summary="the CPU pipeline's strength reduction of power by a constant integer exponent (-4..-2) into "
               "multiplications drops the reciprocal: x ** -2 becomes x * x")
def _pow_strength(pipeline: Any) -> None:
    orig = pipeline.legalize_passes

    def strength_reduce_power() -> Any:
        import tvm
        from tvm import relax
        from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

        base, exponent = wildcard(), is_const()
        pattern = is_op("relax.power")(base, exponent)

        def rewrite(expr: Any, matches: Any) -> Any:
            value = matches[exponent].value.numpy()
            if value.ndim != 0 or float(value) != int(value) or not -4 <= int(value) <= -2:
                return expr
            fired("tvm_pipeline_pow_neg_exponent")
            x = matches[base]
            out = x
            for _ in range(-int(value) - 1):
                out = relax.op.multiply(out, x)
            return out  # the 1 / (...) of a negative exponent is forgotten

        @tvm.transform.module_pass(opt_level=0, name="StrengthReducePower")
        def run(mod: Any, _ctx: Any) -> Any:
            for gv, func in list(mod.functions.items()):
                if isinstance(func, relax.Function):
                    mod[gv] = rewrite_call(pattern, rewrite, func)
            return mod

        return run

    def legalize_passes(target: Any) -> list[Any]:
        return [strength_reduce_power()] + list(orig(target))

    pipeline.legalize_passes = legalize_passes
