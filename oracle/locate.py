"""Where the values first go wrong: the first statement whose compiled value departs from eager.

A wrong output says nothing about its cause: a broadcast `sub` computed the wrong way round shows
up as NaN after a `log`, as a wrong `getitem`, as a wrong `tril`. Triage keys findings by their
root cause, so before any reduction is paid for, the worker runs the program once more with
every tensor a top-level statement of `forward` assigns returned as an output, in statement
order, through the rung the blame ladder found guilty, judged exactly as outputs are (the float64
run, rounding noise). The first leaf that fails names the statement. Inductor still fuses a
kernel whose intermediates are outputs, so a fused kernel's wrong code stays wrong; a bug that
needs an intermediate never to reach memory may vanish, and then nothing is located.

Runs in the worker, on the case's chosen values, for the first call of its sequence only.
`FirstWrong` is data: the statement, its value's dtype and shape, and the shapes of the tensors
it reads. Naming the operators and classing the attributes is triage's job (triage/rootcause.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable

SEEN = "_nnforge_seen"
MAX_LINE = 240  # characters of the statement kept in the verdict


@dataclass(frozen=True)
class Slot:
    """One value the probe returns: the name a statement assigned, and that statement."""

    name: str
    line: str
    reads: tuple[str, ...]  # names the statement reads (its operands, where they are names)


def probe_source(program: str) -> tuple[str, list[Slot]] | None:
    """`program` with Model.forward returning every value its top-level statements assign (a
    tuple, in order), and what each position holds; None for a forward this cannot follow
    (a loop, a return inside a branch, no Model)."""
    try:
        tree = ast.parse(program)
    except SyntaxError:
        return None
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    forward = None if model is None else next(
        (f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if forward is None or not any(isinstance(n, ast.Import) and any(a.name == "torch" and a.asname is None
                                                                     for a in n.names) for n in tree.body):
        return None  # the probe names `torch`
    for node in ast.walk(forward):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
            return None
    slots: list[Slot] = []
    body = _instrument(forward.body, slots, top=True)
    if body is None or not slots:
        return None
    forward.body = [ast.parse(f"{SEEN} = []").body[0], *body]
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", slots


def _instrument(stmts: list[ast.stmt], slots: list[Slot], top: bool) -> list[ast.stmt] | None:
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.Return):
            out.append(ast.parse(f"return tuple({SEEN})").body[0])
            continue
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            inner = _instrument(stmt.body, slots, top=False)
            if inner is None:
                return None
            stmt.body = inner
            out.append(stmt)
            continue
        if any(isinstance(n, ast.Return) for n in ast.walk(stmt)):
            return None  # a return inside a branch: which values exist depends on the path taken
        out.append(stmt)
        if isinstance(stmt, ast.Assign):
            names = [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Store)]
            line = ast.unparse(stmt)[:MAX_LINE]
            reads = tuple(dict.fromkeys(n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)))
            for name in names:
                slots.append(Slot(name, line, reads))
                # tensors only: a function, a module or a list is no value to compare (None holds its place)
                out.append(ast.parse(f"{SEEN}.append({name} if isinstance({name}, torch.Tensor) else None)").body[0])
    if top and not any(isinstance(s, ast.Return) for s in stmts):
        out.append(ast.parse(f"return tuple({SEEN})").body[0])
    return out


_POSITION = re.compile(r"^\[(\d+)\]")


def locate_first_wrong(prog: Any, target_text: str, rung: str | None) -> dict[str, Any] | None:
    """The first statement of `prog` whose value the guilty rung computes wrong, as
    {"name", "line", "dtype", "shape", "operands": {name: shape}}; None when nothing is located."""
    from nnforge.core.calls import SINGLE_CALL
    from nnforge.oracle.backend import parse_target
    from nnforge.oracle.compare import flatten, tensor_leaves
    from nnforge.oracle.job import Program, run_reference, run_rung

    probe = probe_source(prog.source)
    if probe is None:
        return None
    source, slots = probe
    ladder = parse_target(target_text).ladder()
    backend = next((b for b in ladder if b.name == rung), ladder[-1])
    step = replace(prog.steps[0], backward=False, optimizer=None, retain_graph=False) if prog.steps else SINGLE_CALL[0]
    probe_prog = Program(source=source, inputs=prog.inputs, state_dict=prog.state_dict, steps=(step,), seed=prog.seed)
    try:
        ref = run_reference(probe_prog)
    except Exception:  # InvalidCase or worse: the probe itself misbehaves, nothing is located
        return None
    outcome = run_rung(probe_prog, ref, backend)
    if not outcome.failed or outcome.output_index is None or outcome.call_index != 0:
        return None
    expected = ref.outputs[0].outputs
    leaves = tensor_leaves(expected) if backend.flat_outputs else flatten(expected)
    if outcome.output_index >= len(leaves):
        return None
    path, value = leaves[outcome.output_index]
    m = _POSITION.match(path)
    if m is None or int(m.group(1)) >= len(slots):
        return None
    k = int(m.group(1))
    slot = slots[k]
    values = dict(zip((s.name for s in slots[:k]), expected[:k])) if isinstance(expected, (tuple, list)) else {}
    operands = {n: _shape(values[n]) for n in slot.reads if n in values and _shape(values[n]) is not None}
    for n in slot.reads:  # the forward's own inputs are no statement's value
        if n not in operands and (shape := _input_shape(prog, n)) is not None:
            operands[n] = shape
    return {"name": slot.name, "line": slot.line, "dtype": str(getattr(value, "dtype", type(value).__name__)).replace(
        "torch.", ""), "shape": _shape(value), "operands": operands, "symptom": outcome.symptom.value}


def _shape(value: Any) -> list[int] | None:
    shape = getattr(value, "shape", None)
    return None if shape is None else [int(d) for d in shape]


def _input_shape(prog: Any, name: str) -> list[int] | None:
    """The shape of forward's parameter `name` on the case's inputs."""
    try:
        tree = ast.parse(prog.source)
        model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
        forward = next(f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
        params = [a.arg for a in forward.args.args[1:]]
    except (SyntaxError, StopIteration):
        return None
    if name not in params or params.index(name) >= len(prog.inputs):
        return None
    return _shape(prog.inputs[params.index(name)])


# -- below the statement: the ATen operators it runs -------------------------------------------------------
MAX_PIECES = 12  # ATen operators of one statement tried alone at the most


def aten_pieces(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point (payload: program, inputs_pt, state_pt, calls, seed, most, only): the ATen operators the
    program's forward runs as torch.compile hands them to the compiler (Dynamo's own rewrites, such
    as `addcdiv(..., value=v)` into a div and an add, then AOTAutograd with Inductor's
    decompositions; a plain trace when that fails), each as a program of its own that calls that
    one operator on the values it saw: {"pieces": [{"op", "program",
    "inputs_pt"}]}. A statement like `F.softsign(x)` or `torch.lerp(a, b, w)` is several ATen
    operators; the one that is wrong alone is the bug (triage/guilty.py)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from nnforge.core.calls import SINGLE_CALL, CallStep
    from nnforge.oracle.job import Program, load_values

    steps = tuple(CallStep.from_json(s) for s in payload.get("calls") or []) or SINGLE_CALL
    prog = Program(source=payload["program"], inputs=tuple(load_values(payload["inputs_pt"]) or ()),
                   state_dict=dict(load_values(payload.get("state_pt")) or {}), steps=steps[:1],
                   seed=int(payload.get("seed", 0)))
    model, calls = prog.fresh()
    args = calls[0].args
    if calls[0].before is not None:  # the first call's attribute writes and mode choose the branch it takes
        calls[0].before(model)
    try:
        from torch._inductor.decomposition import select_decomp_table

        table = select_decomp_table()
    except Exception:
        table = {}
    with torch.no_grad():
        seen = _as_compiled(model, args, table)
        if not seen:
            gm = make_fx(lambda *a: model(*a), decomposition_table=table)(*args)
            seen = _Recorder(gm).run_recording(*args)
    only = set(payload.get("only") or ())
    chosen = [(node.target, a, kw) for node, (a, kw) in seen if not only or aten_packet(str(node.target)) in only]
    return {"pieces": _piece_programs(chosen, int(payload.get("most", MAX_PIECES)))}


def _piece_programs(calls: Iterable[tuple[Any, tuple, dict]], most: int) -> list[dict[str, Any]]:
    """Up to `most` of `calls` ((operator, args, kwargs)) as programs of their own: [{"op",
    "program", "inputs_pt"}]; a call whose arguments have no literal form is left out."""
    from nnforge.oracle.job import dump_values

    pieces = []
    for target, args, kwargs in calls:
        piece = _piece(target, args, kwargs)
        if piece is not None:
            source, tensors = piece
            pieces.append({"op": str(target), "program": source, "inputs_pt": dump_values(tuple(tensors))})
        if len(pieces) >= most:
            break
    return pieces


def aten_packet(name: str) -> str:
    """`aten.add_.Tensor` -> `aten.add`: the operator without its overload, an in-place variant
    as its functional one (the same kernel computes both)."""
    packet = name.rsplit(".", 1)[0] if name.count(".") >= 2 else name
    return packet[:-1] if packet.endswith("_") and not packet.endswith("__") else packet


def below_aten(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point (payload: program, inputs_pt, most): the operators one ATen call's
    reference implementation (torch._refs) is made of, each a program of its own on the values
    it saw, as `aten_pieces` returns them; no pieces when the call is one operator already.

    Inductor lowers `div(a, b, rounding_mode="floor")` and `floor` through one code generator for
    floor: a bug there is wrong in both ATen calls, and one level down both hold a `floor` that
    is wrong alone. A call of the reference's primitive that ATen also has is written as the ATen
    operator (the bug is reported, and searched for, by ATen names)."""
    import torch
    from torch._prims.context import TorchRefsMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from nnforge.core.calls import SINGLE_CALL
    from nnforge.oracle.job import Program, load_values

    prog = Program(source=payload["program"], inputs=tuple(load_values(payload["inputs_pt"]) or ()),
                   state_dict={}, steps=SINGLE_CALL, seed=0)
    model, calls = prog.fresh()
    args = calls[0].args
    try:
        with torch.no_grad(), TorchRefsMode():
            gm = make_fx(lambda *a: model(*a))(*args)
        seen = _Recorder(gm).run_recording(*args)
    except Exception:
        return {"pieces": []}
    if len(seen) < 2:
        return {"pieces": []}
    calls = ((_as_aten(node.target, a, kw), a, kw) for node, (a, kw) in seen)  # lazily: at most `most` are run
    return {"pieces": _piece_programs(calls, int(payload.get("most", MAX_PIECES)))}


def _as_aten(target: Any, args: tuple, kwargs: dict) -> Any:
    """The ATen operator of the same name as a torch._prims one, when it takes these arguments and
    computes the same; else the primitive itself."""
    import torch

    name = str(target)
    if not name.startswith("prims."):
        return target
    aten = getattr(torch.ops.aten, name.split(".")[1], None)  # the packet: it picks the overload
    if aten is None:
        return target
    try:
        want, got = target(*args, **kwargs), aten(*args, **kwargs)
        same = (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor) and want.dtype == got.dtype
                and want.shape == got.shape and torch.allclose(want.double(), got.double(), equal_nan=True))
    except Exception:
        return target
    return aten if same else target


def _as_compiled(model: Any, args: tuple, table: dict) -> list[tuple[Any, tuple[tuple, dict]]]:
    """The ATen calls of every graph torch.compile makes of `model`, recorded while the compiled
    model runs once on `args`; [] when compiling fails."""
    import torch
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    seen: list[tuple[Any, tuple[tuple, dict]]] = []

    def forward_compiler(gm: Any, example_inputs: Any) -> Any:
        def run(*graph_args: Any) -> Any:
            calls, out = _Recorder(gm).run_keeping(*graph_args)
            seen.extend(calls)
            return out

        return make_boxed_func(run)

    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=aot_autograd(fw_compiler=forward_compiler, decompositions=table))
        compiled(*args)
    except Exception:
        return []
    finally:
        torch._dynamo.reset()
    return seen


class _Recorder:
    """Runs an FX graph node by node, keeping each ATen call's concrete arguments."""

    def __init__(self, gm: Any):
        self.gm = gm

    def run_recording(self, *args: Any) -> list[tuple[Any, tuple[tuple, dict]]]:
        return self.run_keeping(*args)[0]

    def run_keeping(self, *args: Any) -> tuple[list[tuple[Any, tuple[tuple, dict]]], Any]:
        """(the ATen calls with their concrete arguments, the graph's outputs)."""
        import torch
        from torch.fx import Interpreter

        calls: list[tuple[Any, tuple[tuple, dict]]] = []

        class Keep(Interpreter):
            def call_function(self, target: Any, a: tuple, kw: dict) -> Any:
                if isinstance(target, torch._ops.OpOverload):
                    calls.append((self.current_node, (a, kw)))
                return super().call_function(target, a, kw)

            def run_node(self, n: Any) -> Any:
                self.current_node = n
                return super().run_node(n)

        return calls, Keep(self.gm).run(*args)


def _piece(target: Any, args: tuple, kwargs: dict) -> tuple[str, list[Any]] | None:
    """(program source, its input tensors) calling `target` alone, or None when an argument has
    no literal form."""
    import torch

    tensors: list[Any] = []

    def lit(v: Any) -> str | None:
        if isinstance(v, torch.Tensor):
            tensors.append(v.detach().clone())
            return f"a{len(tensors) - 1}"
        if v is None or isinstance(v, (bool, int, str)):
            return repr(v)
        if isinstance(v, float):
            return repr(v) if v == v and abs(v) != float("inf") else f"float({str(v)!r})"
        if isinstance(v, (torch.dtype, torch.layout, torch.memory_format)):
            return str(v)
        if isinstance(v, torch.device):
            return f"torch.device({str(v)!r})"
        if isinstance(v, (list, tuple)):
            items = [lit(x) for x in v]
            if any(x is None for x in items):
                return None
            inner = ", ".join(items)  # type: ignore[arg-type]
            return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(items) == 1 else ''})"
        return None

    parts = [lit(a) for a in args]
    for k, v in kwargs.items():
        text = lit(v)
        parts.append(None if text is None else f"{k}={text}")
    if any(p is None for p in parts) or not tensors:
        return None
    names = ", ".join(f"a{i}" for i in range(len(tensors)))
    makers = ", ".join(f"torch.zeros({list(t.shape)}, dtype={t.dtype})" for t in tensors)
    source = (f"import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, {names}):\n"
              f"        out = torch.ops.{target}({', '.join(parts)})\n"
              f"        return out if isinstance(out, tuple) else (out,)\n\n\n"
              f"def make_inputs():\n    return ({makers}{',' if len(tensors) == 1 else ''})\n")
    return source, tensors
