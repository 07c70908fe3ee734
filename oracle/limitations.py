"""Known limitations: runtime and frontend errors that mean "this form is not supported", not a bug.

A user pointing NNForge at TVM wants TVM's bugs, not the list of ONNX forms its Relax frontend
declines. Each entry below is a documented refusal: the converter's or runtime's own check that
raises on a form it does not implement. It is matched structurally: the rung, the exception
type, the module that raised it (the innermost frame), and the message's fixed template, never a
loose phrase found anywhere. A match makes the rung `invalid` ("unsupported: <why>"); every other
error stays a crash. To add one, append a `Limitation` with the reason it is a limitation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

_TVM_ONNX = "tvm/relax/frontend/onnx/onnx_frontend.py"


@dataclass(frozen=True)
class Limitation:
    rungs: tuple[str, ...]
    exc_type: str  # the type's qualified name (as the oracle records it), matched by suffix
    message: str  # a regex for the message's fixed template, matched against its first line
    raised_in: str | None  # the file (as the oracle normalises it) of the innermost frame
    why: str

    def matches(self, rung: str, exc_type: str, first_line: str, innermost_file: str | None) -> bool:
        return (rung in self.rungs and exc_type.endswith(self.exc_type)
                and (self.raised_in is None or innermost_file == self.raised_in)
                and re.fullmatch(self.message, first_line) is not None)


KNOWN: tuple[Limitation, ...] = (
    Limitation(("tvm_frontend", "tvm_pipeline"), "ValueError", r"TopK sorted must be 1 for Relax frontend", _TVM_ONNX,
               "the TopK converter's own check: Relax's topk always sorts"),
    Limitation(("tvm_frontend", "tvm_pipeline"), "ValueError", r"Only constant split supported for SplitToSequence",
               _TVM_ONNX, "the SplitToSequence converter takes only constant split sizes"),
    Limitation(("tvm_frontend", "tvm_pipeline"), "ValueError", r"Node \S+ cannot handle ShapeExpr inputs\.", _TVM_ONNX,
               "the converter of this node declines shape-expression inputs"),
    Limitation(("tvm_frontend", "tvm_pipeline"), "OpNotImplemented",
               r"The following operators are not supported for frontend ONNX: .*", _TVM_ONNX,
               "the frontend has no converter for this ONNX operator"),
    Limitation(("tvm_frontend", "tvm_pipeline"), "Error", r".* (?:is|are) not supported yet\.?(?: .*)?", _TVM_ONNX,
               "a converter's own 'not supported yet' check for this attribute or input form"),
    Limitation(("tvm_frontend", "tvm_pipeline"), "InternalError",
               r"Check failed: \(data_type == PrimType::Float\(32\) \|\| data_type == PrimType::Float\(16\)\) is "
               r"false: layer_norm: only support float32 and float16 for now", "/project/include/tvm/topi/nn/layer_norm.h",
               "TOPI's layer_norm checks its dtype and implements float32 and float16 only (float64 'for now')"),
    Limitation(("ort_kernels", "ort_optimizer"), "NotImplemented",
               r"\[ONNXRuntimeError\] : 9 : NOT_IMPLEMENTED : Could not find an implementation for .*", None,
               "ONNX Runtime has no CPU kernel for this operator with these input types"),
)


def known_limitation(rung: str, exc_type: str | None, message: str | None, frames: Iterable[Any] = (),
                     table: tuple[Limitation, ...] = KNOWN) -> Limitation | None:
    """The entry of `table` this error is, or None (then it is a crash like any other)."""
    first = next((ln.strip() for ln in (message or "").splitlines() if ln.strip()), "")
    frames = list(frames)
    innermost = getattr(frames[-1], "file", None) if frames else None
    for lim in table:
        if lim.matches(rung, exc_type or "", first, innermost):
            return lim
    return None
