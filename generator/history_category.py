"""Guess which root-cause category of TAXONOMY.md a historical bug belongs to.

The guess steers the campaign: the category mix of a compiler's history weights the scheduler's
prior, so categories that broke often get more mutants. Keyword rules look at three texts with
falling trust: the commit message (or issue title and body), the paths the fix touched (a fix in
`torch/_dynamo/variables/lists.py` is about containers whatever the message says), and the lines
the diff adds or removes. Every matched rule adds its weight; the highest total wins and the
reason names the rules that carried it. An LLM, when one is configured, can replace the guess
(see `generator/history_llm.py`); the rules are the fallback and always run.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

# Category ids of TAXONOMY.md, in its order (the generator may not import mutators/base.py).
TAXONOMY_IDS: tuple[str, ...] = (
    "A1", "A2", "A3", "B1", "B2", "C1", "D1", "D2", "E1", "E2", "F1", "F2", "G1", "G2", "H1",
    "I1", "I2", "I3", "J1", "K1",
)
UNKNOWN = "unknown"

# How much a hit counts, by where it was found.
_WHERE_WEIGHT = {"message": 3.0, "label": 3.0, "path": 2.0, "diff": 1.0, "code": 1.0}
_MAX_DIFF_CHARS = 60_000


@dataclass(frozen=True)
class CategoryGuess:
    """A category id (or "unknown"), why, and who guessed: "rules" or "llm"."""

    category: str
    reason: str
    source: str = "rules"
    score: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"category": self.category, "reason": self.reason, "source": self.source, "score": self.score}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CategoryGuess":
        return cls(d["category"], d.get("reason", ""), d.get("source", "rules"), float(d.get("score", 0.0)))


@dataclass(frozen=True)
class _Rule:
    category: str
    pattern: re.Pattern[str]
    label: str
    where: tuple[str, ...]  # which texts the rule reads: "message", "label", "path", "diff", "code"
    weight: float = 1.0


_RULES: list[_Rule] = []


def _rule(category: str, regex: str, label: str, where: Iterable[str] = ("message", "diff", "code", "label"),
          weight: float = 1.0) -> None:
    _RULES.append(_Rule(category, re.compile(regex, re.IGNORECASE), label, tuple(where), weight))


_TEXT = ("message", "label")
_ALL = ("message", "diff", "code", "label")

# -- frontend: Python objects ---------------------------------------------------------------------------------
_rule("A1", r"__(getattr|getattribute|setattr|eq|ne|call|len|hash|bool|iter|contains)__", "dunder method")
_rule("A1", r"\buser[- ]?defined (class|object)|UserDefined(Object|Class)Variable", "user-defined class")
_rule("A1", r"\b(dataclass(es)?|@property|property\b|classmethod|staticmethod|multiple inheritance|\bMRO\b)", "class feature")
_rule("A1", r"variables/user_defined\.py", "fix in user_defined variables", ("path",), 2.0)
_rule("A2", r"functools\.partial|\bpartial\(|lru_cache|\bdecorator|\bmap\(|\bfilter\(|sorted\([^\n]{0,60}key=", "functions as values")
_rule("A2", r"\bbuiltins?\b|BuiltinVariable", "builtins")
_rule("A2", r"variables/(functions|builtin)\.py", "fix in function/builtin variables", ("path",), 1.5)
_rule("A3", r"requires_grad|\.grad\b|\.data\b|nn\.Parameter|\bParameter\b|register_buffer|tensor subclass|__torch_function__|__torch_dispatch__", "tensor attributes")
_rule("A3", r"variables/tensor\.py|_subclasses", "fix in tensor variables", ("path",), 1.5)
# -- frontend: containers, iterators --------------------------------------------------------------------------
_rule("B1", r"\b(list|dict|tuple|set)s?\b[^\n]{0,60}\b(method|semantics|mutation|comparison|slice|slicing)|\.(setdefault|pop|popitem|reverse|update)\(", "container method")
_rule("B1", r"\b(ListVariable|ConstDictVariable|TupleVariable|SetVariable)\b", "container variable")
_rule("B1", r"variables/(lists|dicts|sets)\.py", "fix in container variables", ("path",), 2.0)
_rule("B2", r"namedtuple|OrderedDict|ModuleList|ModuleDict|ParameterList|MutableMapping|nested containers?|pytree", "structured container")
_rule("C1", r"\biter(ator)?s?\b|\bnext\(|\bgenerators?\b|\bzip\(|\benumerate\(|itertools", "iterator")
_rule("C1", r"variables/(iter|itertools)\.py", "fix in iterator variables", ("path",), 2.0)
# -- frontend: conversions, scope, side effects, guards, graph breaks ----------------------------------------
_rule("D1", r"\.item\(\)|\.tolist\(\)|\bnumpy\b|\bnp\.|\bscalar(s)?\b|type promotion|\bint\(|\bfloat\(|\bbool\(", "scalar conversion")
_rule("D2", r"\bSym(Int|Float|Bool|Node)\b|symbolic (int|size|shape)|ShapeEnv|torch\._check|shape arithmetic|floordiv|\bmodulo\b|\.view\([^\n]{0,40}size\(|unbacked", "shape arithmetic")
_rule("D2", r"fx/experimental/symbolic_shapes\.py|sympy", "fix in symbolic shapes", ("path",), 1.5)
_rule("E1", r"\bclosures?\b|\bnonlocal\b|\bglobals?\b|nested function|\bcell(s|vars?)?\b|free var", "scope")
_rule("E2", r"no_grad|enable_grad|set_grad_enabled|inference_mode|autocast|context manager|\bctx manager|try/except|\bfinally\b|__enter__|__exit__", "context manager")
_rule("E2", r"variables/ctx_manager\.py", "fix in context-manager variables", ("path",), 2.0)
_rule("F1", r"side[- ]effects?|\bprint\(|\blogging\b|\bcounter\b|attribute (write|mutation)|setattr", "side effect")
_rule("F1", r"_dynamo/side_effects\.py", "fix in side effects", ("path",), 2.0)
_rule("F2", r"in[- ]?place|\balias(ing|es|ed)?\b|\bout=|copy_\(|\.set_\(|mutat(ion|ed|es) (of |on )?(the )?(input|view|buffer)|functionaliz", "tensor mutation")
_rule("F2", r"functional_tensor|_functorch/_aot_autograd/[^\n]*(alias|mutation)|reinplace", "fix in functionalization", ("path",), 2.0)
_rule("G1", r"recompil(e|es|ation)|over-?speciali[sz]|cache_size_limit|recompile_limit", "recompilation")
_rule("G2", r"\bguards?\b|stale (graph|cache)|missing guard|guard failure", "guards")
_rule("G2", r"_dynamo/guards\.py", "fix in guards", ("path",), 2.0)
_rule("H1", r"graph[- _]?breaks?|data[- ]dependent control flow|resume(_execution)?|unsupported call", "graph break")
# -- backend ---------------------------------------------------------------------------------------------------
_rule("I1", r"\bstrides?\b|contiguous|channels_last|\btranspos|\blayout\b|\bexpand(ed)?\b|as_strided|memory format", "memory layout")
_rule("I2", r"float16|bfloat16|\bhalf\b|\bfp16\b|\bbf16\b|float64|\bdouble\b|\bint(8|16|32|64)\b|\bdtypes?\b|precision|\bcast(ing|s)?\b|overflow", "dtype/precision")
_rule("I3", r"\bfus(e|ed|ion)\b|\breductions?\b|\bpointwise\b|\bbroadcast|\bkernel\b|\bscheduler\b|\bcodegen\b|\blowering\b|\bsum\(|\bmean\(|amax|softmax", "fusion/reduction")
_rule("I3", r"_inductor/(lowering|scheduler|ir|codegen)", "fix in inductor lowering/codegen", ("path",), 1.0)
_rule("J1", r"dynamic[ _-]?shapes?|dynamic=True|mark_dynamic|\bsymbolic\b|size[- ]?(0|1|zero|one)\b|automatic_dynamic", "dynamic shapes")
_rule("K1", r"\bdropout\b|\btorch\.rand\(|rand_like|randperm|bernoulli|multinomial|\brandom(ness)?\b|\bnan\b|\binf\b|empty tensor|zero[- ]?(size|element)|fallback_random|\bnumel\(\) ?== ?0", "randomness/special values")

# GitHub labels used by compiler trackers (e.g. "module: dynamic shapes").
_rule("J1", r"module: dynamic shapes", "label", ("label",), 3.0)
_rule("H1", r"module: graph breaks", "label", ("label",), 3.0)
_rule("G2", r"module: guards", "label", ("label",), 3.0)
_rule("I2", r"module: (half|bfloat16|type promotion)", "label", ("label",), 3.0)


def guess_category(message: str = "", diff: str = "", *, paths: Iterable[str] = (), code: str = "",
                   labels: Iterable[str] = ()) -> CategoryGuess:
    """Keyword rules over a commit (message, touched paths, diff) or an issue (title+body, labels, code).

    `diff` is unified-diff text; only its added and removed lines are read. Returns "unknown"
    when no rule matches.
    """
    texts = {
        "message": message or "",
        "diff": _changed_lines(diff or "")[:_MAX_DIFF_CHARS],
        "path": "\n".join(paths),
        "code": code or "",
        "label": "\n".join(labels),
    }
    scores: dict[str, float] = defaultdict(float)
    why: dict[str, list[str]] = defaultdict(list)
    for where, text in texts.items():
        for category, score, label in _hits(where, text) if text else ():
            scores[category] += score
            why[category].append(label)
    if not scores:
        return CategoryGuess(UNKNOWN, "no keyword rule matched", "rules", 0.0)
    order = {c: i for i, c in enumerate(TAXONOMY_IDS)}
    best = max(scores, key=lambda c: (scores[c], -order[c]))
    reasons = list(dict.fromkeys(why[best]))  # unique, in order
    return CategoryGuess(best, "; ".join(reasons[:4]), "rules", round(scores[best], 2))


@functools.lru_cache(maxsize=64)
def _hits(where: str, text: str) -> tuple[tuple[str, float, str], ...]:
    """(category, score, reason) of every rule matching `text` read as `where`.

    Cached: the tests one commit adds share its message and diff, which are scored once.
    """
    out = []
    for rule in _RULES:
        if where not in rule.where:
            continue
        hits = sum(1 for _ in itertools.islice(rule.pattern.finditer(text), 3))
        if hits:
            out.append((rule.category, rule.weight * _WHERE_WEIGHT[where] * hits ** 0.5, f"{rule.label} in {where}"))
    return tuple(out)


def _changed_lines(diff: str) -> str:
    """The + and - lines of a unified diff, without the file headers."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line.startswith(("+", "-")):
            out.append(line[1:])
    return "\n".join(out)


def normalise_category(text: str) -> str | None:
    """A taxonomy id found at the start of an LLM's answer ("I3", "I3: fusion"), or None."""
    m = re.match(r"\s*[`*\"']*([A-K][1-3])\b", text or "")
    if m and m.group(1) in TAXONOMY_IDS:
        return m.group(1)
    return None
