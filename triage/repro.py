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
from typing import Any

from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Verdict

# torch.compile backend for each rung of the torch ladders that a plain torch install has.
TORCH_RUNG_BACKENDS = {"dynamo": "eager", "aot_autograd": "aot_eager", "inductor": "inductor"}
ONNX_OPSET = 17
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
        return {"onnx_export": "torch.onnx.export + onnx.reference", "ort_kernels": "onnxruntime (ORT_DISABLE_ALL)",
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
    if i > 0 and step.reset_cache:
        lines.append("    reset()  # the sequence drops the compiler's cache before this call")
    lines.append(f"    args = repro_args({i})")
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
    params = dict(rt.params)
    if rt.family == "torch":
        if rt.needs_nnforge:
            return textwrap.dedent(f'''\
                def repro_target(model):
                    """The system under test: a test-only planted fault of NNForge (needs nnforge importable)."""
                    import torch._inductor.config
                    from nnforge.oracle.backend import parse_target

                    torch._inductor.config.fallback_random = True
                    torch._dynamo.reset()
                    rung = parse_target({rt.target!r}).ladder([{rt.rung!r}])[0]
                    return torch.compile(model, **rung.compile_kwargs()), torch._dynamo.reset
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
    return export + "\n\n" + run + "\n\n" + textwrap.dedent('''\
        def repro_target(model):
            """The system under test: every call is exported afresh and run."""
            import numpy as np

            def fn(*args):
                onnx_bytes = repro_export(model, args)
                return [torch.from_numpy(np.asarray(o).copy()) for o in repro_run_onnx(onnx_bytes, repro_feeds(onnx_bytes, args))]

            return fn, lambda: None
        ''')


# -- the fixed part of every script ----------------------------------------------------------------------------
_RUNTIME = '''
def repro_print_versions():
    import platform

    print(f"python {platform.python_version()} on {platform.platform()}")
    print(f"torch {torch.__version__} (git {getattr(torch.version, 'git_version', '?')[:12]})")
    for name in REPRO_EXTRA_MODULES:
        try:
            mod = __import__(name)
            print(f"{name} {getattr(mod, '__version__', '?')}")
        except Exception as e:
            print(f"{name} not importable: {type(e).__name__}: {e}")


def repro_set_attr(model, path, value):
    *parents, last = path.split(".")
    obj = model
    for p in parents:
        obj = getattr(obj, p)
    current = getattr(obj, last, None)
    if isinstance(current, torch.Tensor) and not isinstance(value, torch.Tensor):
        value = torch.tensor(value, dtype=current.dtype)
    setattr(obj, last, value)


def repro_clone(x):
    if isinstance(x, torch.Tensor):
        c = x.detach().clone(memory_format=torch.preserve_format)
        return c.requires_grad_(x.requires_grad) if (c.is_floating_point() or c.is_complex()) else c
    if isinstance(x, (list, tuple)):
        return type(x)(repro_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: repro_clone(v) for k, v in x.items()}
    return x


def repro_snapshot(x):
    return torch.utils._pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, x)


def repro_to_float64(x):
    if isinstance(x, torch.Tensor):
        if x.is_floating_point():
            return x.detach().to(torch.float64).requires_grad_(x.requires_grad)
        return x.detach().to(torch.complex128) if x.is_complex() else x
    if isinstance(x, (list, tuple)):
        return type(x)(repro_to_float64(v) for v in x)
    return x


REPRO_FLOAT64 = False


class ReproFloat64(torch.overrides.TorchFunctionMode):
    """The float64 run asks for float64 wherever the program asks for a narrower float (explicit
    casts, factory dtypes, the default dtype), or eager's own rounding would be the reference."""

    NARROW = (torch.float16, torch.bfloat16, torch.float32)

    def __enter__(self):
        self.default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            super().__exit__(*exc)
        finally:
            torch.set_default_dtype(self.default)

    def widen(self, x):
        if isinstance(x, torch.dtype):
            return torch.float64 if x in self.NARROW else x
        if isinstance(x, (list, tuple)) and any(isinstance(v, torch.dtype) for v in x):
            return type(x)(self.widen(v) for v in x)
        return x

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.half, torch.Tensor.float, torch.Tensor.bfloat16):
            return args[0].to(torch.float64)
        return func(*(self.widen(a) for a in args), **{k: self.widen(v) for k, v in kwargs.items()})


def repro_args(i):
    args = REPRO_CALL_ARGS[i] if REPRO_CALL_ARGS is not None else REPRO_INPUTS
    args = tuple(repro_clone(a) for a in args)
    return tuple(repro_to_float64(a) for a in args) if REPRO_FLOAT64 else args


def repro_make_model(float64=False):
    globals().update(REPRO_GLOBALS)  # undo the globals an earlier run's calls changed
    torch.manual_seed(0)
    model = Model()
    if REPRO_STATE_DICT:
        model.load_state_dict(REPRO_STATE_DICT)
    return model.double() if float64 else model


def repro_run(model, fn=None, reset=None, float64=False):
    """Run the invocation sequence: ([(outputs, args after, state after) per call], (call, error) | None)."""
    global REPRO_FLOAT64
    REPRO_FLOAT64 = float64
    fn = model if fn is None else fn
    reset = (lambda: None) if reset is None else reset
    results = []
    try:
        for i, call in enumerate(REPRO_CALLS):
            try:
                out, args = call(model, fn, reset)
                results.append((repro_snapshot(out), repro_snapshot(args), repro_snapshot(dict(model.state_dict()))))
            except Exception as e:
                return results, (i, e)
    finally:
        REPRO_FLOAT64 = False
    return results, None


def repro_error_names(e):
    """The type names of an exception and of every exception it wraps (compilers wrap the real one)."""
    names, seen = set(), set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        t = type(e)
        names.update({t.__qualname__, f"{t.__module__}.{t.__qualname__}"})
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
    return names


def repro_root(e, wanted):
    """The wrapped exception named `wanted` (or the innermost one): the error worth showing."""
    seen = set()
    while id(e) not in seen:
        seen.add(id(e))
        t = type(e)
        if wanted in (t.__qualname__, f"{t.__module__}.{t.__qualname__}"):
            return e
        inner = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
        if inner is None:
            return e
        e = inner
    return e


def repro_leaves(x):
    return torch.utils._pytree.tree_leaves(x)


def repro_describe(expected, actual, expected64):
    """Observed vs expected, with numbers."""
    lines = []
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor) and expected.shape == actual.shape \\
            and expected.dtype == actual.dtype and expected.numel() > 0:
        e, a = expected.detach().double().flatten(), actual.detach().double().flatten()
        diff = (e - a).abs()
        both_finite = torch.isfinite(e) & torch.isfinite(a)
        if both_finite.any():
            d = diff[both_finite]
            rel = d / e[both_finite].abs().clamp_min(1e-12)
            lines.append(f"max abs err {d.max().item():.6g}, max rel err {rel.max().item():.6g}")
        if isinstance(expected64, torch.Tensor) and expected64.shape == expected.shape:
            r = expected64.detach().double().flatten()
            ok = torch.isfinite(r) & both_finite
            if ok.any():
                rmse_e = ((e[ok] - r[ok]) ** 2).mean().sqrt().item()
                rmse_a = ((a[ok] - r[ok]) ** 2).mean().sqrt().item()
                lines.append(f"RMSE vs float64: eager {rmse_e:.6g}, compiled {rmse_a:.6g}")
        lines.append(f"expected {e[:8].tolist()}")
        lines.append(f"actual   {a[:8].tolist()}")
    else:
        lines.append(f"expected {expected!r}"[:400])
        lines.append(f"actual   {actual!r}"[:400])
    return "\\n".join(lines)


def repro_shape_dtype(label, expected, actual):
    """Shapes and dtypes first, as the oracle compares them (`same` would broadcast () against (1, 1))."""
    exp_leaves, act_leaves = repro_leaves(expected), repro_leaves(actual)
    if len(exp_leaves) != len(act_leaves):
        return f"{label}: {len(act_leaves)} values instead of {len(exp_leaves)}"
    for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
        if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
            return f"{label}, leaf {i}: {type(a).__name__} instead of {type(e).__name__}"
        if isinstance(e, torch.Tensor) and tuple(e.shape) != tuple(a.shape):
            return f"{label}, leaf {i}: shape {tuple(a.shape)} instead of {tuple(e.shape)}"
        if isinstance(e, torch.Tensor) and e.dtype != a.dtype:
            return f"{label}, leaf {i}: dtype {a.dtype} instead of {e.dtype}"
    return None


def repro_compare(label, expected, actual, expected64):
    """None when `actual` is right by PyTorch's rules, else a description with numbers."""
    from torch._dynamo.utils import same

    wrong_form = repro_shape_dtype(label, expected, actual)
    if wrong_form is not None:
        return wrong_form

    try:
        torch.testing.assert_close(actual, expected, equal_nan=True)  # default tolerances for the dtype
        return None
    except Exception as e:
        close_error = str(e).strip().splitlines()
    try:
        as_good_as_eager = expected64 is not None and same(expected, actual, fp64_ref=expected64, equal_nan=True,
                                                           log_error=lambda *a, **k: None)
    except Exception:
        as_good_as_eager = False
    if as_good_as_eager:
        return None  # outside tolerance, but as close to float64 as eager: not a bug
    exp_leaves, act_leaves = repro_leaves(expected), repro_leaves(actual)
    ref_leaves = repro_leaves(expected64) if expected64 is not None else []
    if len(exp_leaves) == len(act_leaves):
        for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
            try:
                torch.testing.assert_close(a, e, equal_nan=True)
            except Exception:
                r = ref_leaves[i] if i < len(ref_leaves) else None
                return f"{label}, leaf {i}:\\n{repro_describe(e, a, r)}"
    return f"{label}:\\n" + "\\n".join(close_error[:6])


def repro_parts(result):
    """The parts of one call to compare: the flagged output (or all outputs), inputs and state after it."""
    out, args, state = result
    if REPRO_FLAT_OUTPUTS:  # ONNX-style backends return the tensor leaves of the output, flat
        return [("output", out)]
    parts = [("output", out if REPRO_OUTPUT_INDEX is None else repro_pick(out))]
    parts += [("inputs after the call", args), ("module state after the call", state)]
    return parts


def repro_pick(out):
    leaves = repro_leaves(out)
    return leaves[REPRO_OUTPUT_INDEX] if REPRO_OUTPUT_INDEX < len(leaves) else out


def repro_expected_parts(result):
    out, args, state = result
    if REPRO_FLAT_OUTPUTS:
        return [("output", [t for t in repro_leaves(out) if isinstance(t, torch.Tensor)])]
    return [("output", out if REPRO_OUTPUT_INDEX is None else repro_pick(out)),
            ("inputs after the call", args), ("module state after the call", state)]


def repro_check_values(expected, expected64, actual):
    """The first wrong value over the calls both runs completed, described; None when all agree."""
    for i, (e, a) in enumerate(zip(expected, actual)):
        e64 = expected64[i] if expected64 is not None and i < len(expected64) else None
        e_parts = repro_expected_parts(e)
        r_parts = repro_expected_parts(e64) if e64 is not None else [(label, None) for label, _ in e_parts]
        for (label, ev), (_, rv), (_, av) in zip(e_parts, r_parts, repro_parts(a)):
            problem = repro_compare(f"call {i}, {label}", ev, av, rv)
            if problem is not None:
                return problem
    return None


def repro_child():
    """Only the compiled run, in a process of its own: the parent watches it die (or not)."""
    model = repro_make_model()
    fn, reset = repro_target(model)
    _, error = repro_run(model, fn, reset)
    if error is not None:
        print(f"call {error[0]} raised {type(error[1]).__name__}: {error[1]}")
        sys.exit(3)
    sys.exit(0)


def repro_main():
    if "--child" in sys.argv:
        repro_child()
    repro_print_versions()
    print(f"system under test: {REPRO_TARGET_LABEL}")
    if REPRO_SYMPTOM in ("segfault", "timeout", "oom"):
        import subprocess

        try:
            proc = subprocess.run([sys.executable, __file__, "--child"], timeout=REPRO_CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"BUG PRESENT: the compiled run did not finish within {REPRO_CHILD_TIMEOUT_S} s")
            return 1
        if proc.returncode < 0 or proc.returncode >= 128:
            import signal

            num = -proc.returncode if proc.returncode < 0 else proc.returncode - 128
            try:
                name = signal.Signals(num).name
            except ValueError:
                name = f"signal {num}"
            print(f"BUG PRESENT: the compiled run killed the process ({name}); eager runs fine")
            return 1
        print("the compiled run finished" + ("" if proc.returncode == 0 else f" with exit status {proc.returncode}"))
        return 0 if proc.returncode == 0 else 2

    expected, eager_error = repro_run(repro_make_model())
    if eager_error is not None and eager_error[0] == 0 and REPRO_SYMPTOM != "exception_mismatch":
        print(f"cannot tell: eager itself raises {type(eager_error[1]).__name__}: {eager_error[1]}")
        return 2
    try:
        with ReproFloat64():
            expected64, _ = repro_run(repro_make_model(float64=True), float64=True)
    except Exception:
        expected64 = None  # no float64 evidence: tolerances alone decide
    model = repro_make_model()
    try:
        fn, reset = repro_target(model)
        actual, error = repro_run(model, fn, reset)
    except Exception as e:
        actual, error = [], (0, e)

    if error is not None and (eager_error is None or eager_error[0] != error[0]):
        call, e = error
        e = repro_root(e, REPRO_ERROR)
        text = f"call {call}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        if REPRO_SYMPTOM == "exception_mismatch" or REPRO_ERROR in repro_error_names(e):
            print(f"BUG PRESENT: eager runs this call, the compiled run raises\\n  {text}")
            return 1
        print(f"cannot tell: the compiled run raises a different error than the one reported ({REPRO_ERROR})\\n  {text}")
        return 2
    if eager_error is not None and error is None:
        call, e = eager_error
        print(f"BUG PRESENT: eager raises at call {call} ({type(e).__name__}: {e}); the compiled run does not")
        return 1
    problem = repro_check_values(expected, expected64, actual)
    if problem is not None:
        print("BUG PRESENT: the compiled result differs from eager (expected = eager, actual = compiled)")
        print(problem)
        return 1
    if REPRO_SYMPTOM == "crash":
        print("fixed: the compiled run no longer raises, and its results match eager")
    else:
        print("fixed: the compiled results match eager within PyTorch's tolerances")
    return 0


if __name__ == "__main__":
    sys.exit(repro_main())
'''


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
    set_globals = sorted({name for step in case.calls for name in step.set_globals})
    calls_code = "\n\n".join(_call_code(i, step) for i, step in enumerate(case.calls))
    timeout = max(60.0, 4 * float(verdict.timings.get("elapsed_s", 0.0) or 0.0))
    settings = "\n".join([
        f"REPRO_SYMPTOM = {symptom!r}",
        f"REPRO_ERROR = {verdict.exc_type or ''!r}  # the exception type the bug raises (crash symptoms)",
        f"REPRO_OUTPUT_INDEX = {verdict.output_index!r}  # the output leaf the fuzzer flagged (None: all)",
        f"REPRO_FLAT_OUTPUTS = {rt.family == 'onnx'!r}",
        f"REPRO_TARGET_LABEL = {rt.label!r}",
        f"REPRO_EXTRA_MODULES = {_extra_modules(rt)!r}",
        f"REPRO_CHILD_TIMEOUT_S = {timeout:.0f}",
        f"REPRO_GLOBALS = {{name: globals()[name] for name in {set_globals!r}}}",
        f"REPRO_CALLS = [{', '.join(f'repro_call_{i}' for i in range(len(case.calls)))}]",
    ])
    program = case.program.rstrip() + "\n"
    return (
        "#!/usr/bin/env python3\n" + docstring
        + "import base64\nimport io\nimport sys\n\nimport torch\n\n"
        + "# ---- the program under test " + "-" * 60 + "\n" + program + "\n\n"
        + "# ---- the values it ran on " + "-" * 62 + "\n" + values + "\n\n"
        + "# ---- the invocation sequence " + "-" * 59 + "\n" + calls_code + "\n\n"
        + "# ---- the system under test " + "-" * 61 + "\n" + _target_code(rt) + "\n\n"
        + "# ---- running and comparing " + "-" * 61 + "\n" + settings + "\n\n" + _RUNTIME
    )
