"""What runs inside a sandbox worker for one TestCase: `run_case(payload) -> dict`.

Steps: load the program; build the model and inputs (given values, or `make_inputs()` under a
fixed seed); search values that keep every intermediate finite (unless values are fixed); run
eager (the reference) and a float64 copy (precision evidence); then, per requested target, run
its blame ladder cheapest rung first and compare each rung with eager.

Every run (reference, float64, each rung, each way of running a stateful case) gets its own
fresh copy of the program module, model and inputs: a program that mutates its globals, its
buffers or its inputs cannot leak state from one run into the next, and Dynamo never reuses a
graph compiled for another run.

Invocation sequences with more than one call run three ways for compilers that cache: eager;
compiled with state retained (calls may ask for a cache reset); compiled with the cache reset
before every call. A difference between the last two marks the verdict `stateful`.

The payload and the result are plain dicts (values travel as `core/wire.py` bytes, never pickles):

payload: program (str), calls ([CallStep json]), targets ([str]), inputs_pt / state_pt (bytes,
optional), search (bool, default True: only when no inputs are given), value_search_budget_ms, seed,
stop_at_first (bool, default True), rungs ({target: [rung, ...]} to run only some rungs).
coverage (bool: measure torch's compiler packages, see oracle/coverage_probe.py).

result: status ("ok" | "invalid"), reason, exc_type, exc_message, frames, inputs_pt, state_pt,
search (dict or None), reference (dict), verdicts ([Verdict json]), rungs ({target: [RungOutcome
json]}), dynamo ({target: {"graph_breaks": [...], "recompiles": [...]}}, torch.compile targets
only: what Dynamo recorded over the state-retained runs of the target's rungs, see
oracle/dynamo_record.py), timings (dict), coverage_new ({file: [new lines]}, only with coverage).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from nnforge.core import replay
from nnforge.core.backward import GRADIENT_LABEL, gradient_name
from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS
from nnforge.core.calls import SINGLE_CALL, CallStep, InputChange
from nnforge.core.replay import CallStepError, apply_state, changes_state
from nnforge.core.verdict import Frame, Symptom, Verdict
from nnforge.oracle.backend import (Backend, Call, CallFailed, CallOutput, ExportFailed, RungSkipped, Unsupported,
                                    load_backends, parse_target)
from nnforge.oracle.blame import RungOutcome, blame
from nnforge.oracle.compare import compare_outputs
from nnforge.oracle.dynamo_record import DynamoRecord, DynamoRecorder

MAX_FRAMES = 40
PROGRAM_FILE = "program.py"
RUNG_MARKER = "nnforge-rung-in-flight: "  # printed before each rung; a dead worker's log names it


def announce_rung(target: str, rung: str) -> None:
    """Say on the worker's log which rung starts, so a worker death can be blamed without reruns."""
    print(f"{RUNG_MARKER}{target}\t{rung}", file=sys.stderr, flush=True)


def rung_in_flight(log_tail: str, target: str) -> str | None:
    """The last rung of `target` announced in a worker's log tail, if any."""
    found = None
    for line in log_tail.splitlines():
        if line.startswith(RUNG_MARKER):
            t, _, rung = line[len(RUNG_MARKER):].partition("\t")
            if t == target:
                found = rung.strip()
    return found


# -- tensors as bytes ---------------------------------------------------------------------------
def dump_values(obj: Any) -> bytes:
    """Inputs, state dicts and intermediates as they cross the sandbox: data only (core/wire.py),
    never a pickle, since the worker that produced them ran untrusted code."""
    from nnforge.core import wire

    return wire.encode(obj)


def load_values(data: bytes | None) -> Any:
    from nnforge.core import wire

    if data is None:
        return None
    return wire.decode(data)


# -- the program under test ------------------------------------------------------------------------
class InvalidCase(Exception):
    """The reference itself fails (or the program is malformed): not a bug of any target."""

    def __init__(self, reason: str, error: BaseException | None = None):
        super().__init__(reason)
        self.reason = reason
        self.error = error


@dataclass
class Program:
    """A program source plus the values it runs on; hands out fresh copies for every run."""

    source: str
    inputs: tuple[Any, ...]
    state_dict: dict[str, Any]
    steps: tuple[CallStep, ...]
    seed: int = 0
    files: set[str] = field(default_factory=set)  # file names of loaded copies (for frames)

    def load_module(self) -> Any:
        from nnforge.oracle.program_loader import load_program

        module = load_program(self.source, name="program")
        self.files.add(os.path.abspath(module.__file__ or ""))
        return module

    def fresh(self, float64: bool = False) -> tuple[Any, list[Call]]:
        """(model, calls) for one run, on a freshly loaded module."""
        import torch

        module = self.load_module()
        torch.manual_seed(self.seed)
        model = module.Model()
        if self.state_dict:
            model.load_state_dict(self.state_dict)
        if float64:
            model = model.double()
        calls = []
        for i, step in enumerate(self.steps):
            args = build_args(self.inputs, step.inputs, seed=self.seed * 1000 + i)
            if float64:
                args = tuple(to_float64(a) for a in args)
            calls.append(Call(args=args, before=_state_changer(step, module), grad_enabled=step.grad_enabled,
                              reset_cache=step.reset_cache, seed=self.seed + i, program_globals=vars(module),
                              backward=step.backward, optimizer=step.optimizer, retain_graph=step.retain_graph))
        return model, calls


def _state_changer(step: CallStep, module: Any) -> Callable[[Any], None] | None:
    if not changes_state(step):
        return None
    return lambda model: apply_state(step, model, module)


def build_args(base: tuple[Any, ...], changes: tuple[InputChange, ...], seed: int) -> tuple[Any, ...]:
    """This call's arguments (core.replay), with a step that cannot apply making the case invalid."""
    try:
        return replay.build_args(base, changes, seed)
    except CallStepError as e:
        raise InvalidCase(str(e)) from e


def to_float64(a: Any) -> Any:
    import torch

    if isinstance(a, torch.Tensor):
        if a.is_floating_point():
            return a.detach().to(torch.float64).requires_grad_(a.requires_grad)
        if a.is_complex():
            return a.detach().to(torch.complex128)
        return a
    if isinstance(a, (list, tuple)):
        return type(a)(to_float64(x) for x in a)
    return a


# -- the reference ----------------------------------------------------------------------------------
@dataclass
class Reference:
    outputs: list[CallOutput]  # eager, one per call that succeeded
    failed_call: int | None  # eager raised at this call (> 0: a sequence that must raise there)
    error: BaseException | None
    fp64: list[CallOutput] | None
    tie_masks: dict[int, dict[str, Any]]
    used_rng: bool
    elapsed_s: float
    program: Program | None = None  # to replay eager for rounding-noise evidence
    _noise: Any = field(default=None, repr=False)
    grad_tie_masks: dict[int, dict[str, Any]] = field(default_factory=dict)  # per backward call, as tie_masks

    def rounding_noise(self) -> Any:
        """How far rounding alone moves each float output (oracle/rounding_noise.py), measured on
        first use only (a rung with a float value mismatch) and kept; None when it cannot be."""
        if self._noise is None and self.program is not None:
            from nnforge.oracle.rounding_noise import eager_jittered_runner, measure

            try:
                self._noise = measure(eager_jittered_runner(self.program.fresh, len(self.outputs)), self.outputs)
            except Exception:
                self._noise = False  # no evidence: the other rules alone decide
        return self._noise or None

    def to_json(self) -> dict[str, Any]:
        return {"calls": len(self.outputs) + (self.failed_call is not None), "failed_call": self.failed_call,
                "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}",
                "fp64": self.fp64 is not None, "used_rng": self.used_rng, "elapsed_s": round(self.elapsed_s, 4)}


def run_reference(prog: Program) -> Reference:
    from nnforge.oracle.torch_backends import EagerBackend

    start = time.perf_counter()
    eager = EagerBackend(record=True)
    model, calls = prog.fresh()
    try:
        outputs, failed, error = eager.compile_and_run(model, calls), None, None
    except CallFailed as e:
        if e.call_index == 0:
            raise InvalidCase(f"eager raises on the first call: {type(e.error).__name__}: {e.error}", e.error) from e
        outputs, failed, error = e.partial, e.call_index, e.error
    fp64: list[CallOutput] | None
    try:
        from nnforge.oracle.float64_mode import Float64Everywhere

        model64, calls64 = prog.fresh(float64=True)
        with Float64Everywhere():
            fp64 = EagerBackend().compile_and_run(model64, calls64[: len(outputs)])
    except Exception:
        fp64 = None  # no precision evidence: tolerances alone decide
    bad = nonfinite_gradient(outputs)
    if bad is not None:
        raise InvalidCase(f"eager's gradient of {bad} is not finite at these values: the backward cannot be judged")
    return Reference(outputs, failed, error, fp64, eager.tie_masks, eager.used_rng, time.perf_counter() - start, prog,
                     grad_tie_masks=eager.grad_tie_masks)


def nonfinite_gradient(outputs: list[CallOutput]) -> str | None:
    """The first gradient (of a backward call) holding NaN or Inf, as 'param w at call 0'."""
    import torch

    for i, out in enumerate(outputs):
        for name, g in (out.grads or {}).items():
            if isinstance(g, torch.Tensor) and (g.is_floating_point() or g.is_complex()) and not bool(torch.isfinite(g).all()):
                return f"{name} at call {i}"
    return None


# -- judging one rung ------------------------------------------------------------------------------------
# How far a backend that computes float16/bfloat16 natively may stray, in units of the dtype's
# epsilon times the output's RMS magnitude: a few roundings on the way, or a reduction summed in
# the low precision itself (n terms cost up to ~sqrt(n) roundings). A value the exporter or the
# backend got wrong (a dropped side effect, a wrong constant) lands far outside.
LOW_PRECISION_SLACK_EPS = 16.0


def _failing_leaves(exp: Any, act: Any, c: Any, tensors_only: bool) -> tuple[Any, Any] | None:
    """The (expected, actual) leaves where comparison `c` failed on values (not on structure),
    as compare_outputs numbered them; None when `c` is no such failure."""
    from nnforge.oracle.compare import flatten, tensor_leaves

    if c.symptom not in (Symptom.MISMATCH, Symptom.NAN_MISMATCH) or c.leaf_index is None:
        return None
    leaves = tensor_leaves(exp) if tensors_only else flatten(exp)
    got = list(act) if tensors_only else [v for _, v in flatten(act)]
    if c.leaf_index >= min(len(leaves), len(got)):
        return None
    return leaves[c.leaf_index][1], got[c.leaf_index]


def _low_precision_value_miss(exp: Any, act: Any, c: Any, tensors_only: bool) -> bool:
    """A finite-value mismatch (not shape, dtype or NaN) on a float16/bfloat16 output leaf, small
    enough to come from computing in that precision (see LOW_PRECISION_SLACK_EPS)."""
    import torch

    from nnforge.oracle.compare import FP64_MULTIPLIER_LOW_PRECISION

    pair = _failing_leaves(exp, act, c, tensors_only)
    if c.symptom is not Symptom.MISMATCH or c.max_abs_err is None or pair is None:
        return False
    leaf = pair[0]
    if getattr(leaf, "dtype", None) not in (torch.float16, torch.bfloat16):
        return False
    values = leaf.detach().to(torch.float64)
    values = values[torch.isfinite(values)]
    if not values.numel():
        return False
    eps = torch.finfo(leaf.dtype).eps
    if c.fp64_rmse_actual is not None and c.fp64_rmse_eager is not None:
        slack = LOW_PRECISION_SLACK_EPS * eps * float(values.pow(2).mean().sqrt())
        return c.fp64_rmse_actual <= FP64_MULTIPLIER_LOW_PRECISION * c.fp64_rmse_eager + slack
    return c.max_abs_err <= LOW_PRECISION_SLACK_EPS * eps * float(values.abs().max())


def _value_miss(exp: Any, act: Any, c: Any, tensors_only: bool) -> bool:
    """The comparison failed on the values of a real tensor leaf (not on structure, shape or dtype):
    the kind of miss that rounding noise may explain."""
    import torch

    pair = _failing_leaves(exp, act, c, tensors_only)
    if pair is None:
        return False
    e, a = pair
    return (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor) and not e.is_complex()
            and e.dtype == a.dtype and e.shape == a.shape)


PYTHON_STATE = "Python state after the call"  # module attributes and program globals (core/python_state.py)


def lost_write(expected: dict[str, Any] | None, actual: dict[str, Any] | None, path: str | None) -> str:
    """What kind of Python write differs between eager's and the rung's state (see
    core.python_state.side_effect_kind): the key `path` starts with, or one only one side has."""
    from nnforge.core.python_state import side_effect_kind

    expected, actual = expected or {}, actual or {}
    for key in sorted(expected, key=len, reverse=True):
        if path is not None and path.startswith(f"[{key!r}]"):
            return side_effect_kind(key, expected[key])
    for key in sorted(set(expected) ^ set(actual)):
        return side_effect_kind(key, expected.get(key, actual.get(key)))
    return "Python state"


def unused_as_zero(expected: dict[str, Any], actual: dict[str, Any] | None) -> tuple[dict[str, Any], Any]:
    """Gradients where one side says None (autograd: the outputs do not depend on it) and the
    other an all-zero tensor (a compiled graph that takes the tensor as an input, say because it
    writes into it, returns a zero gradient for it) are the same answer: both become the zeros."""
    import torch

    if not isinstance(actual, dict):
        return expected, actual
    exp, act = dict(expected), dict(actual)
    for k in set(exp) & set(act):
        e, a = exp[k], act[k]
        if e is None and isinstance(a, torch.Tensor) and not bool(a.ne(0).any()):
            exp[k] = a
        elif a is None and isinstance(e, torch.Tensor) and not bool(e.ne(0).any()):
            act[k] = e
    return exp, act


def judge_outputs(ref: Reference, outs: list[CallOutput], backend: Backend) -> RungOutcome | None:
    """The first disagreement between eager and the rung over the calls both completed, or None;
    a passing RungOutcome carrying a note when rounding-noise evidence was needed to pass."""
    notes: list[str] = []
    for i, (r, a) in enumerate(zip(ref.outputs, outs)):
        f = ref.fp64[i] if ref.fp64 is not None and i < len(ref.fp64) else None
        parts = [("output", r.outputs, a.outputs, f.outputs if f else None, ref.tie_masks.get(i))]
        if backend.torch_side_effects:
            if r.grads is not None:  # a backward call: its gradients are judged like its outputs, and
                # before the state, which an optimizer step computed from them
                exp_g, act_g = unused_as_zero(r.grads, a.grads)
                parts.append((GRADIENT_LABEL, exp_g, act_g, f.grads if f else None, ref.grad_tie_masks.get(i)))
            parts.append(("inputs after the call", r.args_after, a.args_after, f.args_after if f else None, None))
            parts.append(("module state after the call", r.state_after, a.state_after, f.state_after if f else None, None))
            parts.append((PYTHON_STATE, r.python_after, a.python_after, f.python_after if f else None, None))
        for label, exp, act, f64, ties in parts:
            flat = backend.flat_outputs and label == "output"
            c = compare_outputs(exp, act, fp64=f64, tie_masks=ties, tensors_only=flat)
            if not c.ok and backend.imprecise_in_low_precision and _low_precision_value_miss(exp, act, c, flat):
                return RungOutcome(backend.name, skipped=f"{backend.name} computes float16/bfloat16 without wider "
                                   f"accumulation; its {label} differs in value only ({c.detail}); the next rungs judge")
            if not c.ok and _value_miss(exp, act, c, flat) and (noise := ref.rounding_noise()) is not None:
                bands = noise.for_part(i, label)
                if bands:
                    with_noise = compare_outputs(exp, act, fp64=f64, tie_masks=ties, tensors_only=flat, noise=bands)
                    if with_noise.ok:
                        notes.append(f"call {i} {label}: {with_noise.detail}")
                    c = with_noise  # what is left once rounding noise is accounted for
            if not c.ok:
                return RungOutcome(backend.name, c.symptom, call_index=i,
                                   output_index=c.leaf_index if label == "output" else None,
                                   max_abs_err=c.max_abs_err, max_rel_err=c.max_rel_err,
                                   fp64_rmse_actual=c.fp64_rmse_actual, fp64_rmse_eager=c.fp64_rmse_eager,
                                   side_effect=lost_write(exp, act, c.path) if label == PYTHON_STATE else None,
                                   gradient=gradient_name(c.path) if label == GRADIENT_LABEL else None,
                                   detail=f"{label}: {c.detail}")
    return RungOutcome(backend.name, detail="; ".join(notes)) if notes else None


def run_rung(prog: Program, ref: Reference, backend: Backend, *, reset_each_call: bool = False) -> RungOutcome:
    start = time.perf_counter()
    model, calls = prog.fresh()
    raised: CallFailed | None = None
    try:
        outs = backend.compile_and_run(model, calls, reset_each_call=reset_each_call)
    except CallFailed as e:
        raised, outs = e, e.partial
    elapsed = time.perf_counter() - start
    if raised is not None and _unsupported_or_skipped(raised.error):
        return replace(_exception_outcome(prog, backend, raised), elapsed_s=elapsed)
    wrong = judge_outputs(ref, outs, backend)
    if wrong is not None and (wrong.failed or wrong.skipped is not None):
        return replace(wrong, elapsed_s=elapsed)
    note = wrong.detail if wrong is not None else ""  # a pass that needed rounding-noise evidence
    if raised is not None:
        if ref.failed_call is not None and raised.call_index == ref.failed_call:
            return RungOutcome(backend.name, elapsed_s=elapsed, detail=note)  # both raise at the same call
        return replace(_exception_outcome(prog, backend, raised), elapsed_s=elapsed)
    if ref.failed_call is not None:
        return RungOutcome(backend.name, Symptom.EXCEPTION_MISMATCH, call_index=ref.failed_call, elapsed_s=elapsed,
                           exc_type=type(ref.error).__name__, exc_message=_message(ref.error),
                           detail=f"eager raises {type(ref.error).__name__} at call {ref.failed_call}; {backend.name} does not")
    return RungOutcome(backend.name, elapsed_s=elapsed, detail=note)


def _unsupported_or_skipped(error: BaseException) -> bool:
    return isinstance(error, (Unsupported, RungSkipped))


def _exception_outcome(prog: Program, backend: Backend, failed: CallFailed) -> RungOutcome:
    error = failed.error
    if isinstance(error, RungSkipped):
        return RungOutcome(backend.name, skipped=str(error))
    if isinstance(error, Unsupported):
        return RungOutcome(backend.name, Symptom.INVALID, call_index=failed.call_index,
                           detail=f"unsupported: {error}")
    root = root_cause(error)
    frames = frames_of(root, prog.files)
    if not isinstance(error, ExportFailed):
        from nnforge.oracle.limitations import known_limitation

        lim = known_limitation(backend.name, _type_name(root), _message(root), frames)
        if lim is not None:  # the converter's or runtime's own refusal of this form: not a bug
            first = (_message(root).strip().splitlines() or [""])[0][:200]
            return RungOutcome(backend.name, Symptom.INVALID, call_index=failed.call_index, exc_type=_type_name(root),
                               exc_message=_message(root), detail=f"unsupported: {lim.why}: {first}")
    if isinstance(error, ExportFailed):  # the exporter in front of the runtime, unless it is what is tested
        symptom, blamed = Symptom.CRASH, None if getattr(backend, "exporter_under_test", False) else "onnx_export"
    else:
        symptom = Symptom.EXCEPTION_MISMATCH if frames and frames[-1].file == PROGRAM_FILE else Symptom.CRASH
        blamed = None
    return RungOutcome(backend.name, symptom, call_index=failed.call_index, exc_type=_type_name(root),
                       exc_message=_message(root), frames=frames, blamed_rung=blamed,
                       detail=f"{_type_name(root)}: {_message(root).splitlines()[0] if _message(root) else ''}"[:300])


def root_cause(error: BaseException) -> BaseException:
    """The innermost exception: compilers wrap the real one (BackendCompilerFailed, ...)."""
    seen = {id(error)}
    while True:
        inner = getattr(error, "inner_exception", None) or error.__cause__
        if not isinstance(inner, BaseException) or id(inner) in seen:
            return error
        seen.add(id(inner))
        error = inner


def frames_of(error: BaseException, program_files: set[str]) -> tuple[Frame, ...]:
    """Traceback frames, outermost first, with stable file names (program copies -> program.py)."""
    out = []
    for fs in traceback.extract_tb(error.__traceback__)[-MAX_FRAMES:]:
        out.append(Frame(file=normalise_file(fs.filename, program_files), line=fs.lineno or 0, function=fs.name))
    return tuple(out)


def normalise_file(path: str, program_files: set[str]) -> str:
    if os.path.abspath(path) in program_files or os.path.basename(path).startswith("program_"):
        return PROGRAM_FILE
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _type_name(e: BaseException) -> str:
    cls = type(e)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _message(e: BaseException | None) -> str:
    """The exception's text, with the tool's own output when it carries one: a failed g++ run
    (`CalledProcessError`) prints only its command line, while its stderr holds the `error:`
    line that says what the bug is."""
    if e is None:
        return ""
    try:
        text = str(e)
    except Exception:
        return "<unprintable exception>"
    extra = getattr(e, "stderr", None) or getattr(e, "output", None)
    if isinstance(extra, bytes):
        extra = extra.decode("utf-8", errors="replace")
    if isinstance(extra, str) and extra.strip() and extra.strip() not in text:
        errors = [ln for ln in extra.splitlines() if "error" in ln.lower()][:10]
        text = text[:1000] + "\n" + "\n".join(errors) + "\n--- output ---\n" + extra[:2000]
    return text[:4000]


# -- one target --------------------------------------------------------------------------------------------
def run_target(prog: Program, ref: Reference, target_text: str, *, stop_at_first: bool = True,
               only_rungs: list[str] | None = None) -> tuple[Verdict, list[RungOutcome], DynamoRecord | None]:
    """The target's verdict, its rungs' outcomes, and (torch.compile rungs only, else None) the
    graph-break and recompile reasons Dynamo recorded over the rungs' state-retained runs."""
    import torch

    target = parse_target(target_text)
    versions = {"torch": torch.__version__}
    if target.spec.family == "onnx" and ref.used_rng:
        return Verdict(target=target.name, symptom=Symptom.INVALID, versions=versions,
                       detail="the program draws random numbers; only torch.compile shares eager's RNG"), [], None
    outcomes: list[RungOutcome] = []
    records: list[DynamoRecord] = []
    ladder = target.ladder(only_rungs)
    top: RungOutcome | None = None
    if stop_at_first and only_rungs is None and top_rung_first(target.spec.family, len(ladder)):
        # The system under test first: when it agrees with eager, the lower rungs have nothing
        # to blame and are not run; when it disagrees, they run cheapest first as before, and
        # its own outcome stands if none of them disagrees.
        top = _one_rung(prog, ref, target_text, ladder[-1], versions, records)
        if not top.failed:
            ladder = []
            outcomes.append(top)
        else:
            ladder = ladder[:-1]
    for backend in ladder:
        outcome = _one_rung(prog, ref, target_text, backend, versions, records)
        outcomes.append(outcome)
        if outcome.failed and stop_at_first:
            break
    if top is not None and top.failed and not any(o.failed for o in outcomes):
        outcomes.append(top)
    dynamo: DynamoRecord | None = None
    for record in records:
        dynamo = record if dynamo is None else dynamo.merged(record)
    verdict = blame(target.name, outcomes, versions=versions, extra_timings={"reference_s": round(ref.elapsed_s, 4)},
                    gates=target.spec.gate_rungs)
    return verdict, outcomes, dynamo


def top_rung_first(family: str, rungs: int) -> bool:
    """Whether a target's ladder starts at its top rung (torch.compile's: the lower rungs are
    cheaper and only blame; an ONNX target's first rung is the export gate, needed anyway)."""
    return family != "onnx" and rungs > 1


def _one_rung(prog: Program, ref: Reference, target_text: str, backend: Backend, versions: dict[str, str],
              records: list[DynamoRecord]) -> RungOutcome:
    """One rung's outcome (with the cache-reset run of a stateful case), its version noted in
    `versions` and what Dynamo recorded in `records`."""
    if not backend.available():
        return RungOutcome(backend.name, skipped=f"{backend.name} is not installed")
    versions[backend.name] = backend.version()
    announce_rung(target_text, backend.name)
    if getattr(backend, "records_dynamo", False):
        with DynamoRecorder() as recorder:  # per run: clears Dynamo's global counters first
            outcome = run_rung(prog, ref, backend)
        records.append(recorder.record)
    else:
        outcome = run_rung(prog, ref, backend)
    if backend.stateful and len(prog.steps) > 1 and outcome.symptom is not Symptom.INVALID and outcome.skipped is None:
        outcome = _with_reset_run(prog, ref, backend, outcome)
    return outcome


def _with_reset_run(prog: Program, ref: Reference, backend: Backend, retained: RungOutcome) -> RungOutcome:
    """Run again with the cache reset before every call; a difference marks the bug stateful."""
    reset = run_rung(prog, ref, backend, reset_each_call=True)
    elapsed = retained.elapsed_s + reset.elapsed_s
    if retained.failed:
        stateful = not reset.failed or reset.symptom is not retained.symptom or reset.call_index != retained.call_index
        note = "passes" if not reset.failed else f"gives {reset.symptom.value} at call {reset.call_index}"
        return replace(retained, stateful=stateful, elapsed_s=elapsed,
                       detail=f"{retained.detail}; with the cache reset before every call it {note}")
    if reset.failed:
        return replace(reset, elapsed_s=elapsed,
                       detail=f"{reset.detail}; only with the cache reset before every call (state retained passes)")
    return replace(retained, elapsed_s=elapsed)


# -- the entry point --------------------------------------------------------------------------------------------
WARM_UP_PROGRAM = """
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.lin(x)).sum(1)

def make_inputs():
    return (torch.randn(2, 4),)
"""


def warm_up(targets: list[str]) -> None:
    """Trusted, in a fork server's template before any call: one fixed program through the real
    compilers behind `targets` (test-only targets warm Dynamo alone), so every forked test starts
    with their imports and first-compile work done instead of paying for them again."""
    from nnforge.oracle.backend import _TARGETS

    load_backends()
    names: list[str] = []
    for text in targets:
        spec = _TARGETS.get(text.partition(":")[0])
        name = spec.name if spec is not None and not spec.hidden else "eager"
        if name not in names:
            names.append(name)
    run_case({"program": WARM_UP_PROGRAM, "targets": names, "value_search_budget_ms": 20.0})
    import torch._dynamo

    torch._dynamo.reset()


def run_case(payload: dict[str, Any]) -> dict[str, Any]:
    """Everything the oracle does for one case inside a worker (see the module docstring).

    With `"coverage": true` in the payload the case runs under the worker's coverage probe and the
    result carries `coverage_new` ({file: [lines]} covered for the first time in this worker).
    """
    if not payload.get("coverage"):
        return _run_case(payload)
    from nnforge.oracle.coverage_probe import run_with_coverage

    result, new_lines, collect_s = run_with_coverage(_run_case, payload)
    result["coverage_new"] = new_lines
    result["timings"]["coverage_collect_s"] = round(collect_s, 4)
    return result


def _run_case(payload: dict[str, Any]) -> dict[str, Any]:
    from nnforge.oracle.torch_backends import configure_torch

    configure_torch()
    load_backends()
    t0 = time.perf_counter()
    seed = int(payload.get("seed", 0))
    steps = tuple(CallStep.from_json(s) for s in payload.get("calls") or []) or SINGLE_CALL
    result: dict[str, Any] = {"status": "ok", "reason": None, "exc_type": None, "exc_message": None, "frames": [],
                              "inputs_pt": None, "state_pt": None, "search": None, "values": None, "reference": None,
                              "verdicts": [], "rungs": {}, "dynamo": {}, "timings": {}}
    prog = Program(source=payload["program"], inputs=(), state_dict={}, steps=steps, seed=seed)
    try:
        _prepare_values(prog, payload, result)
        result["timings"]["prepare_s"] = round(time.perf_counter() - t0, 4)
        ref = run_reference(prog)
    except InvalidCase as e:
        return _invalid(result, prog, e)
    except Exception as e:  # the program misbehaved in a way the steps above did not foresee
        return _invalid(result, prog, InvalidCase(f"the reference could not run: {type(e).__name__}: {e}", e))
    result["reference"] = ref.to_json()
    result["timings"]["reference_s"] = round(ref.elapsed_s, 4)
    for target_text in payload.get("targets") or []:
        only = (payload.get("rungs") or {}).get(target_text)
        verdict, outcomes, dynamo = run_target(prog, ref, target_text, stop_at_first=payload.get("stop_at_first", True),
                                               only_rungs=only)
        if payload.get("locate") and locatable(verdict):
            from nnforge.oracle.locate import locate_first_wrong

            t_locate = time.perf_counter()
            verdict = replace(verdict, first_wrong=locate_first_wrong(prog, target_text, verdict.rung),
                              timings={**verdict.timings, "locate_s": round(time.perf_counter() - t_locate, 4)})
        result["verdicts"].append(verdict.to_json())
        result["rungs"][target_text] = [o.to_json() for o in outcomes]
        if dynamo is not None:
            result["dynamo"][target_text] = dynamo.to_json()
    result["timings"]["total_s"] = round(time.perf_counter() - t0, 4)
    return result


def locatable(verdict: Verdict) -> bool:
    """A wrong value of the first call's outputs (not a gradient, not Python state, not a state
    kept between calls): where it first went wrong can be found (oracle/locate.py)."""
    return (verdict.symptom in (Symptom.MISMATCH, Symptom.NAN_MISMATCH) and not verdict.gradient
            and not verdict.side_effect and not verdict.stateful and verdict.call_index in (0, None))


def _prepare_values(prog: Program, payload: dict[str, Any], result: dict[str, Any]) -> None:
    """Fill prog.inputs/state_dict: given values, else make_inputs() and (optionally) value search."""
    import torch

    try:
        module = prog.load_module()
    except BaseException as e:
        raise InvalidCase(f"the program does not import: {type(e).__name__}: {e}", e) from e
    if not hasattr(module, "Model") or not hasattr(module, "make_inputs"):
        raise InvalidCase("the program must define `class Model` and `def make_inputs()`")
    given_inputs = load_values(payload.get("inputs_pt"))
    given_state = load_values(payload.get("state_pt"))
    try:
        torch.manual_seed(prog.seed)
        model = module.Model()
        if given_state is not None:
            model.load_state_dict(given_state)
        torch.manual_seed(prog.seed)
        made = given_inputs if given_inputs is not None else module.make_inputs()
    except BaseException as e:
        raise InvalidCase(f"building the model or its inputs raises {type(e).__name__}: {e}", e) from e
    if not isinstance(made, (tuple, list)):  # a bare tensor would be iterated into its rows
        raise InvalidCase(f"make_inputs() must return a tuple or list of forward's arguments, not a {type(made).__name__}")
    inputs = tuple(made)
    search_wanted = payload.get("search", True) and given_inputs is None
    if search_wanted:
        from nnforge.oracle.value_bins import NORMAL, apply_family, plan_holds
        from nnforge.oracle.value_search import ValueSearch

        family = str(payload.get("value_bin") or NORMAL)
        try:
            inputs, plan = apply_family(family, model, inputs, prog.seed)
            res = ValueSearch(budget_ms=float(payload.get("value_search_budget_ms", VALUE_SEARCH_BUDGET_MS)),
                              seed=prog.seed, backward=any(s.backward for s in prog.steps)).run(model, inputs, plan=plan)
            inputs = tuple(res.inputs)
            if res.state_dict:
                model.load_state_dict(res.state_dict)
            result["search"] = res.to_json()
            holds = plan_holds(plan, model, inputs)
            result["values"] = {"bin": family, "leaves": plan.leaves(), "kept": res.bins_kept and all(holds.values()),
                                "holds": holds}
        except Exception as e:
            result["search"] = {"success": False, "error": f"{type(e).__name__}: {e}"}
    prog.inputs = inputs
    prog.state_dict = {k: v.detach().clone() for k, v in model.state_dict().items()}
    result["inputs_pt"] = dump_values(tuple(prog.inputs))
    result["state_pt"] = dump_values(prog.state_dict)


def _invalid(result: dict[str, Any], prog: Program, e: InvalidCase) -> dict[str, Any]:
    result["status"] = "invalid"
    result["reason"] = e.reason
    if e.error is not None:
        root = root_cause(e.error)
        result["exc_type"] = _type_name(root)
        result["exc_message"] = _message(root)
        result["frames"] = [f.to_json() for f in frames_of(root, prog.files)]
    return result
