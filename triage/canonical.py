"""The canonical form of a program: its operator sequence with dtypes, every name stripped.

Silent wrong outputs have no crash location to key on, so two of them are the same bug when
their *reduced* programs compute the same thing: the same operators, on the same dtypes, in the
same order. Names (`v12`, `self.w3`, whatever an LLM called things) and literal values (sizes,
scalars, dims) are left out: reduction already shrank them, and two reductions of one bug land
on different sizes.

Decision: the form is always read from the program's syntax tree (every case has a program;
not every case keeps its graph: program-level reduction drops a graph it no longer matches), so
a generator case and a hand-written case that reduce to the same code get the same form. Dtypes
come from, in order: the generator's graph (value `vN` / weight `self.wN`), the reducer's
recorded `meta["value_dtypes"]` (name -> dtype, from one run in a worker), the literal inputs of
`make_inputs()`, and dtype literals in the code (`.to(torch.float16)`); otherwise `?`.

One token per operator, in evaluation order (arguments before the call):
`sin(float32)->float32`, `add(float32,float16)->float32`, `to[float16](float32)->float16`,
`Conv2d(float32)->float32` for a submodule call.
"""

from __future__ import annotations

import ast

from nnforge.core.testcase import TestCase

_BINOPS = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floor_divide",
    ast.Mod: "remainder", ast.Pow: "pow", ast.MatMult: "matmul", ast.BitAnd: "bitwise_and",
    ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor", ast.LShift: "bitwise_left_shift",
    ast.RShift: "bitwise_right_shift",
}
_UNARY = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "bitwise_not", ast.Not: "logical_not"}
_CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge",
        ast.Is: "is", ast.IsNot: "is_not", ast.In: "in", ast.NotIn: "not_in"}
_DTYPE_NAMES = {
    "float16", "half", "bfloat16", "float32", "float", "float64", "double", "complex64", "complex128",
    "int8", "int16", "short", "int32", "int", "int64", "long", "uint8", "bool",
}


def program_ops(program: str, dtypes: dict[str, str] | None = None) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(op, input dtypes, output dtypes) for every operator in Model.forward, in evaluation order.

    A program that does not parse, or has no Model.forward, has no operators.
    """
    try:
        tree = ast.parse(program)
    except SyntaxError:
        return []
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return []
    methods = {f.name: f for f in model.body if isinstance(f, ast.FunctionDef)}
    forward = methods.get("forward")
    if forward is None:
        return []
    known = dict(dtypes or {})
    for name, d in {**_input_dtypes(tree, forward), **_parameter_dtypes(methods.get("__init__"))}.items():
        known.setdefault(name, d)
    walker = _OpWalker(_submodules(methods.get("__init__")), known)
    for stmt in forward.body:
        walker.statement(stmt)
    return walker.ops


def canonical_tokens(case: TestCase) -> list[str]:
    return [f"{op}({','.join(ins)})->{','.join(outs)}" for op, ins, outs in program_ops(case.program, value_dtypes(case))]


def canonical_form(case: TestCase) -> str:
    """The operator sequence with dtypes, one token per line, names and literals stripped."""
    return "\n".join(canonical_tokens(case))


def op_names(case: TestCase) -> tuple[str, ...]:
    return tuple(op for op, _, _ in program_ops(case.program, value_dtypes(case)))


def statement_ops(line: str) -> tuple[str, ...]:
    """The operators one statement (`v5 = torch.sub(v3, v4)`) calls, in evaluation order; () for
    a statement that does not parse or calls none (`v6 = v1`)."""
    try:
        tree = ast.parse(line)
    except SyntaxError:
        return ()
    walker = _OpWalker({}, {})
    for stmt in tree.body:
        walker.statement(stmt)
    return tuple(op for op, _, _ in walker.ops)


def value_dtypes(case: TestCase) -> dict[str, str]:
    """Known dtypes of the program's names: from the graph, then from the reducer's record."""
    out: dict[str, str] = {}
    recorded = case.meta.get("value_dtypes") if isinstance(case.meta, dict) else None
    if isinstance(recorded, dict):
        out.update({str(k): str(v) for k, v in recorded.items()})
    if case.graph:
        weights = set(case.graph.get("weights", []))
        for v in case.graph.get("values", []):
            name = f"self.w{v['id']}" if v["id"] in weights else f"v{v['id']}"
            out.setdefault(name, v["dtype"])
    return out


def _input_dtypes(tree: ast.Module, forward: ast.FunctionDef) -> dict[str, str]:
    """Dtypes of forward's parameters read from make_inputs()'s literal tuple, where it is one."""
    maker = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "make_inputs"), None)
    if maker is None:
        return {}
    rets = [s for s in ast.walk(maker) if isinstance(s, ast.Return)]
    if len(rets) != 1 or not isinstance(rets[0].value, ast.Tuple):
        return {}
    params = [a.arg for a in forward.args.args[1:]]
    out = {}
    for p, e in zip(params, rets[0].value.elts):
        d = _factory_dtype(e)
        if d is not None:
            out[p] = d
    return out


def _factory_dtype(e: ast.expr) -> str | None:
    if not isinstance(e, ast.Call):
        return None
    name = _callee(e)
    if name == "bool":
        return "bool"
    if name in ("float", "half", "double", "long", "int"):
        return _dtype_alias(name)
    for k in e.keywords:
        if k.arg == "dtype":
            d = _dtype_literal(k.value)
            if d:
                return d
    if name in ("randn", "rand", "zeros", "ones", "empty", "full"):
        return "float32"
    if name == "randint":
        return "int64"
    if isinstance(e.func, ast.Attribute):
        return _factory_dtype(e.func.value)  # torch.randn(...).contiguous()
    return None


def _dtype_alias(name: str) -> str:
    return {"half": "float16", "float": "float32", "double": "float64", "short": "int16", "int": "int32",
            "long": "int64"}.get(name, name)


def _dtype_literal(e: ast.expr) -> str | None:
    """`torch.float16` or the string 'float16'."""
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "torch" and e.attr in _DTYPE_NAMES:
        return _dtype_alias(e.attr)
    if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in _DTYPE_NAMES:
        return _dtype_alias(e.value)
    return None


def _parameter_dtypes(init: ast.FunctionDef | None) -> dict[str, str]:
    """self.<attr> -> dtype for `self.w = torch.nn.Parameter(torch.randn(..., dtype=...))` in __init__."""
    out: dict[str, str] = {}
    for node in ast.walk(init) if init is not None else ():
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _callee(node.value) == "Parameter"
                and node.value.args and (d := _factory_dtype(node.value.args[0])) is not None):
            for t in node.targets:
                if (name := _ref(t)) is not None:
                    out[name] = d
    return out


def _submodules(init: ast.FunctionDef | None) -> dict[str, str]:
    """self.<attr> -> constructor name, for attributes assigned a call in __init__ (not Parameters)."""
    out: dict[str, str] = {}
    if init is None:
        return out
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            name = _callee(node.value)
            if name in (None, "Parameter", "tensor", "randn", "zeros", "ones"):
                continue
            for t in node.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    out[f"self.{t.attr}"] = name
    return out


def _callee(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def _ref(e: ast.expr) -> str | None:
    """The name an expression reads (`v3`, `self.w2`), or None."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return f"self.{e.attr}"
    return None


class _OpWalker:
    """Collects operators in evaluation order and tracks the dtype of each expression it can."""

    def __init__(self, submodules: dict[str, str], dtypes: dict[str, str]):
        self.submodules = submodules
        self.dtypes = dtypes
        self.ops: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            index = len(self.ops)
            result = self.expr(stmt.value)
            outs = [self._target_dtype(t) for t in stmt.targets]
            flat = tuple(d for group in outs for d in group)
            if len(self.ops) > index and flat and all(d != "?" for d in flat):
                op, ins, _ = self.ops[-1]
                self.ops[-1] = (op, ins, flat)  # the statement's last op produced its targets
            elif len(self.ops) > index and len(flat) == 1 and flat[0] == "?" and result != "?":
                for t in stmt.targets:
                    if (name := _ref(t)) is not None:
                        self.dtypes[name] = result
        elif isinstance(stmt, (ast.Return, ast.Expr)) and stmt.value is not None:
            self.expr(stmt.value)
        elif isinstance(stmt, (ast.AugAssign,)):
            self.expr(ast.BinOp(left=stmt.target, op=stmt.op, right=stmt.value))
        else:  # if/for/with/...: visit nested statements in order
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.stmt):
                    self.statement(child)
                elif isinstance(child, ast.expr):
                    self.expr(child)

    def _target_dtype(self, t: ast.expr) -> tuple[str, ...]:
        if isinstance(t, (ast.Tuple, ast.List)):
            return tuple(d for e in t.elts for d in self._target_dtype(e))
        name = _ref(t)
        return (self.dtypes.get(name, "?") if name else "?",)

    def expr(self, e: ast.expr) -> str:
        """Visit `e`, record its operators, return its dtype ('?' when unknown, '' for non-tensors)."""
        if (name := _ref(e)) is not None and not isinstance(e, ast.Call):
            return self.dtypes.get(name, "?")
        if _is_literal(e):
            return ""
        if isinstance(e, ast.Call):
            return self._call(e)
        if isinstance(e, ast.BinOp):
            ins = (self.expr(e.left), self.expr(e.right))
            return self._op(_BINOPS.get(type(e.op), type(e.op).__name__.lower()), ins, _promote(ins))
        if isinstance(e, ast.UnaryOp):
            d = self.expr(e.operand)
            return self._op(_UNARY.get(type(e.op), "unary"), (d,), d)
        if isinstance(e, ast.Compare):
            ins = [self.expr(e.left)] + [self.expr(c) for c in e.comparators]
            return self._op(_CMP.get(type(e.ops[0]), "compare"), tuple(ins), "bool")
        if isinstance(e, ast.Subscript):
            d = self.expr(e.value)
            self.expr(e.slice)
            return self._op("getitem", (d,), d)
        for child in ast.iter_child_nodes(e):  # tuples, lists, slices, keywords' values, ...
            if isinstance(child, ast.expr):
                self.expr(child)
        return ""

    def _call(self, call: ast.Call) -> str:
        func = call.func
        receiver: tuple[str, ...] = ()
        if (ref := _ref(func)) is not None and ref in self.submodules:
            name = self.submodules[ref]
        else:
            name = _callee(call) or "call"
            name = OP_ALIASES.get(name, name)
            if isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name) and func.value.id in ("torch", "F")):
                if not (isinstance(func.value, ast.Attribute) and _module_path(func.value)):
                    receiver = (self.expr(func.value),)  # a method call: the tensor is an input
        literal = [d for a in list(call.args) + [k.value for k in call.keywords] if (d := _dtype_literal(a))]
        ins = receiver + tuple(self.expr(a) for a in call.args if _dtype_literal(a) is None)
        ins += tuple(self.expr(k.value) for k in call.keywords if _dtype_literal(k.value) is None)
        ins = tuple(d for d in ins if d != "")
        if name in ("float", "half", "double", "long", "int", "bool", "short") and not call.args:
            literal = [_dtype_alias(name)]
        label = f"{name}[{','.join(literal)}]" if literal else name
        out = literal[-1] if literal and name in ("to", "type", "float", "half", "double", "long", "int", "bool",
                                                   "short") else _promote(ins)
        return self._op(label, ins, out)

    def _op(self, name: str, ins: tuple[str, ...], out: str) -> str:
        self.ops.append((name, tuple(d or "?" for d in ins), (out or "?",)))
        return out or "?"


# torch's documented aliases: one operator under two names is one operator in every key and title
OP_ALIASES = {
    "concatenate": "cat", "concat": "cat", "absolute": "abs", "arccos": "acos", "arcsin": "asin", "arctan": "atan",
    "arctan2": "atan2", "arccosh": "acosh", "arcsinh": "asinh", "arctanh": "atanh", "clip": "clamp",
    "multiply": "mul", "divide": "div", "true_divide": "div", "subtract": "sub", "negative": "neg", "fix": "trunc",
    "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le", "not_equal": "ne",
    "swapaxes": "transpose", "swapdims": "transpose", "moveaxis": "movedim", "special_expit": "sigmoid",
}


def _is_literal(e: ast.expr) -> bool:
    """A constant, a negated constant, or a tuple/list of them: an argument, not a computation."""
    if isinstance(e, ast.Constant):
        return True
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        return _is_literal(e.operand)
    if isinstance(e, (ast.Tuple, ast.List)):
        return all(_is_literal(x) for x in e.elts)
    return False


def _module_path(e: ast.expr) -> bool:
    """`torch.nn.functional`, `torch.linalg`: a module path, not a tensor."""
    while isinstance(e, ast.Attribute):
        e = e.value
    return isinstance(e, ast.Name) and e.id in ("torch", "F", "math", "nn")


def _promote(ins: tuple[str, ...] | list[str]) -> str:
    """A guess of the result dtype, used only where no recorded dtype says better."""
    known = [d for d in ins if d != ""]
    if not known or "?" in known:
        return "?"
    if len(set(known)) == 1:
        return known[0]
    return "?"

