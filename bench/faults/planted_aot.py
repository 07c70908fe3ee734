"""Faults in AOTAutograd: input mutation handling and the compiled backward's runtime wrapper.

Each is modelled on a class of bug AOTAutograd has shipped: an in-place update of a graph input
(a buffer, an argument) that functionalization sees but the graph never writes back, and a
compiled backward that takes the incoming gradient's layout on trust.
"""

from __future__ import annotations

from typing import Any

from fault_hook import fired, plant


def _dynamo_skips(fn: Any) -> Any:
    """Keep Dynamo from tracing a wrapper that runs inside a compiled region's backward (autograd
    calls it from user frames Dynamo is watching; the originals live in files Dynamo skips)."""
    import torch

    ef = torch._C._dynamo.eval_frame
    ef.set_code_exec_strategy(fn.__code__, ef._FrameExecStrategy(ef._FrameAction.SKIP, ef._FrameAction.DEFAULT))
    return fn


@plant("aot_nograd_input_mutation_dropped", layer="aotautograd",
       module="torch._functorch._aot_autograd.graph_capture_wrappers", symptom="mismatch", target="inductor",
       summary="an in-place update of a graph input or buffer made under torch.no_grad() gets no copy_ back "
               "into the input in the functionalized graph: the mutation is lost")
def _nograd_mutation(gcw: Any) -> None:
    orig = gcw.apply_in_graph_mutations

    def apply_in_graph_mutations(input_info: Any, inpt_old: Any, inpt_new: Any, *args: Any, **kwargs: Any) -> None:
        if (input_info.mutates_data and input_info.mutations_under_no_grad_or_inference_mode
                and not input_info.mutations_hidden_from_autograd and not input_info.mutates_storage_metadata
                and not input_info.mutation_inductor_storage_resize):
            fired("aot_nograd_input_mutation_dropped")
            return  # the no_grad branch forgets its copy_
        orig(input_info, inpt_old, inpt_new, *args, **kwargs)

    gcw.apply_in_graph_mutations = apply_in_graph_mutations


# Patched from graph_compile, which torch imports lazily at the first compile, when runtime_wrappers (the
# function's home) is complete: runtime_wrappers itself cannot be imported first in a fresh process
# (torch's own circular import through torch._dynamo), which the benchmark's child check does.
@plant("aot_tangent_restride_no_copy", layer="aotautograd",
       module="torch._functorch._aot_autograd.graph_compile", symptom="mismatch", target="inductor",
       summary="backward: an incoming gradient whose strides differ from the non-contiguous output it belongs to is "
               "as_strided to the expected strides instead of copied, so its elements are read in the wrong order")
def _tangent_restride(graph_compile: Any) -> None:
    import sys

    rw = sys.modules["torch._functorch._aot_autograd.runtime_wrappers"]
    orig = rw.coerce_to_expected_memory_format

    def coerce_to_expected_memory_format(x: Any, memory_format: Any) -> Any:
        size, stride = memory_format.size, memory_format.stride
        if (memory_format.memory_format is None and size is not None and stride is not None
                and x.shape == size and tuple(x.stride()) != tuple(stride) and x.is_contiguous()
                and x.dim() >= 2 and 0 not in stride
                and sum((n - 1) * s for n, s in zip(size, stride)) == x.numel() - 1):  # a dense permutation
            fired("aot_tangent_restride_no_copy")
            return x.as_strided(size, stride, x.storage_offset())  # a view, where a copy was needed
        return orig(x, memory_format)

    rw.coerce_to_expected_memory_format = _dynamo_skips(coerce_to_expected_memory_format)
