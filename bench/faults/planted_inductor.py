"""Faults in Inductor: lowerings, decompositions and C++ code generation.

Each is modelled on a class of bug Inductor has shipped: a reduction's initial value wrong for
some dtypes, integer division semantics mixed up (C truncation vs Python flooring), a vectorised
kernel that disagrees with the scalar one, a decomposition's fast path taken under too loose a
condition, and generated C++ that does not compile.
"""

from __future__ import annotations

from typing import Any, Callable

from fault_hook import fired, plant


def _replace_lowering(lowering: Any, op: Any, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Swap the registered lowering of every overload of `op` (they share one function)."""
    originals = {key: fn for key, fn in lowering.lowerings.items()
                 if key is op or getattr(key, "overloadpacket", None) is op}
    wrapped: dict[int, Callable[..., Any]] = {}
    for key, fn in originals.items():
        if id(fn) not in wrapped:
            wrapped[id(fn)] = make(fn)
        lowering.lowerings[key] = wrapped[id(fn)]


def _is_small_int(x: Any) -> bool:
    import torch

    return x.get_dtype() in (torch.int8, torch.int16, torch.int32)


@plant("inductor_int_amax_zero_init", layer="inductor lowering", module="torch._inductor.lowering",
       symptom="mismatch",
       summary="amax/max over int8/16/32 starts from 0 instead of the dtype's minimum: rows that are all negative reduce to 0")
def _amax_zero_init(lowering: Any) -> None:
    import torch

    aten = torch.ops.aten
    clamp_min = lowering.lowerings[aten.clamp_min.default]

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def amax(x: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(x, *args, **kwargs)
            if not _is_small_int(x):
                return out
            fired("inductor_int_amax_zero_init")
            return clamp_min(out, 0)
        return amax

    _replace_lowering(lowering, aten.amax, make)
    lowering.reduce_amax = make(lowering.reduce_amax)  # max.dim and max() reach the reduction through this name


@plant("inductor_int_remainder_trunc", layer="inductor lowering", module="torch._inductor.lowering",
       symptom="mismatch",
       summary="integer remainder by a tensor is lowered with C's truncating %, so a negative dividend gets a negative result")
def _remainder_trunc(lowering: Any) -> None:
    import torch

    aten = torch.ops.aten
    fmod = lowering.lowerings[aten.fmod.Tensor]

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def remainder(a: Any, b: Any) -> Any:
            if isinstance(a, lowering.TensorBox) and isinstance(b, lowering.TensorBox) \
                    and not a.get_dtype().is_floating_point and a.get_dtype() != torch.bool:
                fired("inductor_int_remainder_trunc")
                return fmod(a, b)
            return orig(a, b)
        return remainder

    _replace_lowering(lowering, aten.remainder, make)


@plant("inductor_vec_floor_trunc", layer="inductor codegen", module="torch._inductor.codegen.cpp",
       symptom="mismatch",
       summary="the vectorised C++ kernel emits trunc() for floor(): negative non-integers are wrong only where the loop vectorises")
def _vec_floor(cpp: Any) -> None:
    def floor(x: Any) -> str:
        fired("inductor_vec_floor_trunc")
        return f"{x}.trunc()"

    cpp.CppVecOverrides.floor = staticmethod(floor)


@plant("inductor_atan2_scalar_cpp", layer="inductor codegen", module="torch._inductor.codegen.cpp",
       symptom="crash",
       summary="the scalar C++ kernel's atan2 passes an undeclared variable: g++ fails on kernels too small to vectorise (fewer elements than one vector)")
def _scalar_atan2(cpp: Any) -> None:
    def atan2(x: Any, y: Any) -> str:
        fired("inductor_atan2_scalar_cpp")
        return f"std::atan2({x}, {y}_tail)"

    cpp.CppOverrides.atan2 = staticmethod(atan2)


@plant("inductor_hardtanh_relu6_path", layer="inductor decomposition", module="torch._inductor.decomposition",
       symptom="mismatch",
       summary="hardtanh with min_val=0 takes relu6's fast path and clamps at 6 whatever max_val is")
def _hardtanh(decomp: Any) -> None:
    import torch

    aten = torch.ops.aten

    orig = decomp.decompositions[aten.hardtanh.default]

    def hardtanh(x: Any, min_val: float = -1.0, max_val: float = 1.0) -> Any:
        if min_val == 0 and max_val != 6.0:
            fired("inductor_hardtanh_relu6_path")
            max_val = 6.0
        return orig(x, min_val, max_val)  # everything else as the real decomposition

    decomp.decompositions[aten.hardtanh.default] = hardtanh
