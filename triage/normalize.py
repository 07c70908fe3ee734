"""Normalising crash evidence so that one bug gives one key however it was reached.

Two crashes of the same compiler bug differ in everything incidental: the shapes and numbers in
the message, the generated value names (`v12`, `w3`, `n5_dim`, FX's `buf0`/`arg0_1`), the module
name the worker gave the program (`program_4711_3`), absolute paths and addresses, and the line
numbers of the frames (which move with every compiler release). What stays is the exception type,
the words of the message, and the functions inside the compiler that raised it. This module keeps
those and replaces the rest with placeholders.
"""

from __future__ import annotations

import re
from typing import Sequence

from nnforge.core.verdict import Frame

# -- messages -----------------------------------------------------------------------------------

# Order matters: paths and addresses first (they contain digits and names), then shapes (lists of
# numbers), then generated names (so their digits are not mistaken for numbers), then numbers.
_SUBSTITUTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    # ONNX type strings of integer and bool tensors: "Tanh ... has unsupported type: tensor(int16)"
    # is one exporter bug (no cast to float) whichever integer type the program happened to feed
    (re.compile(r"\btensor\((?:u?int(?:8|16|32|64)|bool)\)"), "tensor(<int>)"),
    # absolute paths and paths with a directory, optionally with :line or ", line N"
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.\-+~]+)+/?(?::\d+)?"), "<path>"),
    (re.compile(r"\b(?:program|model|repro)_\w*\d\w*"), "<module>"),  # program_4711_3, program_ab12cd
    (re.compile(r"torch\.Size\(\[[^\]]*\]\)"), "<shape>"),
    # shape-like brackets: [2, 3], (4,), [s0, 3], [] ; only numbers, symbols and commas inside
    (re.compile(r"[\[(]\s*(?:-?\w+\s*,\s*)*-?\w+\s*,?\s*[\])](?=[^\w(]|$)"), "_SHAPE_CANDIDATE_"),
    # an empty pair no call follows is a 0-d tensor's shape: "R.Tensor((), ...)" keys as "R.Tensor((2, 3), ...)"
    (re.compile(r"(?<![\w\]])(?:\(\s*\)|\[\s*\])(?=[^\w(]|$)"), "<shape>"),
    # generated names of the generator, FX, Inductor and symbolic shapes
    (re.compile(r"\b(?:v|w|x|buf|arg|primals|tangents|getitem|tmp|s|u|ps|zuf|unbacked)\d+(?:_\w+)?\b"), "<name>"),
    (re.compile(r"\bn\d+_\w+"), "<name>"),  # n5_dim: per-node generated attribute names
    (re.compile(r"\b(?:lv|gv)\d*\b"), "<name>"),  # TVM Relax's binding variables: lv, lv24, gv1
    (re.compile(r"\btmp_\w+"), "<name>"),
    # the operator a TVM message names after its namespace (tirx.asin, R.subtract): one missing
    # intrinsic or one type check is one bug whichever operator reached it first (torch's aten.X
    # stays: a meta function or a lowering is per operator, and so are its bugs)
    (re.compile(r"\b(tirx|tir|R|relax|topi|llvm)\.(?!<)[A-Za-z_]\w*"), r"\1.<op>"),
    (re.compile(r"%\w+"), "%<node>"),  # FX node references in "While executing %sin_1 : ..."
    (re.compile(r"\b([A-Za-z][A-Za-z]*?)_\d+\b"), r"\1_<n>"),  # FX node names sin_1, add_3
    (re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])"), "<num>"),
    (re.compile(r"\b(?:inf|nan)\b"), "<num>"),
)
_SHAPE_INNER = re.compile(r"^[\[(]\s*(?:-?(?:\d+|<name>|s\d+|u\d+)\s*,\s*)*-?(?:\d+|<name>|s\d+|u\d+)?\s*,?\s*[\])]$")
_WS = re.compile(r"\s+")


def normalize_message(msg: str) -> str:
    """`msg` with numbers, shapes, addresses, paths and generated names replaced by placeholders.

    Words, torch's operator names and dtypes (`float32`, `aten.sin`, `conv2d`) stay: they are
    what tells one bug from another. An operator a TVM message names after its namespace
    (`tirx.asin`, `R.subtract`) becomes `tirx.<op>`: TVM's missing intrinsic or type check that
    names whichever operator reached it first is one bug, not one per operator. Whitespace runs
    collapse to one space.
    """
    text = msg or ""
    for pattern, repl in _SUBSTITUTIONS:
        if repl == "_SHAPE_CANDIDATE_":
            text = pattern.sub(_shape_or_keep, text)
        else:
            text = pattern.sub(repl, text)
    return _WS.sub(" ", text).strip()


def _shape_or_keep(m: re.Match[str]) -> str:
    """A bracketed list is a shape when it holds only integers or size symbols."""
    inner = m.group(0)
    body = inner[1:-1].strip().rstrip(",")
    items = [x.strip() for x in body.split(",") if x.strip()]
    if all(re.fullmatch(r"-?\d+|[su]\d+", x) for x in items):
        return "<shape>"
    return inner


def headline(msg: str, limit: int = 240) -> str:
    """The normalised first non-empty line of a message: the part a crash key compares.

    Compilers append dumps (FX graphs, generated code, "Set TORCH_LOGS=..." advice) below the
    first line; those vary with the program and would split one bug into many keys.
    """
    for line in (msg or "").splitlines():
        if line.strip():
            return normalize_message(line)[:limit]
    return ""


# -- frames -------------------------------------------------------------------------------------

# Files whose frames belong to a system under test. The planted faults of oracle/faulty.py count
# as compiler code: they stand in for a real lowering bug in tests.
_COMPILER_PREFIXES = (
    "torch/_dynamo/", "torch/_inductor/", "torch/_functorch/", "torch/_subclasses/", "torch/fx/",
    "torch/_decomp/", "torch/_refs/", "torch/_prims/", "torch/export/", "torch/onnx/",
    "onnxruntime/", "tvm/", "onnx/", "onnxscript/",
)
_PLANTED = ("oracle/faulty.py",)

# Frames that only pass a call along: they name no bug.
_WRAPPER_FILES = (
    "functools.py", "contextlib.py", "torch/_ops.py", "torch/_dynamo/eval_frame.py",
    "torch/utils/_python_dispatch.py", "torch/_dynamo/convert_frame.py", "torch/_compile.py",
    "torch/_utils_internal.py", "torch/_dynamo/repro/",
    "torch/_inductor/debug.py", "torch/_dynamo/backends/common.py", "torch/_functorch/_aot_autograd/logging_utils.py",
    "torch/_strobelight/", "torch/_library/",
)
_WRAPPER_FUNCS = re.compile(
    r"^(?:wrapper|wrapped|wrap|inner|_fn|fn|_wrapped_call_impl|_call_impl|__call__|decorator|decorate_context|"
    r"_callback_from_stance|catch_errors|_compile_fx_inner|debug_wrapper|time_wrapper|dynamo_timed|"
    r"dispatch\w*|\w*_dispatch|redispatch|_call_user_compiler|call_user_compiler|<lambda>|<genexpr>|<listcomp>)$"
)
# NNForge's own plumbing (the worker, the job, backends) is never the bug.
_OWN_CODE = re.compile(r"(?:^|/)(?:nnforge/)?(?:oracle|core|generator|mutators|triage|agent)/(?!faulty\.py)[\w/]+\.py$")


def frame_label(frame: Frame) -> str | None:
    """'pkg/file.py:function' for a frame inside a compiler, None for any other frame."""
    path = frame.file.replace("\\", "/")
    for planted in _PLANTED:
        if path.endswith(planted):
            return f"nnforge/{planted}:{frame.function}"
    for prefix in _COMPILER_PREFIXES:
        i = _prefix_at(path, prefix)
        if i >= 0:
            return f"{path[i:]}:{frame.function}"
    return None


def _prefix_at(path: str, prefix: str) -> int:
    """Index where `prefix` starts as a whole path component in `path`, or -1."""
    if path.startswith(prefix):
        return 0
    i = path.find("/" + prefix)
    return i + 1 if i >= 0 else -1


def is_wrapper(frame: Frame) -> bool:
    path = frame.file.replace("\\", "/")
    if any(path.endswith(w) or ("/" + w) in path or path.startswith(w) for w in _WRAPPER_FILES):
        return True
    if _OWN_CODE.search(path):
        return True
    return bool(_WRAPPER_FUNCS.match(frame.function))


def compiler_frames(frames: Sequence[Frame], limit: int = 3) -> tuple[str, ...]:
    """The innermost `limit` compiler frames (innermost first) as 'pkg/file.py:function'.

    `frames` run outermost first, as verdicts store them. Wrapper frames (dispatch, decorators,
    functools, contextlib, torch/_ops.py, eval_frame, NNForge's own job and backend code) are
    skipped; line numbers are dropped because they move with every release.
    """
    out: list[str] = []
    for frame in reversed(list(frames)):
        if is_wrapper(frame):
            continue
        label = frame_label(frame)
        if label is None or (out and out[-1] == label):
            continue
        out.append(label)
        if len(out) >= limit:
            break
    return tuple(out)
