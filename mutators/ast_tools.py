"""Syntax-tree helpers every rule mutator shares.

A mutator never edits program text as a string: it parses the program, finds anchor points in
the tree (the `Model` class, its `forward`, a tensor-valued assignment), splices in statements
built from small code templates whose placeholder identifiers are renamed on the tree, and
unparses. Fresh names come from one `NameGen` per program so that a mutant of a mutant never
shadows a name an earlier rewrite introduced.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass
from typing import Any, Iterable

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
# Calls whose result is a bool or integer tensor even when the input is float.
_NON_FLOAT_CALLS = {
    "argmax", "argmin", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "isposinf",
    "isneginf", "signbit", "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and",
    "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "bool",
    "int", "long", "short", "char", "byte", "nonzero", "bucketize", "searchsorted", "count_nonzero",
    "argsort", "any", "all", "isclose", "equal", "floor_divide",
}
_INPUT_FACTORIES = {"randn", "rand", "randint", "zeros", "ones", "full", "empty", "tensor"}


class ProgramContractError(ValueError):
    """The program lacks `class Model(...)` with `forward`, or `def make_inputs()`."""


@dataclass(frozen=True)
class Fact:
    """What is statically known about one tensor-valued name (None: unknown)."""

    dtype: str | None = None
    shape: tuple[int, ...] | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_float(self) -> bool | None:
        return None if self.dtype is None else self.dtype in FLOAT_DTYPES

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": None if self.shape is None else list(self.shape)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Fact":
        shape = d.get("shape")
        return cls(dtype=d.get("dtype"), shape=None if shape is None else tuple(shape))


@dataclass(frozen=True)
class Anchor:
    """A tensor-valued name in forward and the body index after which it is defined (-1: a parameter)."""

    name: str
    after: int
    fact: Fact = Fact()

    def may_be(self, *, float_: bool = False, min_rank: int = 0) -> bool:
        """False only when the facts rule the anchor out; unknown facts pass (guards decide at run time)."""
        if float_ and self.fact.is_float is False:
            return False
        return not (min_rank and self.fact.rank is not None and self.fact.rank < min_rank)

    def surely(self, *, float_: bool = False, min_rank: int = 0) -> bool:
        """True when the facts prove the requirement, so no run-time guard is needed."""
        if float_ and self.fact.is_float is not True:
            return False
        return not (min_rank and (self.fact.rank is None or self.fact.rank < min_rank))


# -- names -----------------------------------------------------------------------------------------
def identifiers(tree: ast.AST) -> set[str]:
    """Every identifier the tree mentions: names, attributes, defs, arguments, imports, keywords."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            out.update(node.names)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


class NameGen:
    """Hands out identifiers no other part of the program uses (nor any earlier `fresh` result)."""

    def __init__(self, taken: Iterable[str]):
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        base = re.sub(r"\W", "_", base) or "_t"
        if not base.startswith("_"):
            base = "_" + base
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}{k}"
        self.taken.add(name)
        return name


# -- templates -------------------------------------------------------------------------------------
class _Renamer(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str]):
        self.m = mapping

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.m.get(node.id, node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        node.attr = self.m.get(node.attr, node.attr)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self.m.get(node.arg, node.arg)
        return node

    def _def(self, node: Any) -> ast.AST:
        node.name = self.m.get(node.name, node.name)
        self.generic_visit(node)
        return node

    visit_FunctionDef = visit_ClassDef = _def

    def visit_Global(self, node: ast.Global) -> ast.AST:
        node.names = [self.m.get(n, n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global  # type: ignore[assignment]

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        if node.name:
            node.name = self.m.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_alias(self, node: ast.alias) -> ast.AST:
        if node.asname:
            node.asname = self.m.get(node.asname, node.asname)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        # Only whole-string constants that are placeholders (e.g. namedtuple type names) are renamed.
        if isinstance(node.value, str) and node.value in self.m:
            node.value = self.m[node.value]
        return node


def template(code: str, **names: str) -> list[ast.stmt]:
    """Parse `code` and rename its placeholder identifiers (keys of `names`) on the tree."""
    tree = ast.parse(code)
    _Renamer(names).visit(tree)
    return tree.body


def expr(code: str, **names: str) -> ast.expr:
    node = ast.parse(code, mode="eval").body
    return _Renamer(names).visit(node)


def guard(stmts: list[ast.stmt], cond: str | None, **names: str) -> list[ast.stmt]:
    """`stmts` under `if cond:` (cond is a template), or unchanged when cond is None."""
    if not cond:
        return stmts
    return [ast.If(test=expr(cond, **names), body=stmts, orelse=[])]


def tensor_guard(anchor: Anchor, *, float_: bool = False, min_rank: int = 0, nonempty: bool = False) -> str | None:
    """A run-time condition for what the facts do not prove (X is the anchor's placeholder)."""
    if anchor.surely(float_=float_, min_rank=min_rank) and not nonempty:
        return None
    parts = ["isinstance(X, torch.Tensor)"]
    if float_:
        parts.append("X.is_floating_point()")
    if min_rank:
        parts.append(f"X.dim() >= {min_rank}")
    if nonempty:
        parts.append("X.numel() > 0")
    return " and ".join(parts)


# -- the program ---------------------------------------------------------------------------------------
def _is_model(node: ast.stmt) -> bool:
    return isinstance(node, ast.ClassDef) and node.name == "Model"


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def call_name(node: ast.AST) -> str | None:
    """`torch.foo(...)`, `F.foo(...)`, `x.foo(...)`, `foo(...)` -> "foo"."""
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute):
            return f.attr
        if isinstance(f, ast.Name):
            return f.id
    return None


def looks_non_float(value: ast.expr) -> bool:
    """Heuristic for programs without facts: comparisons, casts to int/bool, index-returning ops."""
    if isinstance(value, ast.Compare) or isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
        return True
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.FloorDiv)):
        return True
    name = call_name(value)
    if name in _NON_FLOAT_CALLS:
        return True
    if name == "to" or name == "type":
        for a in list(value.args) + [k.value for k in value.keywords]:  # type: ignore[attr-defined]
            if isinstance(a, ast.Attribute) and a.attr not in FLOAT_DTYPES and a.attr not in ("device",):
                if a.attr.startswith(("int", "uint", "bool", "long", "short")):
                    return True
    return False


class ProgramTree:
    """A parsed TestCase program with the handles rule mutators need.

    Raises ProgramContractError when the program is not a TestCase program.
    """

    def __init__(self, source: str, facts: dict[str, Fact] | None = None):
        try:
            self.tree = ast.parse(source)
        except SyntaxError as e:
            raise ProgramContractError(f"the program does not parse: {e}") from e
        models = [n for n in self.tree.body if _is_model(n)]
        makers = [n for n in self.tree.body if isinstance(n, ast.FunctionDef) and n.name == "make_inputs"]
        if not models or not makers:
            raise ProgramContractError("the program must define `class Model` and `def make_inputs()`")
        self.model: ast.ClassDef = models[0]
        fwd = _method(self.model, "forward")
        if fwd is None:
            raise ProgramContractError("class Model has no forward method")
        self.forward: ast.FunctionDef = fwd
        self.make_inputs: ast.FunctionDef = makers[0]
        self.names = NameGen(identifiers(self.tree))
        self.facts: dict[str, Fact] = dict(facts or {})
        self.notes: dict[str, Any] = {}  # meta entries a rewrite wants on its mutant
        for name, fact in self.input_facts().items():
            self.facts.setdefault(name, fact)

    # -- reading ------------------------------------------------------------------------------------
    def params(self) -> list[str]:
        """forward's positional parameter names after self."""
        return [a.arg for a in self.forward.args.args[1:]]

    def input_exprs(self) -> list[ast.expr] | None:
        """The elements of make_inputs()'s returned tuple literal, or None if it is not one."""
        rets = [s for s in self.make_inputs.body if isinstance(s, ast.Return)]
        if len(rets) != 1 or not isinstance(rets[0].value, ast.Tuple):
            return None
        return list(rets[0].value.elts)

    def input_facts(self) -> dict[str, Fact]:
        """Facts about forward's parameters read from `torch.randn([..], dtype=torch.X)`-like inputs."""
        exprs = self.input_exprs()
        params = self.params()
        if exprs is None or len(exprs) != len(params) or self.forward.args.vararg:
            return {}
        return {p: f for p, e in zip(params, exprs) if (f := input_fact(e)) is not None}

    def anchors(self) -> list[Anchor]:
        """Tensor-valued names in forward: parameters and top-level single-name assignments.

        Names starting with `_` are scratch names rewrites introduced and are never anchors.
        Names known (or guessed, without facts) to be non-tensors are left out.
        """
        out = [Anchor(p, -1, self.facts.get(p, Fact())) for p in self.params() if not p.startswith("_")]
        for i, stmt in enumerate(self.forward.body):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if name.startswith("_") or isinstance(stmt.value, ast.Constant):
                    continue
                fact = self.facts.get(name)
                if fact is None:
                    fact = Fact(dtype="bool") if looks_non_float(stmt.value) else Fact()
                out.append(Anchor(name, i, fact))
        return out

    def used_later(self, anchor: Anchor) -> bool:
        """Is the anchor's name read after its definition (so rebinding it changes the result)?"""
        for stmt in self.forward.body[anchor.after + 1:]:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and node.id == anchor.name and isinstance(node.ctx, ast.Load):
                    return True
        return False

    def forward_calls(self, method: str) -> bool:
        """Does forward call `.method(` anywhere (e.g. `view`, which needs compatible strides)?"""
        return any(call_name(n) == method and isinstance(n.func, ast.Attribute)  # type: ignore[attr-defined]
                   for n in ast.walk(self.forward))

    # -- editing ----------------------------------------------------------------------------------------
    def insert_after(self, anchor: Anchor, stmts: list[ast.stmt]) -> None:
        body = self.forward.body
        pos = anchor.after + 1 if anchor.after >= 0 else _after_declarations(body)
        body[pos:pos] = stmts

    def insert_forward_start(self, stmts: list[ast.stmt]) -> None:
        body = self.forward.body
        pos = _after_declarations(body)
        body[pos:pos] = stmts

    def declare_global(self, name: str) -> None:
        """`global name` as forward's first statement (merged with an existing one)."""
        body = self.forward.body
        if body and isinstance(body[0], ast.Global):
            if name not in body[0].names:
                body[0].names.append(name)
        else:
            body.insert(0, ast.Global(names=[name]))

    def add_module_level(self, stmts: list[ast.stmt]) -> None:
        """Module-level definitions go right before `class Model` (after imports and earlier helpers)."""
        idx = self.tree.body.index(self.model)
        self.tree.body[idx:idx] = stmts

    def init_method(self) -> ast.FunctionDef:
        """Model.__init__, created (calling super().__init__()) when the program has none."""
        init = _method(self.model, "__init__")
        if init is None:
            init = template("def __init__(self):\n    super().__init__()\n")[0]  # type: ignore[assignment]
            self.model.body.insert(0, init)
        assert isinstance(init, ast.FunctionDef)
        return init

    def add_init(self, stmts: list[ast.stmt]) -> None:
        self.init_method().body.extend(stmts)

    def add_method(self, func: ast.FunctionDef) -> None:
        self.model.body.append(func)

    def ensure_import(self, module: str, alias: str | None = None) -> None:
        bound = alias or module.split(".")[0]
        for node in self.tree.body:
            if isinstance(node, ast.Import) and any((a.asname or a.name.split(".")[0]) == bound and a.name == module
                                                    for a in node.names):
                return
        last_import = max((i for i, n in enumerate(self.tree.body) if isinstance(n, (ast.Import, ast.ImportFrom))),
                          default=-1)
        self.tree.body.insert(last_import + 1, ast.Import(names=[ast.alias(name=module, asname=alias)]))

    def append_output(self, value: ast.expr) -> bool:
        """Add one element to forward's returned tuple literal(s); False when there is none."""
        done = False
        for node in ast.walk(self.forward):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
                node.value.elts.append(copy.deepcopy(value))
                done = True
        return done

    def source(self) -> str:
        ast.fix_missing_locations(self.tree)
        return ast.unparse(self.tree) + "\n"


def _after_declarations(body: list[ast.stmt]) -> int:
    pos = 0
    while pos < len(body) and (isinstance(body[pos], (ast.Global, ast.Nonlocal))
                               or isinstance(body[pos], ast.Expr) and isinstance(body[pos].value, ast.Constant)):
        pos += 1
    return pos


def input_fact(e: ast.expr) -> Fact | None:
    """Dtype and shape of `torch.randn([2, 3], dtype=torch.float32)` and of wrappers that keep them."""
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and call_name(e) in (
            "contiguous", "clone", "detach", "requires_grad_"):
        e = e.func.value
    if not (isinstance(e, ast.Call) and call_name(e) in _INPUT_FACTORIES):
        return None
    dtype = None
    for k in e.keywords:
        if k.arg == "dtype" and isinstance(k.value, ast.Attribute):
            dtype = k.value.attr
    shape = None
    shape_arg = e.args[-1] if call_name(e) == "randint" and e.args else (e.args[0] if e.args else None)
    if isinstance(shape_arg, (ast.List, ast.Tuple)) and all(isinstance(x, ast.Constant) and isinstance(x.value, int)
                                                           for x in shape_arg.elts):
        shape = tuple(x.value for x in shape_arg.elts)  # type: ignore[attr-defined]
    if dtype is None and call_name(e) in ("randn", "rand"):
        dtype = "float32"
    return Fact(dtype=dtype, shape=shape)


def facts_from_graph(graph: dict[str, Any] | None) -> dict[str, Fact]:
    """Facts for the generator's names: value N is `vN`, weight N is `self.wN` (not an anchor)."""
    if not graph:
        return {}
    weights = set(graph.get("weights", []))
    return {f"v{v['id']}": Fact(dtype=v.get("dtype"), shape=tuple(v["shape"]) if v.get("shape") is not None else None)
            for v in graph.get("values", []) if v["id"] not in weights}


def channels_last_ok(tree: "ProgramTree") -> bool:
    """Eager's 3-d ops (max_pool3d, conv3d, ...) read a 4-d tensor as unbatched CDHW and reject channels_last."""
    return not any((call_name(n) or "").endswith("3d") for n in ast.walk(tree.forward))


def scratch_names(tree: ast.AST) -> set[str]:
    """Template identifiers that stand for fresh names: `_x`, `_Box` (not dunders like `__init__`)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            found.add(node.attr)  # attributes of other objects (torch._check) are not ours to rename
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            found.update(node.names)
        elif isinstance(node, ast.alias) and node.asname:
            found.add(node.asname)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)  # e.g. the type name of a namedtuple, the name of a registered buffer
    return {n for n in found if re.fullmatch(r"_[A-Za-z]\w*", n)}


def instantiate(program: "ProgramTree", parts: dict[str, str], **fixed: str) -> tuple[dict[str, list[ast.stmt]], dict[str, str]]:
    """Parse template parts together; their scratch names get fresh names shared across the parts."""
    parsed = {k: ast.parse(v) for k, v in parts.items()}
    scratch: set[str] = set()
    for t in parsed.values():
        scratch |= scratch_names(t)
    mapping = {s: program.names.fresh(s) for s in sorted(scratch - set(fixed))}
    mapping.update(fixed)
    out = {}
    for k, t in parsed.items():
        _Renamer(mapping).visit(t)
        out[k] = t.body
    return out, mapping
