"""`repro.py` for a finding: one standalone script a maintainer can paste into an issue and run.

The script embeds everything the run used: the program source (as is, at module level, so
Dynamo can read its lines), the values (literal tensors when they are few and plain, otherwise
base64 of `torch.save` bytes), the invocation sequence as straight-line code, the target with
its options, and the comparison. It needs only torch (plus onnxruntime / onnx / tvm for those
targets); a test-only planted fault (`faulty_*` targets) also needs nnforge, and says so.

Exit status: 1 while the bug is present, 0 once it is fixed, 2 when the script cannot tell (the
eager reference itself fails, or a different error shows up).

Comparison follows PyTorch's rules for fuzzer reports: `torch.testing.assert_close` default
tolerances for the dtype; a result outside them still passes when it is as close to a float64
run as eager is (`torch._dynamo.utils.same(..., fp64_ref=...)`); `fallback_random=True` so
random ops draw from eager's stream; and only the output the oracle flagged is compared, so an
argmax/argmin index that differs on a tie elsewhere cannot make the script fail.
"""

from __future__ import annotations

import base64
import io
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Verdict
from nnforge.generator.to_onnx import DEFAULT_OPSET as ONNX_OPSET
from nnforge.generator.to_onnx import DYNAMO_OPSET

# torch.compile backend for each rung of the torch ladders that a plain torch install has.
TORCH_RUNG_BACKENDS = {"dynamo": "eager", "aot_autograd": "aot_eager", "inductor": "inductor"}
LITERAL_MAX_ELEMS = 64  # at most this many tensor elements in total are written as literals
_LITERAL_DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}


@dataclass(frozen=True)
class ReproTarget:
    """What the script compiles with: a target and the rung of its ladder to run."""

    target: str  # the target text, e.g. "inductor:dynamic=true" or "faulty_crash:sin"
    rung: str  # backend name of the rung, e.g. "inductor", "aot_autograd", "ort_optimizer"
    family: str  # "torch" | "onnx"
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def needs_nnforge(self) -> bool:
        return self.family == "torch" and self.rung not in TORCH_RUNG_BACKENDS

    @property
    def label(self) -> str:
        if self.family == "torch" and self.rung in TORCH_RUNG_BACKENDS:
            return f'torch.compile(backend="{TORCH_RUNG_BACKENDS[self.rung]}")'
        return {"onnx_export": "torch.onnx.export + onnx.reference",
                "onnx_dynamo_export": "torch.onnx.export(dynamo=True) + onnx.reference", "ort_kernels": "onnxruntime (ORT_DISABLE_ALL)",
                "ort_optimizer": "onnxruntime (ORT_ENABLE_ALL)", "tvm_frontend": "TVM Relax (opt_level=0)",
                "tvm_pipeline": "TVM Relax (default pipeline)"}.get(self.rung, f"{self.target} ({self.rung})")


def resolve_target(target: str, rung: str | None) -> ReproTarget:
    """The rung to reproduce on: the guilty rung when it belongs to `target`'s ladder (the most
    precise repro: `backend="eager"` for a Dynamo bug), else the target's system under test."""
    from nnforge.oracle.backend import parse_target

    t = parse_target(target)
    chosen = rung if rung in t.spec.rungs else t.spec.rungs[-1]
    return ReproTarget(target=t.name, rung=chosen, family=t.spec.family, params=tuple(sorted(t.params.items())))


# -- values ----------------------------------------------------------------------------------------------
def _count_elems(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (list, tuple)):
        return sum(_count_elems(v) for v in value)
    if isinstance(value, dict):
        return sum(_count_elems(v) for v in value.values())
    return 0


def literal(value: Any) -> str | None:
    """Python source that rebuilds `value` exactly, or None when it cannot be written plainly
    (a non-contiguous or complex tensor, a NaN, an object)."""
    import torch

    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        if value.layout != torch.strided or not value.is_contiguous() or dtype not in _LITERAL_DTYPES:
            return None
        if value.numel() == 0:
            return f"torch.empty({list(value.shape)}, dtype=torch.{dtype})"
        if value.is_floating_point() and not bool(torch.isfinite(value.detach().float()).all()):
            return None
        data = _short_floats(value) if dtype in ("float16", "float32") else value.detach().tolist()
        grad = ", requires_grad=True" if value.requires_grad else ""
        return f"torch.tensor({data!r}, dtype=torch.{dtype}{grad})"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, (tuple, list)):
        parts = [literal(v) for v in value]
        if any(p is None for p in parts):
            return None
        if isinstance(value, tuple):
            return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"  # type: ignore[arg-type]
        return "[" + ", ".join(parts) + "]"  # type: ignore[arg-type]
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            lv = literal(v)
            if lv is None or not isinstance(k, str):
                return None
            parts.append(f"{k!r}: {lv}")
        return "{" + ", ".join(parts) + "}"
    return None


def _short_floats(value: Any) -> Any:
    """Nested lists of the shortest decimals that round back to the same float16/float32 values
    (numpy prints those), so `1.540996` is written rather than `1.5409960746765137`."""
    import numpy as np

    arr = value.detach().numpy()
    short = np.array([float(str(x)) for x in arr.reshape(-1)], dtype=np.float64).reshape(arr.shape)
    return short.tolist()


def _lines(items: list[str], open_: str, close: str) -> str:
    """A literal container with one item per line (a tuple of one keeps its comma)."""
    if not items:
        return open_ + close
    return open_ + "\n" + "".join(f"    {it},\n" for it in items) + close


def _values_section(inputs: tuple[Any, ...] | None, state: dict[str, Any] | None,
                    call_args: list[tuple[Any, ...]] | None) -> str:
    bundle = (inputs, state, call_args)
    if _count_elems(bundle) <= LITERAL_MAX_ELEMS:
        parts = [literal(inputs), literal(state), literal(call_args)]
        if all(p is not None for p in parts):
            if inputs:
                parts[0] = _lines([literal(v) for v in inputs], "(", ")")  # type: ignore[misc]
            if state:
                parts[1] = _lines([f"{k!r}: {literal(v)}" for k, v in state.items()], "{", "}")
            return (f"REPRO_INPUTS = {parts[0]}\n"
                    f"REPRO_STATE_DICT = {parts[1]}\n"
                    f"REPRO_CALL_ARGS = {parts[2]}  # per call, when the invocation sequence changes inputs\n")
    import torch

    buf = io.BytesIO()
    torch.save(bundle, buf)
    text = base64.b64encode(buf.getvalue()).decode("ascii")
    lines = "\n".join(textwrap.wrap(text, 100))
    return ("# (inputs, state_dict, per-call args): torch.save bytes, base64-encoded\n"
            f'REPRO_VALUES = """\n{lines}\n"""\n'
            "REPRO_INPUTS, REPRO_STATE_DICT, REPRO_CALL_ARGS = torch.load(\n"
            "    io.BytesIO(base64.b64decode(REPRO_VALUES)), weights_only=True)\n")


def _per_call_args(case: TestCase) -> list[tuple[Any, ...]] | None:
    """Each call's arguments, when a call step changes inputs (computed exactly as the oracle does)."""
    if case.inputs is None or not any(step.inputs for step in case.calls):
        return None
    from nnforge.core.replay import build_args

    return [tuple(build_args(tuple(case.inputs), step.inputs, seed=i)) for i, step in enumerate(case.calls)]


# -- the invocation sequence as code ------------------------------------------------------------------------
def _call_code(i: int, step: CallStep) -> str:
    lines = [f"def repro_call_{i}(model, fn, reset):"]
    if step.mode == "train":
        lines.append("    model.train()")
    elif step.mode == "eval":
        lines.append("    model.eval()")
    for path, value in step.set_attrs.items():
        lines.append(f"    repro_set_attr(model, {path!r}, {value!r})")
    for name, value in step.set_globals.items():
        lines.append(f"    globals()[{name!r}] = {value!r}")
    if step.zero_grad:
        lines.append("    zero_grad(model)")
    if step.param_requires_grad:
        lines.append(f"    set_param_requires_grad(model, {dict(step.param_requires_grad)!r})")
    if i > 0 and step.reset_cache:
        lines.append("    reset()  # the sequence drops the compiler's cache before this call")
    lines.append(f"    args = repro_args({i})")
    if step.backward and step.grad_enabled is not False:
        lines.append("    args, leaves = with_grad_inputs(args)  # float inputs: leaves that require grad")
        lines.append(f"    torch.manual_seed({i})")
        lines.append("    with torch.enable_grad():")
        lines.append("        out = fn(*args)")
        twice = ", twice=True" if step.retain_graph else ""
        what = "the backward of this call" + (", twice through the retained graph" if step.retain_graph else "")
        lines.append(f"        gradients = call_gradients(model, leaves, out, {i}{twice})  # {what}")
        if step.optimizer is not None:
            lines.append(f"        optimizer_step(model, gradients, {step.optimizer!r})  # a training step: this model's own optimizer")
        lines.append("    return (out, {'gradients': gradients}), args")
        return "\n".join(lines) + "\n"
    lines.append(f"    torch.manual_seed({i})")
    if step.grad_enabled is None:
        lines.append("    out = fn(*args)")
    else:
        lines.append(f"    with torch.set_grad_enabled({step.grad_enabled}):")
        lines.append("        out = fn(*args)")
    lines.append("    return out, args")
    return "\n".join(lines) + "\n"


# -- the target as code --------------------------------------------------------------------------------------------
def _target_code(rt: ReproTarget) -> str:
    if rt.family == "torch":
        return _torch_target_code(rt)
    return _onnx_export_code(rt) + "\n\n" + _onnx_run_code(rt) + "\n\n" + textwrap.dedent('''\
        def repro_target(model):
            """The system under test: every call is exported afresh and run."""
            import numpy as np

            def fn(*args):
                onnx_bytes = repro_export(model, args)
                return [torch.from_numpy(np.asarray(o).copy()) for o in repro_run_onnx(onnx_bytes, repro_feeds(onnx_bytes, args))]

            return fn, lambda: None
        ''')


def _torch_target_code(rt: ReproTarget) -> str:
    """torch.compile with the rung's backend and the target's options (or a planted fault)."""
    params = dict(rt.params)
    if rt.needs_nnforge:
        return textwrap.dedent(f'''\
            def repro_target(model):
                """The system under test: a test-only planted fault of NNForge (needs nnforge importable)."""
                import torch._inductor.config
                from nnforge.oracle.backend import parse_target

                torch._inductor.config.fallback_random = True
                torch._dynamo.reset()
                rung = parse_target({rt.target!r}).ladder([{rt.rung!r}])[0]
                return rung.wrap_compiled(model, torch.compile(model, **rung.compile_kwargs())), torch._dynamo.reset
            ''')
    kwargs = [f'backend="{TORCH_RUNG_BACKENDS[rt.rung]}"']
    if params.get("dynamic") is not None:
        kwargs.append(f"dynamic={bool(params['dynamic'])}")
    if params.get("fullgraph"):
        kwargs.append("fullgraph=True")
    if params.get("mode") and rt.rung == "inductor":
        kwargs.append(f"mode={str(params['mode'])!r}")
    return textwrap.dedent(f'''\
        def repro_target(model):
            """The system under test."""
            import torch._inductor.config

            torch._inductor.config.fallback_random = True  # random ops draw from eager's RNG stream
            torch._dynamo.reset()
            return torch.compile(model, {", ".join(kwargs)}), torch._dynamo.reset
        ''')


def _onnx_export_code(rt: ReproTarget) -> str:
    """repro_export and repro_feeds: the exporter the rung tests (TorchScript-based, or dynamo)."""
    export = textwrap.dedent(f'''\
        def repro_export(model, args):
            """TorchScript-based ONNX export, literal: no constant folding, train/eval mode kept."""
            import warnings

            buf = io.BytesIO()
            names = [f"in_{{i}}" for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, args, buf, input_names=names, opset_version={ONNX_OPSET}, dynamo=False,
                                  do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE)
            import onnx

            # the oracle's own check: a model the checker rejects is the exporter's fault, not the runtime's
            onnx.checker.check_model(onnx.load_from_string(buf.getvalue()), full_check=True)
            return buf.getvalue()


        def repro_feeds(onnx_bytes, args):
            import onnx

            wanted = {{i.name for i in onnx.load_from_string(onnx_bytes).graph.input}}
            return {{f"in_{{i}}": a.detach().contiguous().numpy() for i, a in enumerate(args)
                    if isinstance(a, torch.Tensor) and f"in_{{i}}" in wanted}}
        ''')
    if rt.rung == "onnx_dynamo_export":  # the exporter under test: the one PyTorch maintains today
        export = textwrap.dedent(f'''\
            def repro_export(model, args):
                """torch.onnx.export(..., dynamo=True): the exporter this report is about."""
                import warnings

                names = [f"in_{{i}}" for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    program = torch.onnx.export(model, args, input_names=names, opset_version={DYNAMO_OPSET},
                                                dynamo=True, verbose=False)
                import onnx

                onnx_bytes = program.model_proto.SerializeToString()
                onnx.checker.check_model(onnx.load_from_string(onnx_bytes), full_check=True)
                return onnx_bytes


            def repro_feeds(onnx_bytes, args):
                import onnx

                wanted = {{i.name for i in onnx.load_from_string(onnx_bytes).graph.input}}
                return {{f"in_{{i}}": a.detach().contiguous().numpy() for i, a in enumerate(args)
                        if isinstance(a, torch.Tensor) and f"in_{{i}}" in wanted}}
            ''')
    return export


def _onnx_run_code(rt: ReproTarget) -> str:
    """repro_run_onnx: the ONNX runtime of the rung (ONNX Runtime, TVM, onnx's reference)."""
    if rt.rung in ("ort_kernels", "ort_optimizer"):
        level = "ORT_DISABLE_ALL" if rt.rung == "ort_kernels" else "ORT_ENABLE_ALL"
        run = textwrap.dedent(f'''\
            def repro_run_onnx(onnx_bytes, feeds):
                import onnxruntime as ort

                opts = ort.SessionOptions()
                opts.graph_optimization_level = ort.GraphOptimizationLevel.{level}
                opts.intra_op_num_threads = 1
                session = ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])
                return session.run(None, feeds)
            ''')
    elif rt.rung in ("tvm_frontend", "tvm_pipeline"):
        if rt.rung == "tvm_pipeline":
            build = ("    with tvm.transform.PassContext(opt_level=3):\n"
                     "        exe = tvm.compile(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))\n")
        else:
            build = ("    with tvm.transform.PassContext(opt_level=0):\n"
                     '        exe = tvm.compile(mod, target=target, relax_pipeline="default_build")\n')
        run = textwrap.dedent('''\
            def repro_run_onnx(onnx_bytes, feeds):
                import onnx
                import tvm
                from tvm import relax
                from tvm.relax.frontend.onnx import from_onnx

                proto = onnx.load_from_string(onnx_bytes)
                order = [i.name for i in proto.graph.input]
                mod = from_onnx(proto, shape_dict={n: list(feeds[n].shape) for n in order},
                                dtype_dict={n: str(feeds[n].dtype) for n in order}, keep_params_in_input=False)
                target = tvm.target.Target("llvm")
                @BUILD@
                vm = relax.VirtualMachine(exe, tvm.cpu())
                out = vm["main"](*(tvm.runtime.tensor(feeds[n]) for n in order))
                flat, todo = [], [out]
                while todo:
                    v = todo.pop(0)
                    if hasattr(v, "numpy"):
                        flat.append(v.numpy())
                    else:
                        todo[:0] = list(v)
                return flat
            ''').replace("    @BUILD@\n", build)
    else:  # onnx_export: the exporter, judged by onnx's reference evaluator
        run = textwrap.dedent('''\
            def repro_run_onnx(onnx_bytes, feeds):
                import onnx
                from onnx.reference import ReferenceEvaluator

                return ReferenceEvaluator(onnx.load_from_string(onnx_bytes)).run(None, feeds)
            ''')
    return run


# -- the fixed part of every script ----------------------------------------------------------------------------
RUNTIME_MARKER = "# ---- embedded in every repro.py from here on"


def runtime_source() -> str:
    """The source `repro_runtime.py` gives every script: everything below its marker line."""
    from nnforge.triage import repro_runtime

    text = Path(repro_runtime.__file__).read_text()
    at = text.index(RUNTIME_MARKER)
    return "\n" + text[text.index("\n", at) + 1:]


def python_state_source() -> str:
    """core.python_state's `python_state` and the constants it reads, for the script to define itself."""
    import inspect

    from nnforge.core import python_state as ps

    from nnforge.core import backward as bw

    training = (bw.with_grad_inputs, bw.call_gradients, bw.optimizer_step, bw.zero_grad, bw.set_param_requires_grad)
    return (f"ATTRIBUTE_PREFIX = {ps.ATTRIBUTE_PREFIX!r}\nGLOBAL_PREFIX = {ps.GLOBAL_PREFIX!r}\n"
            f"SECOND_BACKWARD = {bw.SECOND_BACKWARD!r}\nOPTIMIZER_SETTINGS = {bw.OPTIMIZER_SETTINGS!r}\n"
            "import weakref\n_OPTIMIZERS = weakref.WeakKeyDictionary()  # model -> {kind: its optimizer}\n\n\n"
            + inspect.getsource(ps.python_state) + "\n\n"
            + "\n\n".join(inspect.getsource(fn) for fn in training))


def program_global_names(program: str) -> list[str]:
    """The names the program's top level assigns: its globals, compared after every call."""
    import ast

    try:
        tree = ast.parse(program)
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return sorted(names)


# -- putting it together ----------------------------------------------------------------------------------------
def repro_requirements(rt: ReproTarget) -> list[str]:
    if rt.family == "torch":
        return ["torch"] + (["nnforge (test-only planted fault)"] if rt.needs_nnforge else [])
    if rt.rung.startswith("ort"):
        return ["torch", "onnx", "onnxruntime"]
    if rt.rung.startswith("tvm"):
        return ["torch", "onnx", "apache-tvm (Relax)"]
    return ["torch", "onnx"]


def _extra_modules(rt: ReproTarget) -> list[str]:
    if rt.family == "torch":
        return []
    if rt.rung.startswith("ort"):
        return ["onnx", "onnxruntime"]
    if rt.rung.startswith("tvm"):
        return ["onnx", "tvm"]
    return ["onnx"]


def write_repro(case: TestCase, verdict: Verdict, *, target: str | None = None, title: str = "") -> str:
    """The text of `repro.py` for `case` as judged by `verdict`.

    `target`: reproduce on this target instead of `verdict.target` (e.g. a healthy backend, to
    show the script passes there); the verdict's guilty rung is used when it belongs to it.
    """
    rt = resolve_target(target or verdict.target, verdict.rung)
    symptom = verdict.symptom.value
    header = [
        f"Reproducer written by NNForge{': ' + title if title else ''}",
        "",
        f"Target: {rt.target}; runs {rt.label} (rung `{rt.rung}` of the blame ladder).",
        f"Reported symptom: {symptom}" + (f" ({verdict.exc_type})" if verdict.exc_type else "") + ".",
        f"Needs: {', '.join(repro_requirements(rt))}.",
        "Run: python repro.py  -> exit 1 while the bug is present, 0 once it is fixed, 2 when it cannot tell.",
        "Comparison: torch.testing.assert_close default tolerances, then a float64 baseline",
        "(torch._dynamo.utils.same(..., fp64_ref=...)); fallback_random=True for random ops;",
        "only the output the fuzzer flagged is compared, so argmax/argmin ties elsewhere do not count.",
    ]
    if rt.needs_nnforge:
        header += ["", "NOTE: the target is a test-only fault planted by NNForge, so this script imports nnforge;",
                   "with a real compiler target it needs nothing but torch."]
    if case.inputs is None:
        header += ["", "The case has no saved values: make_inputs() is called under torch.manual_seed(0)."]
    docstring = '"""' + "\n".join(header).replace('"""', "'''") + '\n"""\n'

    call_args = _per_call_args(case)
    if case.inputs is None:
        values = ("torch.manual_seed(0)\nREPRO_INPUTS = tuple(make_inputs())\n"
                  f"REPRO_STATE_DICT = None\nREPRO_CALL_ARGS = None\n")
    else:
        values = _values_section(tuple(case.inputs), dict(case.state_dict) if case.state_dict else None, call_args)
    program_names = program_global_names(case.program)
    restored = sorted({name for step in case.calls for name in step.set_globals} | set(program_names))
    calls_code = "\n\n".join(_call_code(i, step) for i, step in enumerate(case.calls))
    if any(step.retain_graph for step in case.calls):  # as the oracle runs it (oracle/torch_backends.py)
        calls_code = ("import torch._functorch.config\n\n# a second backward through a retained graph is valid only "
                      "without donated buffers\ntorch._functorch.config.donated_buffer = False\n\n\n" + calls_code)
    timeout = max(60.0, 4 * float(verdict.timings.get("elapsed_s", 0.0) or 0.0))
    settings = "\n".join([
        f"REPRO_SYMPTOM = {symptom!r}",
        f"REPRO_ERROR = {verdict.exc_type or ''!r}  # the exception type the bug raises (crash symptoms)",
        f"REPRO_OUTPUT_INDEX = {verdict.output_index!r}  # the output leaf the fuzzer flagged (None: all)",
        f"REPRO_FLAT_OUTPUTS = {rt.family == 'onnx'!r}",
        f"REPRO_TARGET_LABEL = {rt.label!r}",
        f"REPRO_EXTRA_MODULES = {_extra_modules(rt)!r}",
        f"REPRO_CHILD_TIMEOUT_S = {timeout:.0f}",
        f"REPRO_PROGRAM_GLOBALS = {program_names!r}",
        f"REPRO_GLOBALS = {{name: globals()[name] for name in {restored!r} if name in globals()}}",
        f"REPRO_CALLS = [{', '.join(f'repro_call_{i}' for i in range(len(case.calls)))}]",
    ])
    program = case.program.rstrip() + "\n"
    return (
        "#!/usr/bin/env python3\n" + docstring
        + "import base64\nimport io\nimport sys\nfrom typing import Any\n\nimport torch\n\n"
        + "# ---- the program under test " + "-" * 60 + "\n" + program + "\n\n"
        + "# ---- the values it ran on " + "-" * 62 + "\n" + values + "\n\n"
        + "# ---- the invocation sequence " + "-" * 59 + "\n" + calls_code + "\n\n"
        + "# ---- the system under test " + "-" * 61 + "\n" + _target_code(rt) + "\n\n"
        + "# ---- running and comparing " + "-" * 61 + "\n" + settings + "\n\n\n" + python_state_source()
        + "\n" + runtime_source()
    )
