"""Recording a program's intermediate values, inside a sandbox worker (trusted code, untrusted program).

Graph-level reduction cuts edges: a kept node whose producer was removed reads a new input, and
that input must carry the value the removed producer computed, or the bug (which may need those
exact values) goes away. This runs the program once on the case's values with every top-level
assignment in `forward` reported to a recorder, and returns the values by name (`v5`) together
with their dtypes and shapes. The recorder is injected by rewriting the syntax tree: the program
is run as written, one extra call after each assignment.

Worker entry point: `nnforge.triage.intermediates:record`; payload keys: program, inputs_pt,
state_pt, calls, seed. Result: {"values_pt": bytes of {name: tensor}, "dtypes": {name: str},
"shapes": {name: [int]}}.
"""

from __future__ import annotations

import ast
from typing import Any

RECORDER = "__nnforge_record__"


def instrument(program: str) -> str:
    """`program` with a `__nnforge_record__({...})` call after each top-level assignment in forward."""
    tree = ast.parse(program)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    forward = next(f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
    body: list[ast.stmt] = []
    params = [a.arg for a in forward.args.args[1:]]
    if params:
        body.append(_record_call(params))
    for stmt in forward.body:
        body.append(stmt)
        if isinstance(stmt, ast.Assign):
            names = [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if names:
                body.append(_record_call(names))
    forward.body = body
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"


def _record_call(names: list[str]) -> ast.stmt:
    items = ", ".join(f"{n!r}: {n}" for n in names)
    return ast.parse(f"{RECORDER}({{{items}}})").body[0]


def record(payload: dict[str, Any]) -> dict[str, Any]:
    """Run forward once on the case's first call and return every named intermediate (see module doc)."""
    import torch

    from nnforge.core.calls import SINGLE_CALL, CallStep
    from nnforge.oracle.job import Program, dump_values, load_values

    steps = tuple(CallStep.from_json(s) for s in payload.get("calls") or []) or SINGLE_CALL
    prog = Program(source=instrument(payload["program"]), inputs=tuple(load_values(payload["inputs_pt"]) or ()),
                   state_dict=dict(load_values(payload.get("state_pt")) or {}), steps=steps[:1],
                   seed=int(payload.get("seed", 0)))
    seen: dict[str, Any] = {}

    def recorder(values: dict[str, Any]) -> None:
        for name, v in values.items():
            if isinstance(v, torch.Tensor):
                seen[name] = v.detach().clone()

    model, calls = prog.fresh()
    module = __import__("sys").modules[type(model).__module__]
    setattr(module, RECORDER, recorder)
    call = calls[0]
    if call.before is not None:
        call.before(model)
    grad = call.grad_enabled if call.grad_enabled is not None else False
    with torch.set_grad_enabled(grad):
        torch.manual_seed(call.seed)
        model(*call.args)
    for key, v in model.state_dict().items():
        seen.setdefault(f"self.{key}", v.detach().clone())
    return {"values_pt": dump_values(seen), "dtypes": {k: str(v.dtype).replace("torch.", "") for k, v in seen.items()},
            "shapes": {k: list(v.shape) for k, v in seen.items()}}


def record_in(pool: Any, case: Any, *, seed: int = 0,
              timeout_s: float = 60.0) -> tuple[dict[str, Any], dict[str, tuple[str, list[int]]]]:
    """(values by name, (dtype, shape) by name) of every named intermediate of `case` on its values,
    computed in a worker of `pool`. Raises RuntimeError when the worker could not."""
    from nnforge.oracle.job import dump_values, load_values

    payload = {"program": case.program, "inputs_pt": dump_values(tuple(case.inputs)),
               "state_pt": dump_values(dict(case.state_dict or {})),
               "calls": [c.to_json() for c in case.calls], "seed": seed}
    out = pool.call("nnforge.triage.intermediates:record", payload, timeout_s=timeout_s)
    if not out.ok:
        raise RuntimeError(f"recording intermediates failed: {out.status}: {out.exc_type}: {out.exc_message}")
    values = dict(load_values(out.value["values_pt"]))
    return values, {k: (out.value["dtypes"][k], out.value["shapes"][k]) for k in values}
