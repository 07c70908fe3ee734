"""Program-level reduction on the syntax tree: for any program, not only generated ones.

Each pass lists the parts it may remove or simplify and builds a candidate TestCase from a
choice of them; the reducer tests candidates in the sandbox. Candidates keep concrete values:

- statements of `forward`: a removed statement whose names are still read later is *cut*: the
  names become new inputs of forward carrying the values recorded for them in a worker (as for
  graph cuts); names read only by the return drop out of the returned tuple;
- returned values (at least one stays);
- expressions: a call or operator replaced by one of its operands;
- keyword arguments;
- literal values, made 0 or 1.

Every candidate is tidied the same way before it is tested: forward parameters nothing reads
are dropped together with their `make_inputs()` entry, their value and the call steps' changes
to them; `__init__` attributes forward never reads are dropped with their state_dict entries.
A candidate that reads a name it never defines is rejected here, without a query.
"""

from __future__ import annotations

import ast
import builtins
import copy
from dataclasses import dataclass, replace
from typing import Any, Iterator

from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class NotAProgram(ValueError):
    """The program lacks `class Model` with `forward` or `def make_inputs()`."""


@dataclass
class Edit:
    """A program's tree and the values that go with it, being edited into a candidate."""

    tree: ast.Module
    inputs: list[Any]
    state: dict[str, Any]
    calls: tuple[CallStep, ...]

    @classmethod
    def of(cls, case: TestCase) -> "Edit":
        try:
            tree = ast.parse(case.program)
        except SyntaxError as e:
            raise NotAProgram(f"the program does not parse: {e}") from e
        edit = cls(tree, list(case.inputs or ()), dict(case.state_dict or {}), tuple(case.calls))
        edit.model, edit.forward, edit.maker  # noqa: B018 - fail early on a non-program
        return edit

    # -- handles ------------------------------------------------------------------------------
    @property
    def model(self) -> ast.ClassDef:
        for n in self.tree.body:
            if isinstance(n, ast.ClassDef) and n.name == "Model":
                return n
        raise NotAProgram("no class Model")

    def method(self, name: str) -> ast.FunctionDef | None:
        return next((f for f in self.model.body if isinstance(f, ast.FunctionDef) and f.name == name), None)

    @property
    def forward(self) -> ast.FunctionDef:
        f = self.method("forward")
        if f is None:
            raise NotAProgram("class Model has no forward")
        return f

    @property
    def maker(self) -> ast.FunctionDef:
        for n in self.tree.body:
            if isinstance(n, ast.FunctionDef) and n.name == "make_inputs":
                return n
        raise NotAProgram("no make_inputs()")

    def maker_tuple(self) -> ast.Tuple | None:
        rets = [s for s in ast.walk(self.maker) if isinstance(s, ast.Return)]
        if len(rets) == 1 and isinstance(rets[0].value, ast.Tuple):
            return rets[0].value
        return None

    def params(self) -> list[str]:
        return [a.arg for a in self.forward.args.args[1:]]

    def return_tuple(self) -> ast.Tuple | None:
        body = self.forward.body
        if body and isinstance(body[-1], ast.Return) and isinstance(body[-1].value, ast.Tuple):
            return body[-1].value
        return None

    def copy(self) -> "Edit":
        return Edit(copy.deepcopy(self.tree), list(self.inputs), dict(self.state), self.calls)

    # -- finishing a candidate ------------------------------------------------------------------
    def tidy(self) -> None:
        self._inline_aliases()
        self._drop_unused_params()
        self._drop_unused_attrs()

    def _inline_aliases(self) -> None:
        """`d = c` (both plain names, `d` assigned once): read `c` where `d` was read, drop the line."""
        body = self.forward.body
        stores: dict[str, int] = {}
        for s in body:
            for name in _stores([s]):
                stores[name] = stores.get(name, 0) + 1
        params = set(self.params())
        for stmt in list(body):
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and isinstance(stmt.value, ast.Name)):
                continue
            alias, source = stmt.targets[0].id, stmt.value.id
            if stores.get(alias, 0) != 1 or stores.get(source, 0) > (0 if source in params else 1) or alias in params:
                continue
            if source not in params and source not in _stores(body[:body.index(stmt)]):
                continue
            for s in body[body.index(stmt) + 1:]:
                for n in ast.walk(s):
                    if isinstance(n, ast.Name) and n.id == alias and isinstance(n.ctx, ast.Load):
                        n.id = source
            body.remove(stmt)

    def _drop_unused_params(self) -> None:
        fwd = self.forward
        if fwd.args.vararg or fwd.args.kwarg:
            return
        read = _loads(fwd.body)
        maker = self.maker_tuple()
        params = self.params()
        if maker is None or len(maker.elts) != len(params) or len(self.inputs) != len(params):
            return
        for i in reversed(range(len(params))):
            if params[i] in read:
                continue
            del fwd.args.args[i + 1]
            del maker.elts[i]
            del self.inputs[i]
            self.calls = tuple(_drop_input(step, i) for step in self.calls)
        if fwd.args.defaults:
            fwd.args.defaults = fwd.args.defaults[-len(fwd.args.args[1:]):] if fwd.args.args[1:] else []

    def _drop_unused_attrs(self) -> None:
        init = self.method("__init__")
        if init is None:
            return
        used = {n.attr for m in self.model.body if isinstance(m, ast.FunctionDef) and m.name != "__init__"
                for n in ast.walk(m) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}
        kept = []
        for stmt in init.body:
            attrs = _self_targets(stmt)
            if attrs and not (set(attrs) & used) and not _reads_self_attr(init.body, attrs, stmt):
                for a in attrs:
                    self.state = {k: v for k, v in self.state.items() if k != a and not k.startswith(a + ".")}
                continue
            kept.append(stmt)
        init.body = kept or [ast.Pass()]

    def undefined(self) -> set[str]:
        """Names forward reads before (or without) defining them: such a candidate cannot run."""
        known = set(dir(builtins)) | _module_names(self.tree) | {"self"} | set(self.params())
        missing: set[str] = set()
        for stmt in self.forward.body:
            missing |= _reads_before_binding(stmt) - known
            known |= _stores([stmt])
        return missing

    def to_case(self, base: TestCase) -> TestCase:
        ast.fix_missing_locations(self.tree)
        program = ast.unparse(self.tree) + "\n"
        keep_graph = base.graph if program == base.program else None
        return base.with_(program=program, inputs=tuple(self.inputs), state_dict=dict(self.state), calls=self.calls,
                          graph=keep_graph)


# -- passes -------------------------------------------------------------------------------------------
def statement_items(case: TestCase) -> list[int]:
    """Indices of forward's body statements a pass may remove (not the final return)."""
    edit = Edit.of(case)
    body = edit.forward.body
    last = len(body) - 1 if body and isinstance(body[-1], ast.Return) else len(body)
    return [i for i in range(last) if not isinstance(body[i], (ast.Global, ast.Nonlocal))]


def without_statements(case: TestCase, keep: list[int], removable: list[int], recorded: dict[str, Any],
                       recorded_shapes: dict[str, tuple[str, list[int]]]) -> TestCase | None:
    """`case` with the removable statements not in `keep` removed (cut names become inputs)."""
    edit = Edit.of(case)
    body = edit.forward.body
    drop = set(removable) - set(keep)
    removed_defs = set().union(*[_stores([body[i]]) for i in drop]) if drop else set()
    edit.forward.body = [s for i, s in enumerate(body) if i not in drop]
    ret = edit.return_tuple()
    if ret is not None:  # names only the return reads leave the outputs
        later = _loads(edit.forward.body[:-1])
        ret.elts = [e for e in ret.elts if not (_loads_expr(e) & removed_defs - later)]
        if not ret.elts:
            return None
    missing = edit.undefined() & removed_defs
    if missing:
        maker = edit.maker_tuple()
        if maker is None or len(maker.elts) != len(edit.params()) or len(edit.inputs) != len(edit.params()):
            return None
        from nnforge.generator.ir import Value
        from nnforge.generator.materialize import random_tensor_expr

        for name in sorted(missing, key=lambda n: _first_read(edit.forward.body, n)):
            if name not in recorded:
                return None
            dtype, shape = recorded_shapes[name]
            edit.forward.args.args.append(ast.arg(arg=name))
            maker.elts.append(ast.parse(random_tensor_expr(Value(0, dtype, list(shape))), mode="eval").body)
            edit.inputs.append(recorded[name])
    if edit.undefined():
        return None
    edit.tidy()
    return edit.to_case(case)


def without_dead_code(case: TestCase) -> TestCase | None:
    """`case` without what nothing reads: forward's assignments whose names no later statement or
    the return reads, then module-level classes and functions no one names. None if nothing goes.

    Reduction passes stop at their budget, often right after dropping the outputs that made such
    lines live; this is one more candidate, cheap to test, so a report never shows dead lines.
    Only lines without side effects go: plain name targets, and no call of the program's own
    definitions, of an in-place method (`x.add_()`) or with `out=`."""
    edit = Edit.of(case)
    body = edit.forward.body
    if not body or not isinstance(body[-1], ast.Return):
        return None
    own = {n.name for n in edit.tree.body if isinstance(n, _DEFINITIONS)}
    live = _loads([body[-1]])
    kept: list[ast.stmt] = [body[-1]]
    for stmt in reversed(body[:-1]):
        if _dead_assignment(stmt, live, own):
            continue
        kept.append(stmt)
        live |= _loads([stmt])
    edit.forward.body = kept[::-1]
    while True:  # a definition, module-level name or import only a dropped one named goes too
        named = {n.id for n in ast.walk(edit.tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        unused = [n for n in edit.tree.body if isinstance(n, _DEFINITIONS) and not n.decorator_list
                  and n.name not in named and n.name not in ("Model", "make_inputs")
                  or isinstance(n, ast.Assign) and _dead_assignment(n, named, own)
                  or _unused_import(n, named)]
        if not unused:
            break
        edit.tree.body = [n for n in edit.tree.body if all(n is not u for u in unused)]
    edit.tidy()
    cand = edit.to_case(case)
    return None if cand.program == case.program else cand


def _unused_import(stmt: ast.stmt, named: set[str]) -> bool:
    """An import none of whose names is read (the header's `torch` and `F` stay: every report has them)."""
    if not isinstance(stmt, (ast.Import, ast.ImportFrom)) or any(a.name == "*" for a in stmt.names):
        return False
    bound = {(a.asname or a.name).split(".")[0] for a in stmt.names}
    return not bound & (named | {"torch", "F"})


def _dead_assignment(stmt: ast.stmt, live: set[str], own: set[str]) -> bool:
    if not isinstance(stmt, ast.Assign):
        return False
    targets = [e for t in stmt.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    if not all(isinstance(t, ast.Name) for t in targets) or {t.id for t in targets} & live:
        return False
    for n in ast.walk(stmt.value):
        if isinstance(n, (ast.Lambda, ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            return False
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name) and (f.id in own or f.id in ("print", "exec", "eval", "setattr", "delattr")):
                return False
            if isinstance(f, ast.Attribute) and (f.attr.endswith("_") and not f.attr.endswith("__")
                                                 or f.attr in ("manual_seed", "seed", "backward")):
                return False
            if any(k.arg == "out" for k in n.keywords):
                return False
    return True


def output_count(case: TestCase) -> int:
    ret = Edit.of(case).return_tuple()
    return 0 if ret is None else len(ret.elts)


def with_outputs(case: TestCase, keep: list[int]) -> TestCase | None:
    edit = Edit.of(case)
    ret = edit.return_tuple()
    if ret is None or not keep:
        return None
    ret.elts = [e for i, e in enumerate(ret.elts) if i in keep]
    edit.tidy()
    return edit.to_case(case)


def expression_candidates(case: TestCase) -> Iterator[TestCase]:
    """Each call or operator in forward (outermost first) replaced by each of its tensor operands."""
    base = Edit.of(case)
    count = sum(1 for _ in _reducible(base))
    for k in range(count):
        probe = base.copy()
        node = list(_reducible(probe))[k]
        for j in range(len(_operands(node))):
            edit = base.copy()
            target = list(_reducible(edit))[k]
            replacement = _operands(target)[j]
            _replace(edit.forward, target, replacement)
            if edit.undefined():
                continue
            edit.tidy()
            yield edit.to_case(case)


def keyword_items(case: TestCase) -> list[tuple[int, str]]:
    edit = Edit.of(case)
    return [(k, kw.arg) for k, call in enumerate(_calls(edit)) for kw in call.keywords if kw.arg is not None]


def with_keywords(case: TestCase, keep: list[tuple[int, str]], all_items: list[tuple[int, str]]) -> TestCase | None:
    edit = Edit.of(case)
    drop = set(all_items) - set(keep)
    for k, call in enumerate(_calls(edit)):
        call.keywords = [kw for kw in call.keywords if (k, kw.arg) not in drop]
    edit.tidy()
    return edit.to_case(case)


def literal_candidates(case: TestCase) -> Iterator[TestCase]:
    """Each number in forward made simpler: floats to 0.0 or 1.0, integers beyond +-1 to 1."""
    base = Edit.of(case)
    count = len(_literals(base))
    for k in range(count):
        node = _literals(base)[k]
        for simpler in _simpler(node.value):
            edit = base.copy()
            _literals(edit)[k].value = simpler
            edit.tidy()
            yield edit.to_case(case)


CANONICAL_DTYPE = "float32"
_CASTABLE = ("float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8")


def dtype_candidates(case: TestCase) -> Iterator[TestCase]:
    """The inputs cast to float32: all of them at once, then each alone.

    A maintainer reads a float32 repro first, and one wrong operator found on int64, bfloat16 and
    float32 inputs is one bug: a reduction that ends on float32 wherever the bug allows it lets
    their keys and titles meet. Masks (bool) stay, and an input a later call changes stays."""
    base = Edit.of(case)
    maker = base.maker_tuple()
    if maker is None or len(maker.elts) != len(base.inputs) or len(base.inputs) != len(base.params()):
        return
    changed = {c.index for step in base.calls for c in step.inputs}
    import torch

    idx = [i for i, v in enumerate(base.inputs) if isinstance(v, torch.Tensor) and i not in changed
           and str(v.dtype).replace("torch.", "") in _CASTABLE]
    for group in ([idx] if len(idx) > 1 else []) + [[i] for i in idx]:
        yield _cast_inputs(case, base, group)


def _cast_inputs(case: TestCase, base: Edit, idx: list[int]) -> TestCase:
    import torch

    from nnforge.generator.ir import Value
    from nnforge.generator.materialize import random_tensor_expr

    edit = base.copy()
    maker = edit.maker_tuple()
    assert maker is not None
    for i in idx:
        v = edit.inputs[i]
        edit.inputs[i] = v.detach().to(torch.float32)
        maker.elts[i] = ast.parse(random_tensor_expr(Value(0, CANONICAL_DTYPE, list(v.shape))), mode="eval").body
    return edit.to_case(case)


# -- helpers ------------------------------------------------------------------------------------------
def _drop_input(step: CallStep, index: int) -> CallStep:
    changes = tuple(c if c.index < index else replace(c, index=c.index - 1) for c in step.inputs if c.index != index)
    return step if changes == step.inputs else replace(step, inputs=changes)


def _loads(stmts: list[ast.stmt]) -> set[str]:
    return {n.id for s in stmts for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _loads_expr(e: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stores(stmts: list[ast.stmt]) -> set[str]:
    return set().union(*[_stores_in(s) for s in stmts])


def _reads_before_binding(stmt: ast.stmt) -> set[str]:
    """The names `stmt` reads before it binds them itself.

    An assignment reads its value before it binds its targets (`x = x + 1` reads an outer `x`). A
    compound statement binds names its own body then reads: the `as` of a `with` or an `except`, a
    `for` target, an assignment earlier in its body; an expression binds a lambda's or a
    comprehension's variables. Those are no reads from outside. Counting them made every program
    holding a mutator's `with`, loop, lambda or comprehension look undefined, so that no statement
    of it could ever be cut."""
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        reads = _free_loads(stmt.value) if stmt.value is not None else set()
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            reads.add(stmt.target.id)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return reads | set().union(*[_free_loads(t) for t in targets])
    bodies = [getattr(stmt, f) for f in ("body", "orelse", "finalbody") if isinstance(getattr(stmt, f, None), list)]
    if not bodies or isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return _free_loads(stmt)
    header: list[ast.AST] = []
    known: set[str] = set()
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        header = [i.context_expr for i in stmt.items]
        known = set().union(*[_stores_in(i.optional_vars) for i in stmt.items if i.optional_vars is not None])
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        header, known = [stmt.iter], _stores_in(stmt.target)
    elif isinstance(stmt, (ast.If, ast.While)):
        header = [stmt.test]
    header += [h.type for h in getattr(stmt, "handlers", []) if h.type is not None]
    reads = set().union(*[_free_loads(h) for h in header]) if header else set()
    blocks = bodies + [h.body for h in getattr(stmt, "handlers", [])]
    names = {id(h.body): {h.name} for h in getattr(stmt, "handlers", []) if h.name}
    for block in blocks:
        seen = known | names.get(id(block), set())
        for inner in block:
            reads |= _reads_before_binding(inner) - seen
            seen |= _stores([inner])
    return reads


def _free_loads(node: ast.AST) -> set[str]:
    """Names read in `node` that no lambda, comprehension or walrus inside it binds."""
    loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    scoped: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            scoped.add(n.arg)
        elif isinstance(n, ast.comprehension) or isinstance(n, ast.NamedExpr):
            scoped |= _stores_in(n.target)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scoped.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            scoped |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return loads - scoped


def _stores_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _first_read(body: list[ast.stmt], name: str) -> int:
    for i, s in enumerate(body):
        if name in _loads([s]):
            return i
    return len(body)


def _module_names(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for n in tree.body:
        if isinstance(n, _DEFINITIONS):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name.split(".")[0]) for a in n.names}
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            out |= _stores([n])
    return out


def _self_targets(stmt: ast.stmt) -> list[str]:
    if not isinstance(stmt, ast.Assign):
        return []
    out = []
    for t in stmt.targets:
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
            out.append(t.attr)
        else:
            return []
    return out


def _reads_self_attr(body: list[ast.stmt], attrs: list[str], defining: ast.stmt) -> bool:
    """Does another __init__ statement read one of `attrs` (so the definition must stay)?"""
    for s in body:
        if s is defining:
            continue
        for n in ast.walk(s):
            if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and n.attr in attrs
                    and isinstance(n.value, ast.Name) and n.value.id == "self"):
                return True
    return False


def _reducible(edit: Edit) -> Iterator[ast.expr]:
    """Calls and operators in forward's non-return statements that have a non-literal operand."""
    for stmt in edit.forward.body:
        if isinstance(stmt, ast.Return):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp)) and _operands(node):
                yield node


def _operands(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.Call):
        ops = [a for a in node.args if not _literal(a) and not isinstance(a, ast.Starred)]
        if isinstance(node.func, ast.Attribute) and not _module_path(node.func.value):
            ops = [node.func.value] + ops  # x.add(y): the receiver is an operand
        return ops
    if isinstance(node, ast.BinOp):
        return [o for o in (node.left, node.right) if not _literal(o)]
    if isinstance(node, ast.UnaryOp):
        return [] if _literal(node.operand) else [node.operand]
    return []


def _literal(e: ast.expr) -> bool:
    if isinstance(e, ast.Constant):
        return True
    if isinstance(e, ast.UnaryOp):
        return _literal(e.operand)
    if isinstance(e, (ast.Tuple, ast.List)):
        return all(_literal(x) for x in e.elts)
    if isinstance(e, ast.Attribute) and _module_path(e):
        return True  # torch.float16
    return False


def _module_path(e: ast.expr) -> bool:
    while isinstance(e, ast.Attribute):
        e = e.value
    return isinstance(e, ast.Name) and e.id in ("torch", "F", "math", "nn", "np")


def _replace(root: ast.AST, old: ast.expr, new: ast.expr) -> None:
    for parent in ast.walk(root):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = new
                        return


def _calls(edit: Edit) -> list[ast.Call]:
    return [n for s in edit.forward.body for n in ast.walk(s) if isinstance(n, ast.Call)]


def _literals(edit: Edit) -> list[ast.Constant]:
    return [n for s in edit.forward.body if not isinstance(s, ast.Return) for n in ast.walk(s)
            if isinstance(n, ast.Constant) and type(n.value) in (int, float) and _simpler(n.value)]


def _simpler(v: int | float) -> list[int | float]:
    """Simpler values, always towards 0: a pass accepting them can never cycle."""
    if isinstance(v, float):
        if v != v or v == 0.0:
            return []
        return [0.0] if v == 1.0 else [0.0, 1.0]
    return [1] if abs(v) > 1 else []
