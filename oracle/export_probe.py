"""The worker half of the export probe (see generator/export_probe.py): does the installed ONNX
path carry these one-operator programs?

Runs inside a sandboxed worker (`WorkerPool.call("nnforge.oracle.export_probe.probe_export", ...)`),
because the programs are generated code. For each program it takes the steps an `ort` or `tvm`
test takes in front of the runtime, and records which refused it:

- `export`: the program draws no random numbers (the oracle does not judge ONNX targets on
  those), `onnx_backends.export_for_backend` (the very call of the `onnx_export` rung: the
  TorchScript exporter, then ONNX's checker with full shape inference) passes, and the graph
  declares the output dtypes eager returns;
- `ort`: creating an ONNX Runtime session with every optimisation off, where ORT says it has no
  kernel for an operator and type (its NotImplemented);
- `tvm`: TVM's Relax importer, where it raises its own "not implemented" or a refusal listed in
  oracle/limitations.py.

Only refusals count. Any other exception there (a crash inside ORT or TVM) is what a test is for,
so it is recorded as passing: blocking it would hide a bug.
"""

from __future__ import annotations

import time
from typing import Any

PASSED, REFUSED, NOT_REACHED = 1, 0, None


def probe_export(payload: dict[str, Any]) -> dict[str, Any]:
    """payload: {"pairs": [[op, dtype, seed], ...], "checks": ["export", "ort", "tvm"]}.
    Returns {"results": [[key, rank key, {check: 1 | 0 | None}, reason, [form key, ...]], ...],
    "elapsed_s": float}."""
    from nnforge.generator.export_probe import probes_for

    t0 = time.perf_counter()
    checks = tuple(payload.get("checks") or ("export", "ort", "tvm"))
    results: list[list[Any]] = []
    for op, dtype, seed in payload["pairs"]:
        for probe in probes_for(str(op), str(dtype), int(seed)):
            outcome, reason = probe_program(probe.program, checks)
            results.append([probe.key, probe.rank_key, outcome, reason, list(probe.forms)])
    return {"results": results, "elapsed_s": round(time.perf_counter() - t0, 3)}


def probe_program(source: str, checks: tuple[str, ...]) -> tuple[dict[str, int | None], str]:
    """{check: PASSED | REFUSED | NOT_REACHED} for one program, and the first refusal's reason."""
    import torch

    from nnforge.oracle.backend import Unsupported
    from nnforge.oracle.onnx_backends import export_for_backend
    from nnforge.oracle.program_loader import load_program

    outcome: dict[str, int | None] = {c: NOT_REACHED for c in checks}
    try:
        module = load_program(source, name="probe")
        torch.manual_seed(0)
        model, args = module.Model(), tuple(module.make_inputs())
        rng = torch.get_rng_state()
        with torch.no_grad():
            eager = model(*args)
        random = not torch.equal(rng, torch.get_rng_state())
    except Exception as e:  # the program itself does not run: nothing to learn about the path
        return outcome, f"the program does not run: {type(e).__name__}: {e}"[:200]
    if random:  # only torch.compile shares eager's RNG: an ONNX test of it is invalid (oracle/job.py)
        outcome["export"] = REFUSED
        return outcome, "the program draws random numbers"
    try:
        with torch.no_grad():
            onnx_bytes = export_for_backend(model, args)
    except Exception as e:
        outcome["export"] = REFUSED
        return outcome, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    declared = _declared_dtype_mismatch(onnx_bytes, eager)
    if declared:
        outcome["export"] = REFUSED
        return outcome, declared
    outcome["export"] = PASSED
    reasons = []
    for check, runner in (("ort", _ort_session), ("tvm", _tvm_import)):
        if check not in checks:
            continue
        try:
            runner(onnx_bytes, args)
            outcome[check] = PASSED
        except Unsupported as e:
            outcome[check] = REFUSED
            reasons.append(f"{check}: {str(e).splitlines()[0] if str(e) else ''}"[:200])
        except Exception:
            outcome[check] = PASSED  # a crash is for a test to find, not for the probe to hide
    return outcome, "; ".join(reasons)


def _declared_dtype_mismatch(onnx_bytes: bytes, eager: Any) -> str:
    """Where the exported graph declares an output dtype other than eager's (a float32 output for
    an int16 result): every test of the instance would stop at the gate, whatever its values."""
    import onnx
    import torch
    from onnx.helper import tensor_dtype_to_np_dtype

    leaves = [t for t in torch.utils._pytree.tree_leaves(eager) if isinstance(t, torch.Tensor)]
    declared = onnx.load_from_string(onnx_bytes).graph.output
    for i, (decl, t) in enumerate(zip(declared, leaves)):
        try:
            want = str(tensor_dtype_to_np_dtype(decl.type.tensor_type.elem_type))
        except Exception:
            continue
        got = str(t.dtype).removeprefix("torch.")
        if want != got and not (want == "bool" and got == "bool"):
            return f"the exported graph declares output {i} as {want} where eager returns {got}"
    return ""


def _ort_session(onnx_bytes: bytes, args: tuple[Any, ...]) -> None:
    import onnxruntime as ort
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

    from nnforge.oracle.backend import Unsupported

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])
    except ort_state.NotImplemented as e:
        raise Unsupported(f"ONNX Runtime has no kernel for this: {e}") from e


def _tvm_import(onnx_bytes: bytes, args: tuple[Any, ...]) -> None:
    import onnx
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    from nnforge.oracle.backend import Unsupported
    from nnforge.oracle.job import _message, _type_name, frames_of, root_cause
    from nnforge.oracle.limitations import known_limitation
    from nnforge.oracle.onnx_backends import feeds_for

    feeds = feeds_for(onnx_bytes, args)
    proto = onnx.load_from_string(onnx_bytes)
    order = [i.name for i in proto.graph.input]
    try:
        from_onnx(proto, shape_dict={n: list(feeds[n].shape) for n in order},
                  dtype_dict={n: str(feeds[n].dtype) for n in order}, keep_params_in_input=False)
    except (tvm.error.OpNotImplemented, tvm.error.OpAttributeUnImplemented, NotImplementedError) as e:
        raise Unsupported(f"TVM's ONNX importer does not support this: {type(e).__name__}: {e}") from e
    except Exception as e:
        root = root_cause(e)
        if known_limitation("tvm_frontend", _type_name(root), _message(root), frames_of(root, set())) is not None:
            raise Unsupported(f"a documented TVM limitation: {root}") from e
        raise


# -- the gate in front of one whole test -------------------------------------------------------------------------
GATE_CHECK_FN = "nnforge.oracle.export_probe:gate_check"


def gate_check(payload: dict[str, Any]) -> dict[str, Any]:
    """Would this program stop at the ONNX export gate of an `ort` or `tvm` test? The one-operator
    probe above cannot see what only operators together do (an int intermediate feeding an operator
    that takes none once exported, a mutant's rewrite around a permute the exporter mangles), so
    the campaign asks this of each whole program before it becomes a test.

    payload: {"program", "calls" ([CallStep json]), "seed"}. It takes the gate's own steps on the
    values make_inputs() gives (no value search: this runs before the test, on the probe worker):
    the eager reference (a program that draws random numbers is refused, as job.run_target does
    for ONNX targets), then the `onnx_export` rung itself (export, ONNX checker, the graph run by
    onnx.reference against eager). Returns {"ok": bool, "reason": str, "elapsed_s": float}; ok is
    False only where the gate refused, and not for NaN/Inf alone (_values_only): a program whose
    eager run fails is the test's to judge."""
    from nnforge.core.calls import SINGLE_CALL, CallStep
    from nnforge.oracle.job import InvalidCase, Program, _prepare_values, run_reference, run_rung
    from nnforge.oracle.onnx_backends import OnnxReferenceBackend
    from nnforge.oracle.torch_backends import configure_torch

    t0 = time.perf_counter()
    configure_torch()
    steps = tuple(CallStep.from_json(s) for s in payload.get("calls") or []) or SINGLE_CALL
    prog = Program(source=payload["program"], inputs=(), state_dict={}, steps=steps, seed=int(payload.get("seed", 0)))

    def answer(ok: bool, reason: str = "") -> dict[str, Any]:
        return {"ok": ok, "reason": reason[:300], "elapsed_s": round(time.perf_counter() - t0, 3)}

    try:
        _prepare_values(prog, {"search": False}, {})
        ref = run_reference(prog)
    except InvalidCase as e:
        return answer(True, f"eager does not run it ({e.reason[:200]}): the test judges that")
    if ref.used_rng:
        return answer(False, "the program draws random numbers; only torch.compile shares eager's RNG")
    outcome = run_rung(prog, ref, OnnxReferenceBackend())
    if outcome.failed and not _values_only(outcome):
        return answer(False, outcome.summary())
    return answer(True, outcome.summary() if outcome.failed else "")


def _values_only(outcome: Any) -> bool:
    """A disagreement in NaN/Inf alone: on make_inputs' values that says little, since the test's own
    value search keeps NaN and Inf out. Any other disagreement holds on the test's values too more
    often than not (over two 5-minute campaigns, 10 of the 12 programs with a finite value
    disagreement here stopped at the gate, and 2 of the 8 with NaN did), so it refuses."""
    from nnforge.core.verdict import Symptom

    return outcome.symptom is Symptom.NAN_MISMATCH
