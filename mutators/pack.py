"""Several single-call mutants in one test: the text-level counterpart of generator/pack.py.

A mutant is source text, not a graph, so its pack is built from syntax trees: every name a
member binds at module level (its `Model`, `make_inputs`, helpers, globals) gets a prefix of
its own (`_p0_`, `_p1_`, ...), imports are shared, and a `Model` of the pack holds each member's
model as a submodule and returns all their outputs, each computed on inputs of its own. One
compilation then pays Dynamo's trace, Inductor's code generation and the C++ compiler's fixed
cost once for k programs (bench/results/stop36: a single-call mutant costs about what a whole
pack of four generator programs does).

Only what behaves the same inside a pack is packed: one plain call (a sequence changes state
between calls, and that state would be shared), no random draws (their order could change),
nothing that reads the module's namespace by name (`globals()`, `sys.modules`, `eval`), and
module-level names that no function or class rebinds (so renaming them is exact). Everything
else runs alone, as before.

A pack that shows a bug is unpacked by the reducer before anything else (`unpack`): each
member, with its slice of the pack's values, is tried alone, and the first that shows the same
bug replaces the pack; when none does, the bug needs members together and `subpack` builds the
smaller packs the reducer tries, down to the fewest members that still show it.
"""

from __future__ import annotations

import ast
import re
import symtable
from dataclasses import dataclass
from typing import Any

from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase
from nnforge.mutators.base import all_mutators

# Reads the module namespace by name, or executes text: renaming could not follow it.
_NAMESPACE_READS = re.compile(r"\b(globals|locals|vars|eval|exec|__import__)\s*\(|sys\.modules|__name__|importlib|inspect\.")
# Functions that draw random numbers (unless called with training=False, as dropouts may be).
_RANDOM_DRAWS = re.compile(r"(rand\w*|bernoulli\w*|multinomial|normal_?|uniform_|exponential_|geometric_|cauchy_"
                           r"|log_normal_|random_|poisson|rrelu\w*|\w*[Dd]ropout\w*|manual_seed|seed|get_rng_state"
                           r"|set_rng_state)")
# Where a draw does not matter: the inputs' and parameters' values are value search's, not these.
_VALUES_MADE_IN = ("make_inputs", "__init__")
_MODULE_STATEMENTS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
                      ast.AnnAssign)


class NotPackable(ValueError):
    """The case cannot share a test with others; the message says why."""


@dataclass(frozen=True)
class _Member:
    imports: dict[str, str]  # name bound by an import -> that import's text
    import_lines: list[str]
    body: list[ast.stmt]  # renamed
    arity: int


def _is_plain(calls: tuple[CallStep, ...]) -> bool:
    if len(calls) != 1:
        return False
    c = calls[0]
    return not (c.inputs or c.reset_cache or c.mode or c.set_attrs or c.set_globals or c.backward or c.optimizer
                or c.zero_grad or c.param_requires_grad or c.retain_graph)


def _draws_random(tree: ast.Module) -> bool:
    """Whether code that runs in the model's call draws random numbers."""
    def walk(node: ast.AST) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _VALUES_MADE_IN:
            return False
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            deterministic = any(k.arg == "training" and isinstance(k.value, ast.Constant) and k.value.value is False
                                for k in node.keywords)
            if _RANDOM_DRAWS.fullmatch(name) and not deterministic:
                return True
        return any(walk(child) for child in ast.iter_child_nodes(node))

    return walk(tree)


def _forward_arity(tree: ast.Module) -> int:
    for s in tree.body:
        if isinstance(s, ast.ClassDef) and s.name == "Model":
            for f in s.body:
                if isinstance(f, ast.FunctionDef) and f.name == "forward":
                    a = f.args
                    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or f.decorator_list:
                        raise NotPackable("forward takes a variable or defaulted argument list")
                    return len(a.posonlyargs) + len(a.args) - 1
            raise NotPackable("Model has no forward of its own")
    raise NotPackable("no class Model")


def _module_names(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """Names bound at module level other than by imports, and those imports bind (name -> text)."""
    names: set[str] = set()
    imports: dict[str, str] = {}
    for s in tree.body:
        if not isinstance(s, _MODULE_STATEMENTS):
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
                continue  # a docstring
            raise NotPackable(f"a module-level {type(s).__name__} statement may act on shared state")
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            for alias in s.names:
                if alias.name == "*":
                    raise NotPackable("a star import")
                bound = alias.asname or alias.name.split(".")[0]
                text = ast.unparse(s) if len(s.names) == 1 else ast.unparse(type(s)(**{**s.__dict__, "names": [alias]}))
                imports[bound] = text
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(s.name)
        else:
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            for t in targets:
                if not isinstance(t, ast.Name):
                    raise NotPackable("a module-level assignment to something other than a name")
                names.add(t.id)
    return names, imports


def _locally_bound(source: str) -> set[str]:
    """Every name some function, class or comprehension binds in its own scope."""
    out: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for child in table.get_children():
            for sym in child.get_symbols():
                if sym.is_local() or sym.is_parameter():
                    out.add(sym.get_name())
            walk(child)

    walk(symtable.symtable(source, "<member>", "exec"))
    return out


class _Rename(ast.NodeTransformer):
    def __init__(self, names: set[str], prefix: str):
        self.names, self.prefix = names, prefix

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id in self.names:
            node.id = self.prefix + node.id
        return node

    def visit_Global(self, node: ast.Global) -> ast.Global:
        node.names = [self.prefix + n if n in self.names else n for n in node.names]
        return node


def _member(case: TestCase, index: int) -> _Member:
    if case.inputs is not None or case.state_dict:
        raise NotPackable("the case has values already")
    if not _is_plain(case.calls):
        raise NotPackable("not one plain call")
    made_by = case.meta.get("chain") or [case.meta.get("mutator")]
    offline = all_mutators()
    for name in made_by:
        if name not in offline:
            raise NotPackable(f"made by {name!r}, not by an offline rule this packer knows")
        if not offline[name].packable:
            raise NotPackable(f"{name} tests what a pack would change (a graph break or a random draw)")
    source = case.program
    if _NAMESPACE_READS.search(source):
        raise NotPackable("the program reads its module's namespace by name")
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise NotPackable(f"the program does not parse: {e}") from e
    if _draws_random(tree):
        raise NotPackable("the model draws random numbers")
    if not any(isinstance(s, ast.FunctionDef) and s.name == "make_inputs" for s in tree.body):
        raise NotPackable("no make_inputs")
    arity = _forward_arity(tree)
    names, imports = _module_names(tree)
    clash = (names | set(imports)) & _locally_bound(source)
    if clash:
        raise NotPackable(f"module-level names rebound in a nested scope: {', '.join(sorted(clash))}")
    prefix = f"_p{index}_"
    body: list[ast.stmt] = []
    import_lines: list[str] = []
    for s in tree.body:
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            import_lines.append(ast.unparse(s))
            continue
        if isinstance(s, ast.Expr):
            continue  # the docstring
        s = _Rename(names, prefix).visit(s)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and s.name in names:
            s.name = prefix + s.name
        body.append(s)
    return _Member(imports, import_lines, body, arity)


def packable(case: TestCase) -> str | None:
    """None when `case` may share a test with other mutants, else why not (for a reader)."""
    try:
        _member(case, 0)
    except NotPackable as e:
        return str(e)
    return None


def pack_mutants(cases: list[TestCase]) -> TestCase:
    """One test of the mutants `cases` (each packable, all with the same call; see the module
    docstring). Meta: the first member's, with `pack` (one entry a member), `pack_members`
    (each member's program, meta and number of inputs, for `unpack`) and `mutator` the first's."""
    if len(cases) < 2:
        raise NotPackable("a pack needs two mutants or more")
    if any(c.calls != cases[0].calls for c in cases):
        raise NotPackable("the members' calls differ")
    members = [_member(c, i) for i, c in enumerate(cases)]
    imports: dict[str, str] = {}
    lines: list[str] = []
    for m in members:
        for name, text in m.imports.items():
            if imports.setdefault(name, text) != text:
                raise NotPackable(f"two members import different things as {name!r}")
        lines += [line for line in m.import_lines if line not in lines]
    if "torch" not in imports:
        lines.insert(0, "import torch")
    lines.sort(key=lambda line: not line.startswith("from __future__"))
    out = lines + [""]
    for i, (m, c) in enumerate(zip(members, cases)):
        out += ["", f"# member {i}: {c.meta.get('mutator') or 'mutant'}", ""]
        out += [ast.unparse(s) + "\n" for s in m.body]
    params = [f"a{j}" for j in range(sum(m.arity for m in members))]
    calls, start = [], 0
    for i, m in enumerate(members):
        calls.append(f"self.m{i}({', '.join(params[start:start + m.arity])})")
        start += m.arity
    out += ["", "class Model(torch.nn.Module):",
            f'    """{len(cases)} mutants in one compilation (mutators/pack.py): member i is self.m<i>."""', "",
            "    def __init__(self):", "        super().__init__()"]
    out += [f"        self.m{i} = _p{i}_Model()" for i in range(len(cases))]
    out += ["", f"    def forward({', '.join(['self'] + params)}):",
            f"        return ({', '.join(calls)},)", "", "",
            "def make_inputs():",
            f"    return ({', '.join(f'*_p{i}_make_inputs()' for i in range(len(cases)))},)"]
    program = "\n".join(out) + "\n"
    first = cases[0]
    meta = {k: v for k, v in first.meta.items() if k != "facts"}
    meta.update({
        "pack": [c.meta.get("seed") for c in cases],
        "pack_members": [{"program": c.program, "meta": c.meta, "arity": m.arity} for c, m in zip(cases, members)],
        "pack_mutators": [c.meta.get("mutator") for c in cases],
    })
    return TestCase(program=program, calls=first.calls, meta=meta)


def unpack(case: TestCase) -> list[TestCase]:
    """The members of a mutant pack, each with its slice of the pack's values when it has them
    (inputs in order, parameters and buffers under `m<i>.`); [] for any other case."""
    members: list[dict[str, Any]] = case.meta.get("pack_members") or []
    out: list[TestCase] = []
    start = 0
    for i, m in enumerate(members):
        arity = int(m["arity"])
        inputs = tuple(case.inputs[start:start + arity]) if case.inputs is not None else None
        start += arity
        state = None
        if case.state_dict is not None:
            prefix = f"m{i}."
            state = {k[len(prefix):]: v for k, v in case.state_dict.items() if k.startswith(prefix)}
        meta = {**m["meta"], "unpacked_from": case.case_id}
        out.append(TestCase(program=m["program"], inputs=inputs, state_dict=state, calls=case.calls, meta=meta))
    return out


def subpack(case: TestCase, keep: list[int]) -> TestCase:
    """The pack of `case`'s members `keep` (two or more, in order), each with its slice of the
    pack's values: a pack whose bug no member shows alone (two members that meet in one graph,
    a fusion only the bigger graph makes) is cut down to the members it needs."""
    members = unpack(case)
    chosen = [members[i] for i in keep]
    packed = pack_mutants([m.with_(inputs=None, state_dict=None,
                                   meta={k: v for k, v in m.meta.items() if k != "unpacked_from"})
                           for m in chosen])
    inputs = None if case.inputs is None else tuple(x for m in chosen for x in (m.inputs or ()))
    state = None
    if case.state_dict is not None:
        state = {f"m{j}.{k}": v for j, m in enumerate(chosen) for k, v in (m.state_dict or {}).items()}
    return TestCase(program=packed.program, inputs=inputs, state_dict=state, calls=case.calls,
                    meta={**packed.meta, "unpacked_from": case.case_id})
