"""The fixed part of every `repro.py`: running the invocation sequence on eager, float64 and the
system under test, and comparing them the way the oracle does.

This is a real module so that it is linted and unit-tested like the rest of NNForge, but no repro
imports it: `write_repro` embeds its source from the marker line below, so the script needs only
torch (and the target's own packages). The names above the marker are what each script defines
for itself (the program, its values and calls, its target and settings); here they are
placeholders a test can set.
"""

# ruff: noqa: E402
from __future__ import annotations

import io  # noqa: F401  (the script's export code uses it)
import sys
from typing import Any

import torch

# -- defined by each script -------------------------------------------------------------------------------------
Model: Any = None  # the program's nn.Module class
REPRO_INPUTS: tuple[Any, ...] = ()
REPRO_STATE_DICT: dict[str, Any] | None = None
REPRO_CALL_ARGS: list[tuple[Any, ...]] | None = None  # per call, when calls take their own values
REPRO_GLOBALS: dict[str, Any] = {}  # the program's own globals as they were before any run
REPRO_PROGRAM_GLOBALS: list[str] = []  # names the program's top level assigns (compared after every call)
REPRO_CALLS: list[Any] = []  # repro_call_<i>(model, fn, reset) -> (outputs, args)
REPRO_SYMPTOM = "mismatch"
REPRO_ERROR = ""
REPRO_OUTPUT_INDEX: int | None = None
REPRO_FLAT_OUTPUTS = False
REPRO_TARGET_LABEL = ""
REPRO_EXTRA_MODULES: list[str] = []
REPRO_CHILD_TIMEOUT_S = 60


def repro_target(model: Any) -> Any:  # the script's system under test: (compiled fn, reset)
    raise NotImplementedError("defined by each repro.py")


from nnforge.core.python_state import python_state  # noqa: F401  (each script embeds its source)


# ---- embedded in every repro.py from here on -----------------------------------------------------
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
    import copy

    for name, value in REPRO_GLOBALS.items():  # undo what an earlier run's calls changed
        try:
            globals()[name] = copy.deepcopy(value)
        except Exception:
            globals()[name] = value
    torch.manual_seed(0)
    model = Model()
    if REPRO_STATE_DICT:
        model.load_state_dict(REPRO_STATE_DICT)
    return model.double() if float64 else model


def repro_run(model, fn=None, reset=None, float64=False):
    """Run the invocation sequence: ([(outputs, args after, state after, Python state after) per call],
    (call, error) | None)."""
    global REPRO_FLOAT64
    REPRO_FLOAT64 = float64
    fn = model if fn is None else fn
    reset = (lambda: None) if reset is None else reset
    results = []
    try:
        for i, call in enumerate(REPRO_CALLS):
            try:
                out, args = call(model, fn, reset)
                program_globals = {name: globals()[name] for name in REPRO_PROGRAM_GLOBALS if name in globals()}
                results.append((repro_snapshot(out), repro_snapshot(args), repro_snapshot(dict(model.state_dict())),
                                python_state(model, program_globals)))
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


def repro_tool_error(e):
    """The first `error:` line of a failed tool's output (a g++ run's stderr), or ''."""
    out = getattr(e, "stderr", None) or getattr(e, "output", None)
    if isinstance(out, bytes):
        out = out.decode("utf-8", errors="replace")
    for line in (out or "").splitlines() if isinstance(out, str) else ():
        if "error:" in line:
            return line.strip()[:400]
    return ""


def repro_leaves(x):
    return torch.utils._pytree.tree_leaves(x)


def repro_leaf_name(x, i):
    """Where leaf i sits in `x`, when that says more than its number ("['gradients']['input 0']")."""
    try:
        paths = [torch.utils._pytree.keystr(p) for p, _ in torch.utils._pytree.tree_flatten_with_path(x)[0]]
    except Exception:
        return ""
    return f" {paths[i]}" if i < len(paths) and "gradients" in paths[i] else ""


def repro_describe(expected, actual, expected64):
    """Observed vs expected, with numbers."""
    lines = []
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor) and expected.shape == actual.shape \
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
        off = ~((e == a) | (torch.isnan(e) & torch.isnan(a)))
        at = int(off.nonzero()[0, 0]) if bool(off.any()) else 0
        start = max(0, at - 2)  # around the first element that differs, not the first eight
        where = f" (flat elements {start}..{min(start + 8, e.numel()) - 1} of {e.numel()})" if e.numel() > 8 else ""
        lines.append(f"expected {e[start:start + 8].tolist()}{where}")
        lines.append(f"actual   {a[start:start + 8].tolist()}")
    else:
        lines.append(f"expected {expected!r}"[:400])
        lines.append(f"actual   {actual!r}"[:400])
    return "\n".join(lines)


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


REPRO_TOLERANCES = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
                    torch.float64: (1e-7, 1e-7)}  # assert_close's defaults, (rtol, atol)


def repro_nonfinite(label, expected, actual, expected64):
    """NaN/Inf where the other side is finite (or another NaN/Inf), as the oracle judges it: a position
    counts unless the compiled value agrees with the float64 run there (eager over- or underflowed)."""
    exp_leaves, act_leaves = repro_leaves(expected), repro_leaves(actual)
    ref_leaves = repro_leaves(expected64) if expected64 is not None else []
    for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
        if not (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)) or not e.is_floating_point() \
                or e.shape != a.shape:
            continue
        e64, a64 = e.detach().double(), a.detach().double()
        fin_e, fin_a = torch.isfinite(e64), torch.isfinite(a64)
        same_nonfinite = (torch.isnan(e64) & torch.isnan(a64)) | (~fin_e & ~fin_a & (e64 == a64))
        bad = (~fin_e | ~fin_a) & ~same_nonfinite
        r = ref_leaves[i] if i < len(ref_leaves) else None
        if bool(bad.any()) and isinstance(r, torch.Tensor) and r.shape == e.shape:
            r64 = r.detach().double()
            fin_r = torch.isfinite(r64)
            rtol, atol = REPRO_TOLERANCES.get(e.dtype, (1.3e-6, 1e-5))
            agrees = (fin_a == fin_r) & (~fin_a & ((torch.isnan(a64) & torch.isnan(r64)) | (a64 == r64))
                                         | fin_a & ((a64 - r64).abs() <= atol + 10 * rtol * r64.abs()))
            bad = bad & ~agrees
        if bool(bad.any()):
            at = tuple(int(j) for j in bad.nonzero()[0])
            return (f"{label}, leaf {i}{repro_leaf_name(expected, i)}: {int(bad.sum())} of {e.numel()} positions "
                    f"differ in NaN/Inf (first at {at}: expected {e64[at].item()}, got {a64[at].item()})")
    return None


def repro_as_good_as_eager(expected, actual, expected64):
    """Whether `actual` is as close to the float64 run as eager is (`same(..., fp64_ref=...)`)."""
    from torch._dynamo.utils import same

    if expected64 is None:
        return False
    try:
        return bool(same(expected, actual, fp64_ref=expected64, equal_nan=True, log_error=lambda *a, **k: None))
    except Exception:
        return False


def repro_compare(label, expected, actual, expected64):
    """None when `actual` is right by PyTorch's rules, else a description with numbers."""
    wrong_form = repro_shape_dtype(label, expected, actual)
    if wrong_form is not None:
        return wrong_form

    try:
        torch.testing.assert_close(actual, expected, equal_nan=True)  # default tolerances for the dtype
        return None
    except Exception as e:
        close_error = str(e).strip().splitlines()
    nonfinite = repro_nonfinite(label, expected, actual, expected64)
    if nonfinite is not None:
        return nonfinite  # `same` below cannot judge these: a NaN in the float64 run makes it pass anything
    if repro_as_good_as_eager(expected, actual, expected64):
        return None  # outside tolerance, but as close to float64 as eager: not a bug
    exp_leaves, act_leaves = repro_leaves(expected), repro_leaves(actual)
    ref_leaves = repro_leaves(expected64) if expected64 is not None else []
    refs = [ref_leaves[i] if i < len(ref_leaves) else None for i in range(len(exp_leaves))]
    if len(exp_leaves) == len(act_leaves):
        outside = []  # leaves outside tolerance
        for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
            try:
                torch.testing.assert_close(a, e, equal_nan=True)
            except Exception:
                outside.append(i)
        # the one to show: the first that is not as good as eager either, else the first outside
        wrong = [i for i in outside if not repro_as_good_as_eager(exp_leaves[i], act_leaves[i], refs[i])]
        if wrong or outside:
            i = (wrong or outside)[0]
            return f"{label}, leaf {i}{repro_leaf_name(expected, i)}:\n{repro_describe(exp_leaves[i], act_leaves[i], refs[i])}"
    return f"{label}:\n" + "\n".join(close_error[:6])


REPRO_PYTHON_STATE = "Python state after the call"


def repro_compare_python(label, expected, actual, expected64):
    """Module attributes and program globals: numbers and tensors by repro_compare, the rest exactly."""
    for key in sorted(set(expected) | set(actual)):
        if key not in expected or key not in actual:
            return f"{label}: {key} exists only {'in eager' if key in expected else 'in the compiled run'}"
        e, a, r = expected[key], actual[key], (expected64 or {}).get(key)
        if any(isinstance(v, (torch.Tensor, float)) for v in repro_leaves(e)):
            problem = repro_compare(f"{label}, {key}", e, a, r)
        elif type(e) is type(a) and e == a or type(r) is type(a) is int and r == a:
            problem = None  # equal, or an integer where the float64 run sides with the compiled value
        else:
            problem = f"{label}, {key}: expected {e!r}, got {a!r}"[:600]
        if problem is not None:
            return problem
    return None


def repro_parts(result):
    """The parts of one call to compare: the flagged output (or all outputs), inputs, tensor state
    and Python state after it."""
    out, args, state, python = result
    if REPRO_FLAT_OUTPUTS:  # ONNX-style backends return the tensor leaves of the output, flat
        return [("output", out)]
    parts = [("output", out if REPRO_OUTPUT_INDEX is None else repro_pick(out))]
    parts += [("inputs after the call", args), ("module state after the call", state), (REPRO_PYTHON_STATE, python)]
    return parts


def repro_pick(out):
    leaves = repro_leaves(out)
    return leaves[REPRO_OUTPUT_INDEX] if REPRO_OUTPUT_INDEX < len(leaves) else out


def repro_expected_parts(result):
    out, args, state, python = result
    if REPRO_FLAT_OUTPUTS:
        return [("output", [t for t in repro_leaves(out) if isinstance(t, torch.Tensor)])]
    return [("output", out if REPRO_OUTPUT_INDEX is None else repro_pick(out)),
            ("inputs after the call", args), ("module state after the call", state), (REPRO_PYTHON_STATE, python)]


def repro_check_values(expected, expected64, actual):
    """The first wrong value over the calls both runs completed, described; None when all agree."""
    for i, (e, a) in enumerate(zip(expected, actual)):
        e64 = expected64[i] if expected64 is not None and i < len(expected64) else None
        e_parts = repro_expected_parts(e)
        r_parts = repro_expected_parts(e64) if e64 is not None else [(label, None) for label, _ in e_parts]
        for (label, ev), (_, rv), (_, av) in zip(e_parts, r_parts, repro_parts(a)):
            compare = repro_compare_python if label == REPRO_PYTHON_STATE else repro_compare
            problem = compare(f"call {i}, {label}", ev, av, rv)
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
        tool_error = repro_tool_error(e)
        if tool_error:
            text += f"\n  {tool_error}"
        if REPRO_SYMPTOM == "exception_mismatch" or REPRO_ERROR in repro_error_names(e):
            print(f"BUG PRESENT: eager runs this call, the compiled run raises\n  {text}")
            return 1
        print(f"cannot tell: the compiled run raises a different error than the one reported ({REPRO_ERROR})\n  {text}")
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
