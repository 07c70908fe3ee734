"""Does a mutant reach what its category targets? Ask the compiler: TorchDynamo's own record.

`measure_compile(payload)` is a trusted worker function (pass `MEASURE_FN` to a WorkerPool's
`call`; it uses only torch and the standard library, so mutators need not import the oracle).
It runs the program's whole invocation sequence under TorchDynamo with a recording backend
(the captured FX graphs run as they are, like backend="eager": cheap) and returns what the
compiler did: graph breaks and their reasons, frames and unique graphs, the guards it installed
(by kind), recompiles and the guard failures behind them, the ops and dtypes in the captured
graphs, whether graph inputs were symbolic (dynamic) or non-contiguous, and which graph ran on
each call. With `reset_run`, the sequence runs a second time with the compiler cache reset
before every call, so a caller can see whether retained state changed what ran.

`reach(category, mutant, seed)` turns two such records into "did the mutant exercise the
category more than its seed did", by the rule REACH_RULES states for each category.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from typing import Any, Callable

from nnforge.core.calls import SINGLE_CALL, CallStep

MEASURE_FN = "nnforge.mutators.reach:measure_compile"
LAYOUT_OPS = {"transpose", "permute", "t", "as_strided", "expand", "expand_as", "contiguous", "movedim", "swapaxes",
              "unfold", "narrow", "flip", "mT"}
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "logsumexp", "softmax",
              "log_softmax", "norm", "cumsum", "argmax", "argmin", "any", "all"}
RANDOM_OPS = {"rand", "randn", "rand_like", "randn_like", "dropout", "bernoulli", "randint", "multinomial",
              "normal", "uniform_", "randperm", "native_dropout"}
SPECIAL_OPS = {"isnan", "isinf", "isfinite", "nan_to_num", "where", "clamp", "masked_fill", "nanmean", "nansum",
               "isneginf", "isposinf", "fmax", "fmin"}
STATE_GUARDS = {"EQUALS_MATCH", "CONSTANT_MATCH", "ID_MATCH", "TYPE_MATCH", "DICT_KEYS", "DICT_KEYS_MATCH",
                "LIST_LENGTH", "TUPLE_ITERATOR_LEN", "SEQUENCE_LENGTH", "DICT_VERSION", "DICT_CONTAINS",
                "NN_MODULE", "FUNCTION_MATCH", "CLOSURE_MATCH", "BUILTIN_MATCH", "NOT_NONE_MATCH", "BOOL_MATCH",
                "DUAL_LEVEL", "HASATTR", "NOT_PRESENT_IN_GENERIC_DICT", "WEAKREF_ALIVE", "OBJECT_ALIASING",
                "DATA_PTR_MATCH", "MAPPING_KEYS_CHECK", "ID_MATCH_OBJECT", "TYPE_MATCH_OBJECT"}


# -- inside the worker -----------------------------------------------------------------------------------------
def measure_compile(payload: dict[str, Any]) -> dict[str, Any]:
    """payload: program, calls ([CallStep json]), seed, reset_run (bool). Returns the compiler's record."""
    import torch
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    from nnforge.core.backward import run_step
    from nnforge.core.replay import apply_state, build_args
    from nnforge.mutators.validate import _load

    seed = int(payload.get("seed", 0))
    steps = tuple(CallStep.from_json(s) for s in payload.get("calls") or []) or SINGLE_CALL
    module = _load(payload["program"])
    torch.manual_seed(seed)
    base = module.make_inputs()
    rec: dict[str, Any] = {"ok": True, "error": "", "calls": len(steps)}

    def run(reset_each: bool) -> dict[str, Any]:
        log: dict[str, Any] = {"graphs": [], "executed": [], "compiles": [], "guards": [], "fails": []}
        current: list[str] = []

        def backend(gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
            fp = _fingerprint(gm, example_inputs)
            log["graphs"].append(_graph_facts(gm, example_inputs))
            log["compiles"][-1] += 1

            def run_graph(*args: Any) -> Any:
                current.append(fp)
                return gm.forward(*args)

            return run_graph

        dynamo.reset()
        counters.clear()
        torch.manual_seed(seed)
        model = module.Model()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = dynamo.optimize(backend, guard_export_fn=lambda gs: log["guards"].append(
                sorted((g.create_fn_name(), g.name) for g in gs)), guard_fail_fn=lambda f: log["fails"].append(
                (len(log["compiles"]) - 1, str(f.reason).splitlines()[0][:200])))(model)
        for i, step in enumerate(steps):
            if i > 0 and (reset_each or step.reset_cache):
                dynamo.reset()
            log["compiles"].append(0)
            current.clear()
            args = build_args(base, step.inputs, seed * 1000 + i)
            apply_state(step, model, module)
            torch.manual_seed(seed + i)
            run_step(compiled, model, args, step, seed + i)
            log["executed"].append(list(current))
        log["counters"] = {k: dict(v) for k, v in counters.items()}
        return log

    try:
        retained = run(reset_each=False)
    except Exception as e:  # a compiler failure: the oracle's business, recorded here as such
        return {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                "calls": len(steps)}
    c = retained["counters"]
    breaks = c.get("graph_break", {})
    rec.update({
        "graph_breaks": int(sum(breaks.values())),
        "break_reasons": sorted({_first_line(r) for r in breaks}),
        "unimplemented": int(sum(c.get("unimplemented", {}).values())),
        "frames": int(c.get("frames", {}).get("total", 0)),
        "unique_graphs": int(c.get("stats", {}).get("unique_graphs", 0)),
        "captured_ops": int(c.get("stats", {}).get("calls_captured", 0)),
        "compiles_per_call": retained["compiles"],
        "recompiles": int(sum(n for n, st in zip(retained["compiles"][1:], steps[1:]) if not st.reset_cache)),
        "guard_failures": [reason for i, reason in retained["fails"] if i > 0],
        "guard_kinds": sorted({k for gs in retained["guards"] for k, _ in gs}),
        "state_guards": sorted({f"{k} {_source(n)}" for gs in retained["guards"] for k, n in gs
                                if k in STATE_GUARDS and not _OP_REFERENCE.match(n)}),
        "ops": sorted({op for g in retained["graphs"] for op in g["ops"]}),
        "dtypes": sorted({d for g in retained["graphs"] for d in g["dtypes"]}),
        "symbolic_inputs": any(g["symbolic"] for g in retained["graphs"]),
        "noncontiguous_inputs": any(g["noncontiguous"] for g in retained["graphs"]),
        "empty_values": any(g["empty"] for g in retained["graphs"]),
        "noncontiguous_values": sum(g["noncontiguous_values"] for g in retained["graphs"]),
        "grad_graphs": sum(bool(g["requires_grad"]) for g in retained["graphs"]),
        "executed": retained["executed"],
    })
    if payload.get("reset_run") and len(steps) > 1:
        try:
            rec["reset_executed"] = run(reset_each=True)["executed"]
        except Exception as e:
            rec["reset_error"] = f"{type(e).__name__}: {_first_line(str(e))}"
    return rec


# Guards on `torch.add`, `F.relu`...: a program that calls another op, not Python state Dynamo reasoned about.
_OP_REFERENCE = re.compile(r"G\['(torch|F|nn|math|operator)'\]")
_NUMBERED = re.compile(r"___\d+")


def _source(name: str) -> str:
    """A guard's source with Dynamo's per-compile numbering removed (`__builtins_dict___28`)."""
    return _NUMBERED.sub("__", name)


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:160]


def _fingerprint(gm: Any, example_inputs: list[Any]) -> str:
    """The graph's code plus its inputs' shapes (symbolic or not), dtypes and strides."""
    parts = [gm.code]
    for x in example_inputs:
        if hasattr(x, "shape"):
            parts.append(f"{tuple(str(s) for s in x.shape)} {x.dtype} {tuple(str(s) for s in x.stride())} "
                         f"{getattr(x, 'requires_grad', False)}")
        else:
            parts.append(repr(type(x).__name__) + str(x))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _graph_facts(gm: Any, example_inputs: list[Any]) -> dict[str, Any]:
    import torch

    ops, dtypes, empty, strided = set(), set(), False, 0
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
            ops.add(str(target))
        val = node.meta.get("example_value")
        if isinstance(val, torch.Tensor):
            dtypes.add(str(val.dtype).replace("torch.", ""))
            # a static 0 dim (plain int: comparing a SymInt here would add a guard to the shape env)
            empty |= any(isinstance(d, int) and d == 0 for d in val.shape)
            if node.op != "placeholder" and all(isinstance(d, int) for d in (*val.shape, *val.stride())):
                strided += int(not val.is_contiguous())
    symbolic = any(isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and any(
        isinstance(s, torch.SymInt) for s in x.shape)) for x in example_inputs)
    noncontig = False
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            try:
                noncontig |= not x.is_contiguous()
            except Exception:  # symbolic strides
                pass
    grad = torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)
    return {"ops": sorted(ops), "dtypes": sorted(dtypes), "symbolic": symbolic, "noncontiguous": noncontig,
            "empty": empty, "noncontiguous_values": strided, "requires_grad": grad}


# -- in the parent: the category rules --------------------------------------------------------------------------
def _more(key: str) -> Callable[[dict, dict], bool]:
    return lambda m, s: m.get(key, 0) > s.get(key, 0)


def _new(key: str, allowed: set[str] | None = None) -> Callable[[dict, dict], bool]:
    def rule(m: dict, s: dict) -> bool:
        new = set(m.get(key, [])) - set(s.get(key, []))
        return bool(new if allowed is None else {x for x in new if x.split(" ")[0] in allowed})
    return rule


def _any(*rules: Callable[[dict, dict], bool]) -> Callable[[dict, dict], bool]:
    return lambda m, s: any(r(m, s) for r in rules)


def _ops(names: set[str]) -> Callable[[dict, dict], bool]:
    return lambda m, s: bool({o for o in m.get("ops", []) if o.rstrip("_") in names or o in names}
                             - set(s.get("ops", [])))


def _inplace(m: dict, s: dict) -> bool:
    mine = {o for o in m.get("ops", []) if o.endswith("_") and not o.startswith("_")}
    return bool(mine - set(s.get("ops", [])))


def _newly(flag: str) -> Callable[[dict, dict], bool]:
    """A boolean fact the mutant's record has and its seed's does not."""
    return lambda m, s: bool(m.get(flag)) and not s.get(flag)


_breaks = _any(_more("graph_breaks"), _more("unimplemented"))
_state = _new("state_guards")
def _recompiles(m: dict, s: dict) -> bool:
    """More recompiles on guard failures than the seed, not counting the grad mode flipping alone
    (generator seeds make their first call under no_grad; appended plain calls do not)."""
    def fails(r: dict) -> int:
        return len([f for f in r.get("guard_failures", []) if "GLOBAL_STATE changed: grad_mode" not in f])
    return m.get("recompiles", 0) > s.get("recompiles", 0) and fails(m) > fails(s)



# category -> (what counts as reach, measured how). Frontend families A-F are traced by Dynamo without
# a dedicated counter: the closest compiler signal is new guards on Python state (what Dynamo had to
# reason about) or a graph break / unimplemented construct where it gave up.
REACH_RULES: dict[str, tuple[str, Callable[[dict, dict], bool]]] = {
    "A1": ("new guards on Python objects, or graph breaks", _any(_state, _breaks)),
    "A2": ("new guards on functions/objects (FUNCTION_MATCH, ID_MATCH, CLOSURE_MATCH ...), or graph breaks", _any(_state, _breaks)),
    "A3": ("new guards or graph breaks, or new tensor-metadata ops", _any(_state, _breaks, _new("guard_kinds"))),
    "B1": ("new container guards (lengths, keys, constants), or graph breaks", _any(_state, _breaks)),
    "B2": ("new guards on structured containers / modules, or graph breaks", _any(_state, _breaks)),
    "C1": ("graph breaks, or new guards (iterators are inlined: no dedicated counter)", _any(_state, _breaks)),
    "D1": ("graph breaks / unimplemented (.item, tolist), or new scalar guards", _any(_breaks, _state)),
    "D2": ("size arithmetic in the graph (sym_size, view/reshape from sizes), symbolic inputs, or new guards",
           _any(_ops({"sym_size", "size", "view", "reshape", "narrow", "split", "_check"}), _new("guard_kinds"),
                _newly("symbolic_inputs"))),
    "E1": ("new guards on globals/closures, or graph breaks", _any(_state, _breaks)),
    "E2": ("grad-mode / autocast regions in the graph, or graph breaks (try/except)",
           _any(_ops({"_set_grad_enabled", "set_grad_enabled", "_enter_autocast", "_exit_autocast", "no_grad",
                      "enable_grad", "inference_mode", "_enter_inference_mode"}), _breaks)),
    "F1": ("graph breaks / unimplemented, or new guards on the mutated state (side effects replayed: no counter)",
           _any(_breaks, _state)),
    "F2": ("in-place / out= / copy_ ops in the captured graph", _any(_inplace, _ops({"copy_", "set_"}))),
    "G1": ("recompiles with guard failures (other than grad mode) over the call sequence", _recompiles),
    "G2": ("recompiles with guard failures (other than grad mode) over the call sequence", _recompiles),
    "H1": ("more graph breaks than the seed", _more("graph_breaks")),
    # I1 also counts non-contiguous intermediates: a slice with a step (`buf[..., ::2]`) is a plain getitem,
    # not a layout op, yet its value has the strides Inductor must handle.
    "I1": ("no Inductor signal with an eager backend; closest: layout ops, non-contiguous inputs, or more "
           "non-contiguous intermediate values in the graph",
           _any(_ops(LAYOUT_OPS), _newly("noncontiguous_inputs"), _more("noncontiguous_values"))),
    "I2": ("no Inductor signal with an eager backend; closest: new dtypes in the captured graph", _new("dtypes")),
    "I3": ("no Inductor signal with an eager backend; closest: new reductions in the captured graph",
           _ops(REDUCTIONS)),
    "J1": ("symbolic (dynamic) graph inputs or shape recompiles",
           _any(_newly("symbolic_inputs"), _recompiles)),
    # K1 also names empty tensors; their signal is a value with a 0 dim in a captured graph (no op marks
    # them: an empty slice is a plain getitem, and the reductions and cats around it are ordinary ops).
    "K1": ("random or special-value ops, or values with a 0 dim, in the captured graph",
           _any(_ops(RANDOM_OPS | SPECIAL_OPS), _newly("empty_values"))),
    # Grad-mode guard failures count: sequence mutators now keep the first call's grad mode on every step
    # that does not set it (so a flip is never an accident of padding), and flipping it is all that
    # seq_grad_mode does; leaving it out measured that mutator at 0% while its sequences did recompile.
    "stateful": ("recompiles with guard failures on a later call, or a graph that differs from the reset run",
                 lambda m, s: stateful_differs(m)),
    # AOTAutograd traces a joint forward-backward graph exactly where a captured graph's inputs
    # require grad under grad mode (generator seeds run under no_grad: none of theirs do)
    "training": ("more captured graphs whose inputs require grad (AOTAutograd's joint graph and the backward)",
                 lambda m, s: m.get("grad_graphs", 0) > s.get("grad_graphs", 0)),
}


def reach(category: str, mutant: dict[str, Any], seed: dict[str, Any]) -> bool:
    """Did the mutant exercise its category more than its seed did (both records ok)?"""
    if not (mutant.get("ok") and seed.get("ok")):
        return False
    return bool(REACH_RULES[category][1](mutant, seed))


def stateful_differs(rec: dict[str, Any], *, ignore_grad_mode: bool = False) -> bool:
    """Retained and reset runs differ: a later call recompiled on a guard failure, or ran other graphs.

    `ignore_grad_mode`: do not count guard failures that are only the global grad mode changing
    (generator seeds run their first call under no_grad, so any appended plain call flips it).
    """
    if not rec.get("ok"):
        return False
    fails = [f for f in rec.get("guard_failures", []) if not (ignore_grad_mode and "GLOBAL_STATE changed: grad_mode" in f)]
    if rec.get("recompiles", 0) > 0 and fails:
        return True
    reset = rec.get("reset_executed")
    return reset is not None and reset != rec.get("executed")
