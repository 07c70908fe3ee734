"""Turn a compiler regression test (or a bug report's repro script) into a TestCase program.

Compiler regression tests come in a few shapes; each names a *target* (the function or module
under test) and its *example arguments*:

- a compare helper: `def fn(x, y): ...` then `self.common(fn, (torch.randn(4), y))`
  (also `check_model(self, fn, args)`, `torch.onnx.export(model, (x,), ...)`: a callable
  followed by a tuple of arguments);
- a compile wrapper: `opt = torch.compile(fn)` / `torch._dynamo.optimize("eager")(fn)` /
  `torch.compile(backend=...)(mod)`, then `opt(x, y)` (usually compared with `fn(x, y)`);
- a decorated function: `@torch.compile def f(x): ...` then `f(x)`;
- a module: `class Repro(nn.Module)`, `mod = Repro()`, then `mod(x)` or a compiled `mod`;
- failing those, a plain call of a function or module the test defines.

The extractor works on the syntax tree only (it never runs the test). It takes the statements
of the test body that the target and the arguments need (a backward slice over names), the
helpers and imports of the same file that those use, and writes

    <imports and helpers the test uses>
    class Model(torch.nn.Module):      # __init__ builds the target (seeded by the caller)
        def forward(self, x, y):
            return fn(x, y)            # the target, uncompiled
    def make_inputs():
        <statements that built the example arguments>
        return (x, y)

CUDA devices become CPU (`self.device`, `GPU_TYPE`, "cuda", `.cuda()`): NNForge tests on CPU.
Whether the program really runs is for the sandbox to say (`mutators/validate.py`).
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
from dataclasses import dataclass, field
from typing import Any

COMPARE_HELPERS = frozenset({
    "common", "check_model", "check_model_gpu", "check_model_cuda", "_check_model", "check_model_cpu",
    "assert_compiled_close", "_test_common", "run_and_compare", "compare", "_compare",
})
_COMPILE_NAMES = frozenset({"compile"})  # torch.compile(fn, ...), compile(fn)
_WRAPPER_FACTORIES = frozenset({"compile", "optimize", "optimize_assert"})  # f(...)(fn)
_RESERVED_ATTRS = frozenset({
    "forward", "training", "eval", "train", "to", "cuda", "cpu", "apply", "modules", "children", "parameters",
    "buffers", "state_dict", "type", "float", "half", "double", "zero_grad", "register_buffer", "add_module",
})
_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__"}
_DEVICE_NAMES = frozenset({"GPU_TYPE", "HAS_GPU_TYPE", "DEVICE", "device_type"})


@dataclass(frozen=True)
class Extraction:
    """One test turned into a program (`ok`), or why it could not be (`error`)."""

    name: str
    program: str | None = None
    pattern: str = ""  # "compare-helper" | "compile-call" | "decorated" | "module" | "direct-call" | "llm"
    error: str = ""
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.program is not None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "pattern": self.pattern, "error": self.error,
                "notes": list(self.notes)}


class ExtractError(Exception):
    """The test does not have a shape the rules know; the message says what was missing."""


# -- public entry points ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def parse_cached(source: str) -> ast.Module:
    """ast.parse, remembered for the few files being worked on (a big test file is parsed once per commit).

    Callers must not mutate the tree: the extractor copies what it changes.
    """
    return ast.parse(source)


def test_functions(source: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Test functions of a file by qualified name: module-level `test*` and `Class.test*` methods."""
    tree = parse_cached(source)
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    out[f"{node.name}.{item.name}"] = item
    return out


def function_source(source: str, qualname: str) -> str:
    """The text of one test function (for LLM prompts and seed metadata)."""
    node = test_functions(source).get(qualname)
    if node is None:
        return ""
    return ast.get_source_segment(source, node) or ast.unparse(node)


def extract_test(source: str, qualname: str) -> Extraction:
    """Extract the test `qualname` ("TestClass.test_x" or "test_x") of the test file `source`."""
    try:
        tree = parse_cached(source)
    except SyntaxError as e:
        return Extraction(qualname, error=f"the test file does not parse: {e.msg} (line {e.lineno})")
    node = test_functions(source).get(qualname)
    if node is None:
        return Extraction(qualname, error="no such test function in the file")
    if isinstance(node, ast.AsyncFunctionDef):
        return Extraction(qualname, error="async test")
    extra = [a.arg for a in node.args.args + node.args.kwonlyargs if a.arg != "self"]
    if extra or node.args.vararg:
        return Extraction(qualname, error=f"parametrized test (takes {', '.join(extra) or '*args'})")
    context = [s for s in tree.body if not _is_main_guard(s)]
    try:
        program, pattern, notes = _extract(list(node.body), context)
    except ExtractError as e:
        return Extraction(qualname, error=str(e))
    return Extraction(qualname, program, pattern, notes=tuple(notes))


def extract_script(source: str, name: str = "script") -> Extraction:
    """Extract a repro script (a bug report's code block): its top level plays the test body."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return Extraction(name, error=f"the code does not parse: {e.msg} (line {e.lineno})")
    body: list[ast.stmt] = []
    for s in tree.body:
        body.extend(s.body if _is_main_guard(s) else [s])  # type: ignore[attr-defined]
    try:
        program, pattern, notes = _extract(body, [])
    except ExtractError as e:
        return Extraction(name, error=str(e))
    return Extraction(name, program, pattern, notes=tuple(notes))


def check_contract(program: str) -> str:
    """'' if `program` parses and defines `class Model` and `def make_inputs`, else what is wrong."""
    try:
        tree = ast.parse(program)
    except SyntaxError as e:
        return f"does not parse: {e.msg} (line {e.lineno})"
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in ("Model", "make_inputs") if n not in names]
    return f"does not define {' and '.join(missing)}" if missing else ""


# -- the target and its arguments -----------------------------------------------------------------------------
@dataclass
class _Target:
    expr: ast.expr  # a Name bound in the body / file, or a constructor expression
    args: list[ast.expr]
    keywords: list[ast.keyword]
    stmt_index: int  # index (in the flattened body) of the statement holding the call
    pattern: str
    strip_decorators: set[str] = field(default_factory=set)  # function names whose compile decorators go


def _extract(raw_body: list[ast.stmt], context: list[ast.stmt]) -> tuple[str, str, list[str]]:
    notes: list[str] = []
    body = _flatten([_CpuOnly().visit(copy.deepcopy(s)) for s in raw_body])
    target = _find_target(body, context)  # the file's top level is only read; what is carried is copied
    args = _expand_args(target.args, body, target.stmt_index)
    for kw in target.keywords:
        if kw.arg is None or not isinstance(kw.value, ast.Constant):
            raise ExtractError("the call passes non-constant keyword arguments")
    return _assemble(body, context, target, args, notes), target.pattern, notes


def _flatten(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """Inline `with` blocks (config patches, no_grad) and unroll `for v in [a, b]` to its first item."""
    out: list[ast.stmt] = []
    for s in stmts:
        if isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                if item.optional_vars is not None:
                    out.append(ast.Assign(targets=[item.optional_vars], value=item.context_expr, lineno=s.lineno))
            out.extend(_flatten(s.body))
        elif isinstance(s, ast.For) and not s.orelse and not _breaks_out(s.body):
            # The first iteration stands for the loop: `for dtype in [a, b]` -> `dtype = a`,
            # `for x, y in itertools.product(...)` -> `x, y = next(iter(itertools.product(...)))`.
            literal = isinstance(s.iter, (ast.List, ast.Tuple)) and s.iter.elts and not any(
                isinstance(e, ast.Starred) for e in s.iter.elts)
            first = s.iter.elts[0] if literal else ast.Call(
                func=ast.Name(id="next", ctx=ast.Load()),
                args=[ast.Call(func=ast.Name(id="iter", ctx=ast.Load()), args=[s.iter], keywords=[])], keywords=[])
            out.append(ast.Assign(targets=[s.target], value=first, lineno=s.lineno))
            out.extend(_flatten(s.body))
        else:
            out.append(s)
    for s in out:
        ast.fix_missing_locations(s)
    return out


def _breaks_out(stmts: list[ast.stmt]) -> bool:
    """Does a `break`/`continue` of this loop level occur (not inside a nested loop or function)?"""

    def visit(n: ast.AST) -> bool:
        if isinstance(n, (ast.Break, ast.Continue)):
            return True
        if isinstance(n, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                          ast.Lambda)):
            return False
        return any(visit(c) for c in ast.iter_child_nodes(n))

    return any(visit(s) for s in stmts)


def _find_target(body: list[ast.stmt], context: list[ast.stmt]) -> _Target:
    """The first shape that matches, in order of how sure it is."""
    local_funcs = {s.name: s for s in body if isinstance(s, ast.FunctionDef)}
    instances = _module_instances(body, context)
    callables = set(local_funcs) | instances | _lambdas(body) | _lambdas(context) | {
        s.name for s in context if isinstance(s, (ast.FunctionDef, ast.ClassDef))}

    # Compile wrappers: opt = torch.compile(fn) / optimize(...)(fn); calls opt(...); torch.compile(fn)(...).
    wrapped: dict[str, ast.expr] = {}
    for i, s in enumerate(body):
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            inner = _compiled_target(s.value)
            if inner is not None:
                wrapped[s.targets[0].id] = inner
    for i, s in enumerate(body):
        for call in _calls_in(s):
            if isinstance(call.func, ast.Name) and call.func.id in wrapped:
                return _Target(wrapped[call.func.id], call.args, call.keywords, i, "compile-call")
            inner = _compiled_target(call.func)
            if inner is not None:
                return _Target(inner, call.args, call.keywords, i, "compile-call")

    # Decorated: @torch.compile def f(...); f(...)
    decorated = {name for name, f in local_funcs.items() if any(_is_compile_decorator(d) for d in f.decorator_list)}
    for i, s in enumerate(body):
        for call in _calls_in(s):
            if isinstance(call.func, ast.Name) and call.func.id in decorated:
                return _Target(call.func, call.args, call.keywords, i, "decorated", {call.func.id})

    # Compare helpers: self.common(fn, (x, y)), check_model(self, fn, args), torch.onnx.export(m, (x,), ...):
    # any call whose arguments hold a callable the test defines followed by a tuple of arguments.
    for i, s in enumerate(body):
        for call in _calls_in(s):
            pair = _callable_then_args(call.args, callables, body, i)
            if pair is not None:
                fn_expr, args_expr = pair
                return _Target(fn_expr, _as_arg_list(args_expr), [], i, "compare-helper")

    # A module or function the test defines, called directly: mod(x), fn(x, y).
    for i, s in enumerate(body):
        for call in _calls_in(s):
            if isinstance(call.func, ast.Name) and call.func.id in instances and call.args:
                return _Target(call.func, call.args, call.keywords, i, "module")
    for i, s in enumerate(body):
        for call in _calls_in(s):
            if isinstance(call.func, ast.Name) and call.func.id in local_funcs and call.args and not any(
                    isinstance(a, ast.Name) and (a.id in callables or a.id in wrapped)
                    for a in call.args):  # run(fn), run(compiled): a harness, not the code under test
                return _Target(call.func, call.args, call.keywords, i, "direct-call")
    if any(_dotted(c.func).startswith("self.") for s in body for c in _calls_in(s)):
        raise ExtractError("the test only calls helpers of the test class (self.<method>); no function under test")
    raise ExtractError("no function or module under test with example inputs was found")


def _calls_in(stmt: ast.stmt) -> list[ast.Call]:
    """Calls in a statement in source order, not descending into nested function or class bodies."""
    out: list[ast.Call] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return
        if isinstance(node, ast.Call):
            out.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return out
    visit(stmt)
    out.sort(key=lambda c: (c.lineno, c.col_offset))
    return out


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def _compiled_target(node: ast.expr) -> ast.expr | None:
    """X when `node` is torch.compile(X, ...), compile(X), or a wrapper factory applied: optimize(...)(X)."""
    if not isinstance(node, ast.Call):
        return None
    name = _dotted(node.func).rsplit(".", 1)[-1]
    if name in _COMPILE_NAMES and node.args and _dotted(node.func) in ("torch.compile", "compile"):
        return node.args[0]
    if isinstance(node.func, ast.Call) and node.args:
        inner_name = _dotted(node.func.func).rsplit(".", 1)[-1]
        if inner_name in _WRAPPER_FACTORIES and not (inner_name == "compile" and node.func.args):
            return node.args[0]
    return None


def _is_compile_decorator(d: ast.expr) -> bool:
    name = _dotted(d.func if isinstance(d, ast.Call) else d)
    return name.rsplit(".", 1)[-1] in _WRAPPER_FACTORIES and name.split(".")[0] in ("torch", "compile", "optimize",
                                                                                  "dynamo", "_dynamo")


def _lambdas(stmts: list[ast.stmt]) -> set[str]:
    """Names assigned a lambda or a functools.partial at statement level."""
    out = set()
    for s in stmts:
        if isinstance(s, ast.Assign) and (isinstance(s.value, ast.Lambda) or (
                isinstance(s.value, ast.Call) and _dotted(s.value.func).endswith("partial"))):
            for t in s.targets:
                if isinstance(t, ast.Name):
                    out.add(t.id)
    return out


def _module_instances(body: list[ast.stmt], context: list[ast.stmt]) -> set[str]:
    """Names bound to `SomeClass(...)` (optionally `.eval()`/`.to(...)`) where SomeClass is defined here."""
    classes = {s.name for s in body + context if isinstance(s, ast.ClassDef)}
    out = set()
    for s in body + context:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            v = s.value
            while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and isinstance(v.func.value, ast.Call):
                v = v.func.value  # Repro().eval().to(...)
            if isinstance(v, ast.Call) and (_dotted(v.func) in classes or _dotted(v.func).startswith(("torch.nn.", "nn."))):
                out.add(s.targets[0].id)
    return out


def _callable_then_args(args: list[ast.expr], callables: set[str], body: list[ast.stmt],
                        index: int) -> tuple[ast.expr, ast.expr] | None:
    """(fn, args) when a call's arguments hold a known callable followed by a tuple/list of arguments."""
    for j in range(len(args) - 1):
        fn, nxt = args[j], args[j + 1]
        fn_ok = (isinstance(fn, ast.Name) and fn.id in callables) or (
            isinstance(fn, ast.Call) and _root_name(fn.func) in callables)  # Repro(), mod.to(dtype)
        if fn_ok and _tuple_like(nxt, body, index):
            return fn, nxt
    return None


def _root_name(node: ast.AST) -> str:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _tuple_like(node: ast.expr, body: list[ast.stmt], index: int) -> bool:
    if isinstance(node, (ast.Tuple, ast.List)):
        return True
    if isinstance(node, ast.Name):
        value = _single_binding(node.id, body, index)
        return isinstance(value, (ast.Tuple, ast.List))
    return False


def _single_binding(name: str, body: list[ast.stmt], index: int) -> ast.expr | None:
    """The value of `name = ...` when that is the only binding of `name` before `index`."""
    found = [s for s in body[:index] if name in _defines(s)]
    if len(found) == 1 and isinstance(found[0], ast.Assign) and len(found[0].targets) == 1 \
            and isinstance(found[0].targets[0], ast.Name):
        return found[0].value
    return None


def _as_arg_list(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, (ast.Tuple, ast.List)):
        return list(node.elts)
    return [ast.Starred(value=node, ctx=ast.Load())]


def _expand_args(args: list[ast.expr], body: list[ast.stmt], index: int) -> list[ast.expr]:
    """`*args` where `args = (a, b)` is bound once becomes `a, b`, so forward gets named parameters."""
    out: list[ast.expr] = []
    for a in args:
        if isinstance(a, ast.Starred) and isinstance(a.value, ast.Name):
            value = _single_binding(a.value.id, body, index)
            if isinstance(value, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in value.elts):
                out.extend(value.elts)
                continue
        out.append(a)
    return out


# -- names: what a statement defines and uses ----------------------------------------------------------------------
def _defines(stmt: ast.stmt) -> set[str]:
    """Names a statement binds or modifies at its own level (x = ..., x[i] = ..., x += ..., def x, import x)."""
    out: set[str] = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for a in stmt.names:
            if a.name != "*":
                out.add(a.asname or a.name.split(".")[0])
        return out
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, ast.For):
        targets = [stmt.target]
    elif isinstance(stmt, (ast.If, ast.Try, ast.While)):
        for s in ast.walk(stmt):
            if isinstance(s, ast.stmt) and s is not stmt:
                out |= _defines(s)
        return out
    for t in targets:
        out |= _target_names(t)
    return out


def _target_names(t: ast.expr) -> set[str]:
    if isinstance(t, ast.Name):
        return {t.id}
    if isinstance(t, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(e) for e in t.elts)) if t.elts else set()
    if isinstance(t, ast.Starred):
        return _target_names(t.value)
    if isinstance(t, (ast.Subscript, ast.Attribute)):
        base = t.value
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
        return {base.id} if isinstance(base, ast.Name) else set()
    return set()


def _pure_defines(stmt: ast.stmt) -> set[str]:
    """Names a statement binds afresh (so earlier bindings of them are not needed)."""
    if isinstance(stmt, ast.Assign):
        return set().union(*(_target_names(t) for t in stmt.targets if isinstance(t, (ast.Name, ast.Tuple, ast.List))))
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
        return _defines(stmt)
    return set()


def free_names(node: ast.AST) -> set[str]:
    """Names a piece of code reads that it does not bind itself (an over-approximation is fine)."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (loaded if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= _defines(n)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        loaded |= set().union(set(), *(free_names(d) for d in node.decorator_list))
        if isinstance(node, ast.ClassDef):
            loaded |= set().union(set(), *(free_names(b) for b in node.bases))
    return (loaded - bound) - _BUILTINS


def _uses(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return free_names(stmt) - {stmt.name}
    return free_names(stmt) | (_defines(stmt) - _pure_defines(stmt))


def _is_infra(stmt: ast.stmt) -> bool:
    """Statements of the test harness: assertions, compile calls, resets, prints."""
    if isinstance(stmt, ast.Assert):
        return True
    for call in _calls_in(stmt):
        name = _dotted(call.func)
        last = name.rsplit(".", 1)[-1]
        if last.startswith(("assert", "skip")) or last in COMPARE_HELPERS or name == "print" \
                or name.endswith(("_dynamo.reset", "manual_seed")) or _compiled_target(call) is not None:
            return True
    return False


def _slice(needed: set[str], body: list[ast.stmt], end: int) -> tuple[list[ast.stmt], set[str]]:
    """The statements of body[:end] that the names `needed` depend on, in order; and names left unbound."""
    needed = set(needed)
    picked: list[ast.stmt] = []
    for s in reversed(body[:end]):
        touched = _defines(s)
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            touched = _expr_call_touches(s.value)
        if not (touched & needed) or _is_infra(s):
            continue
        picked.append(s)
        needed = (needed - _pure_defines(s)) | _uses(s)
    picked.reverse()
    return picked, needed


def _expr_call_touches(call: ast.Call) -> set[str]:
    """`mod.eval()`, `x.requires_grad_()`, `torch.nn.init.zeros_(mod.weight)`: names the call may change."""
    func = call.func
    if isinstance(func, ast.Attribute):
        base = func.value
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        if isinstance(base, ast.Name) and base.id not in ("torch", "self", "np", "numpy"):
            return {base.id}
    if _dotted(func).endswith("_") and call.args:
        return free_names(call.args[0])
    return set()


# -- assembling the program ---------------------------------------------------------------------------------------
def _assemble(body: list[ast.stmt], context: list[ast.stmt], target: _Target, args: list[ast.expr],
              notes: list[str]) -> str:
    end = target.stmt_index
    target_expr = copy.deepcopy(target.expr)
    target_stmts, target_free = _slice(free_names(target_expr), body, end)
    target_stmts = [_strip_compile_decorators(s) if isinstance(s, ast.FunctionDef) and s.name in target.strip_decorators
                    else s for s in target_stmts]
    arg_holder = ast.Tuple(elts=[copy.deepcopy(a) for a in args], ctx=ast.Load())
    input_stmts, input_free = _slice(free_names(arg_holder), body, end)

    # Definitions (and imports) that need nothing computed in the test body move to module level.
    hoisted = _hoistable(target_stmts) | _hoistable(input_stmts)
    module_defs = sorted({id(s): s for s in target_stmts + input_stmts if id(s) in hoisted}.values(),
                         key=lambda s: getattr(s, "lineno", 0))
    init_stmts = [copy.deepcopy(s) for s in target_stmts if id(s) not in hoisted]
    inputs_body = [copy.deepcopy(s) for s in input_stmts if id(s) not in hoisted]
    module_defs = [copy.deepcopy(s) for s in module_defs]

    # Names still unbound come from the file: imports, helpers, constants (transitively).
    body_bound = set().union(set(), *(_defines(s) for s in body))
    harness_only = (target_free | input_free) & body_bound
    if harness_only:
        raise ExtractError("the code under test or its inputs use " + ", ".join(sorted(harness_only))
                           + ", which the test binds only through its compile harness or after the call")
    unresolved = (target_free | input_free | set().union(set(), *(_uses(s) for s in module_defs))) - body_bound
    carried, missing = _carry_from_context(unresolved, context)
    carried = [_CpuOnly().visit(copy.deepcopy(s)) for s in carried]
    if "self" in missing or any(_mentions_self(n) for n in init_stmts + inputs_body + module_defs + carried
                                + [target_expr, arg_holder]):
        raise ExtractError("the code under test uses the test instance (self.<attribute>)")
    missing -= {"torch"}
    if missing:
        star_imports = [copy.deepcopy(s) for s in context
                        if isinstance(s, ast.ImportFrom) and any(a.name == "*" for a in s.names)]
        if not star_imports:
            raise ExtractError("names defined nowhere in the file: " + ", ".join(sorted(missing)))
        carried = sorted(carried + star_imports, key=lambda s: getattr(s, "lineno", 0))
        notes.append("carried star imports for " + ", ".join(sorted(missing)))

    user_code = carried + module_defs
    _rename_clashes(user_code, init_stmts + inputs_body + [target_expr, arg_holder], notes)

    # The Model wrapper: forward calls the module-level function, or the object __init__ built.
    module_level = set().union(set(), *(_defines(s) for s in user_code))
    if isinstance(target_expr, ast.Name) and target_expr.id in module_level and not init_stmts:
        callee: ast.expr = target_expr
        init_body: list[ast.stmt] = []
    else:
        callee = _self_attr(_attr_name(target_expr))
        init_body = init_stmts + [ast.Assign(targets=[_self_attr(callee.attr, ast.Store())], value=target_expr)]
    init_body.insert(0, ast.parse("super().__init__()").body[0])
    target_def = next((s for s in user_code + init_stmts if isinstance(s, ast.FunctionDef)
                       and isinstance(target_expr, ast.Name) and s.name == target_expr.id), None)
    params, call_args = _forward_params(arg_holder.elts, target_def)
    forward = ast.FunctionDef(
        name="forward", args=_arguments(["self"] + [p for p in params if p != "*args"], "args" if "*args" in params else None),
        body=[ast.Return(value=ast.Call(func=callee, args=call_args, keywords=copy.deepcopy(target.keywords)))],
        decorator_list=[], returns=None, type_params=[])
    init = ast.FunctionDef(name="__init__", args=_arguments(["self"]), body=init_body, decorator_list=[],
                           returns=None, type_params=[])
    model = ast.ClassDef(name="Model", bases=[ast.parse("torch.nn.Module", mode="eval").body], keywords=[],
                         body=[init, forward], decorator_list=[], type_params=[])
    make_inputs = ast.FunctionDef(name="make_inputs", args=_arguments([]),
                                  body=inputs_body + [ast.Return(value=arg_holder)], decorator_list=[], returns=None,
                                  type_params=[])
    header = [] if any(_imports_torch(s) for s in user_code) else [ast.parse("import torch").body[0]]
    module = ast.Module(body=header + user_code + [model, make_inputs], type_ignores=[])
    ast.fix_missing_locations(module)
    if any(getattr(n, _CPU_MARK, False) for n in ast.walk(module)):
        notes.append("devices rewritten to cpu")
    program = ast.unparse(module) + "\n"
    problem = check_contract(program)
    if problem:
        raise ExtractError(f"the assembled program {problem}")
    return program


def _hoistable(stmts: list[ast.stmt]) -> set[int]:
    """ids of the defs/imports among `stmts` that use no name the other statements compute."""
    kinds = (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    stay = {id(s) for s in stmts if not isinstance(s, kinds)}
    while True:
        computed = set().union(set(), *(_defines(s) for s in stmts if id(s) in stay))
        more = {id(s) for s in stmts if id(s) not in stay and _uses(s) & computed}
        if not more:
            return {id(s) for s in stmts if id(s) not in stay}
        stay |= more


def _strip_compile_decorators(f: ast.FunctionDef) -> ast.FunctionDef:
    f = copy.deepcopy(f)
    f.decorator_list = [d for d in f.decorator_list if not _is_compile_decorator(d)]
    return f


def _attr_name(target_expr: ast.expr) -> str:
    if isinstance(target_expr, ast.Name) and target_expr.id.isidentifier() and not target_expr.id.startswith("_") \
            and target_expr.id not in _RESERVED_ATTRS:
        return target_expr.id
    return "inner"


def _self_attr(name: str, ctx: ast.expr_context | None = None) -> ast.Attribute:
    return ast.Attribute(value=ast.Name(id="self", ctx=ast.Load()), attr=name, ctx=ctx or ast.Load())


def _arguments(names: list[str], vararg: str | None = None) -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in names],
                         vararg=ast.arg(arg=vararg) if vararg else None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[])


def _forward_params(arg_exprs: list[ast.expr], target_def: ast.FunctionDef | None) -> tuple[list[str], list[ast.expr]]:
    """forward's parameter names and its call arguments: the test's argument names when they are plain
    distinct names, else the parameter names of the function under test, else arg0, arg1, ..."""
    if any(isinstance(a, ast.Starred) for a in arg_exprs):
        return ["*args"], [ast.Starred(value=ast.Name(id="args", ctx=ast.Load()), ctx=ast.Load())]
    candidates = [[a.id if isinstance(a, ast.Name) else "" for a in arg_exprs]]
    if target_def is not None and not target_def.args.posonlyargs:
        candidates.append([a.arg for a in target_def.args.args])
    for names in candidates:
        if len(names) == len(arg_exprs) and all(names) and len(set(names)) == len(names) \
                and not ({"self", "args"} & set(names)):
            return names, [ast.Name(id=p, ctx=ast.Load()) for p in names]
    params = [f"arg{i}" for i in range(len(arg_exprs))]
    return params, [ast.Name(id=p, ctx=ast.Load()) for p in params]


def _carry_from_context(names: set[str], context: list[ast.stmt]) -> tuple[list[ast.stmt], set[str]]:
    """Top-level statements of the file that bind `names`, with what they need in turn; and names not found."""
    picked: dict[int, ast.stmt] = {}
    missing: set[str] = set()
    todo = list(names)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        binders = [s for s in context if name in _defines(s) and not _is_infra(s)]
        if not binders:
            missing.add(name)
            continue
        s = binders[-1]
        if isinstance(s, ast.Import):  # `import torch.nn.functional as F` binds F; `import torch.x` binds torch
            s = _only_aliases(s, name)
        if id(s) not in picked:
            picked[id(s)] = s
            todo.extend(_uses(s) - seen)
    return sorted(picked.values(), key=lambda s: getattr(s, "lineno", 0)), missing


def _only_aliases(s: ast.Import, name: str) -> ast.Import:
    keep = [a for a in s.names if (a.asname or a.name.split(".")[0]) == name]
    out = ast.Import(names=keep)
    ast.copy_location(out, s)
    return out


def _imports_torch(s: ast.stmt) -> bool:
    return isinstance(s, ast.Import) and any(a.name == "torch" and a.asname is None for a in s.names)


def _mentions_self(node: ast.AST) -> bool:
    """True when `self` is read somewhere that is not inside a function taking `self` (a method)."""

    def visit(n: ast.AST, in_method: bool) -> bool:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = n.args
            in_method = in_method or any(x.arg == "self" for x in a.posonlyargs + a.args)
        if isinstance(n, ast.Name) and n.id == "self" and not in_method:
            return True
        return any(visit(c, in_method) for c in ast.iter_child_nodes(n))

    return visit(node, False)


_CPU_MARK = "_nnforge_cpu"  # set on the nodes _CpuOnly rewrote, so notes name only what the program kept


class _CpuOnly(ast.NodeTransformer):
    """CUDA to CPU: `self.device`, GPU_TYPE, "cuda", "cuda:0" become "cpu"; `.cuda()` becomes `.cpu()`."""

    @staticmethod
    def _cpu(node: ast.AST) -> ast.AST:
        out = ast.copy_location(ast.Constant("cpu"), node)
        setattr(out, _CPU_MARK, True)
        return out

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in ("device", "device_type"):
            return self._cpu(node)
        if node.attr == "cuda" and isinstance(node.ctx, ast.Load) and _dotted(node.value) != "torch":
            node.attr = "cpu"
            setattr(node, _CPU_MARK, True)
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _DEVICE_NAMES and isinstance(node.ctx, ast.Load):
            return self._cpu(node)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str) and (node.value == "cuda" or node.value.startswith("cuda:")):
            return self._cpu(node)
        return node


def _rename_clashes(user_code: list[ast.stmt], users: list[ast.AST], notes: list[str]) -> None:
    """The user's own `Model` / `make_inputs` are renamed (everywhere) so the wrapper's names stay free."""
    defined = set().union(set(), *(_defines(n) for n in user_code))
    taken = defined | {n.id for s in user_code + users for n in ast.walk(s) if isinstance(n, ast.Name)}
    mapping = {}
    for clash, new in (("Model", "ReproModel"), ("make_inputs", "repro_make_inputs")):
        if clash in taken:
            while new in taken:
                new = "_" + new
            mapping[clash] = new
    if not mapping:
        return
    notes.append("renamed " + ", ".join(f"{a} -> {b}" for a, b in mapping.items()))
    for n in user_code + users:
        for sub in ast.walk(n):
            if isinstance(sub, ast.Name) and sub.id in mapping:
                sub.id = mapping[sub.id]
            elif isinstance(sub, (ast.ClassDef, ast.FunctionDef)) and sub.name in mapping:
                sub.name = mapping[sub.name]
            elif isinstance(sub, ast.alias) and (sub.asname or sub.name) in mapping:
                sub.asname = mapping[sub.asname or sub.name]


def _is_main_guard(s: ast.stmt) -> bool:
    return isinstance(s, ast.If) and "__name__" in ast.unparse(s.test) and "__main__" in ast.unparse(s.test)
