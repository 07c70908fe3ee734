"""The mutator plugin interface and its registry.

A mutator takes a working TestCase and returns a new one aimed at one root-cause category of
TAXONOMY.md (or at "stateful": an invocation sequence). Each mutator is one registered class with
the same small interface: `applicable(case)` says from the syntax tree (and cheap facts) whether
the program has what the rewrite needs; `mutate(case, rng)` returns the mutant or None.

Mutators never run the program: the parent process must not execute untrusted code. Mutators
that need to know whether a candidate runs (shape changes in a call sequence) take a `probe`,
a callable the caller builds on a sandbox worker (see `mutators/validate.py`).
"""

from __future__ import annotations

import importlib
import random
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, Iterable, TypeVar

from nnforge.core.calls import SINGLE_CALL, CallStep
from nnforge.core.testcase import TestCase
from nnforge.mutators.ast_tools import (Anchor, Fact, ProgramContractError, ProgramTree, facts_from_graph, guard,
                                        instantiate, tensor_guard)

# Category ids of TAXONOMY.md, in its order, plus "stateful" for invocation-sequence mutators and
# "training" for sequences that train the model (backward, optimizer steps; mutators/training.py).
FRONTEND_CATEGORIES = ("A1", "A2", "A3", "B1", "B2", "C1", "D1", "D2", "E1", "E2", "F1", "F2", "G1", "G2", "H1")
BACKEND_CATEGORIES = ("I1", "I2", "I3", "J1", "K1")
STATEFUL = "stateful"
TRAINING = "training"
SEQUENCE_CATEGORIES = (STATEFUL, TRAINING)  # mutants that change the calls, not the program
CATEGORIES = FRONTEND_CATEGORIES + BACKEND_CATEGORIES + SEQUENCE_CATEGORIES

# A probe answers "does this case run in eager?" (on a sandbox worker, never in this process).
Probe = Callable[[TestCase], bool]

MUTATOR_MODULES = ("rules_frontend", "rules_backend", "sequence", "training")


class Mutator(ABC):
    """One rewrite aimed at one category. Subclasses set `name`, `category`, `needs`."""

    name: ClassVar[str] = ""
    category: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()  # what the program must have, in words (shown by `nnforge mutators`)
    uses_probe: ClassVar[bool] = False
    # Whether its single-call mutants may share a test with others (mutators/pack.py): False where
    # the rewrite's point is a graph break or a random draw, which a pack would change or dilute.
    packable: ClassVar[bool] = True

    @property
    def summary(self) -> str:
        return (self.__doc__ or "").strip().splitlines()[0] if self.__doc__ else ""

    @abstractmethod
    def applicable(self, case: TestCase) -> bool:
        """Does the case have what this rewrite needs? Cheap: syntax tree and meta only."""

    @abstractmethod
    def mutate(self, case: TestCase, rng: random.Random, probe: Probe | None = None) -> TestCase | None:
        """The mutant, or None when the case offers no anchor for this rewrite."""


_REGISTRY: dict[str, Mutator] = {}
M = TypeVar("M", bound=type)


def register_mutator(cls: M) -> M:
    """Class decorator: one instance per mutator class, keyed by its unique `name`."""
    inst = cls()
    if not inst.name or inst.category not in CATEGORIES:
        raise ValueError(f"{cls.__name__}: a mutator needs a name and a category in {CATEGORIES}")
    if inst.name in _REGISTRY and type(_REGISTRY[inst.name]) is not cls:
        raise ValueError(f"two mutators are named {inst.name!r}")
    _REGISTRY[inst.name] = inst
    return cls


def load_mutators() -> None:
    """Import the modules that register mutators (idempotent)."""
    for mod in MUTATOR_MODULES:
        importlib.import_module(f"nnforge.mutators.{mod}")


def all_mutators() -> dict[str, Mutator]:
    load_mutators()
    return dict(_REGISTRY)


def get_mutator(name: str) -> Mutator:
    muts = all_mutators()
    if name not in muts:
        raise KeyError(f"no mutator named {name!r}; known: {', '.join(sorted(muts))}")
    return muts[name]


def mutators_for(category: str) -> list[Mutator]:
    if category not in CATEGORIES:
        raise KeyError(f"unknown category {category!r}; known: {', '.join(CATEGORIES)}")
    return [m for m in all_mutators().values() if m.category == category]


# -- building mutants ---------------------------------------------------------------------------------
def case_facts(case: TestCase) -> dict[str, Fact]:
    """Static facts about names: the generator's graph for seeds, `meta["facts"]` for mutants."""
    if case.graph:
        return facts_from_graph(case.graph)
    return {k: Fact.from_json(v) for k, v in (case.meta.get("facts") or {}).items()}


def parse_case(case: TestCase) -> ProgramTree | None:
    try:
        return ProgramTree(case.program, case_facts(case))
    except ProgramContractError:
        return None


def derive(parent: TestCase, mutator: Mutator, program: str | None = None,
           calls: tuple[CallStep, ...] | None = None, facts: dict[str, Fact] | None = None,
           note: dict[str, Any] | None = None) -> TestCase:
    """The mutant of `parent`: new program/calls, fresh values (value search reruns), meta with lineage.

    Rule rewrites keep every existing name's dtype and shape, so the parent's facts carry over.
    """
    pm = parent.meta
    chain = list(pm.get("chain", [])) + [mutator.name]
    categories = list(pm.get("categories", [])) + [mutator.category]
    root_meta = pm.get("root_meta") if pm.get("origin") == "mutator" else {k: v for k, v in pm.items() if k != "facts"}
    all_facts = {k: v.to_json() for k, v in case_facts(parent).items()}
    all_facts.update({k: v.to_json() for k, v in (facts or {}).items()})
    meta: dict[str, Any] = {
        "origin": "mutator",
        "parent": parent.case_id,
        "root": pm.get("root", parent.case_id) if pm.get("origin") == "mutator" else parent.case_id,
        "mutator": mutator.name,
        "category": mutator.category,
        "chain": chain,
        "categories": categories,
        "root_meta": root_meta,
        "facts": all_facts,
    }
    if pm.get("dynamic_inputs"):
        meta["dynamic_inputs"] = pm["dynamic_inputs"]
    if note:
        meta.update(note)
    return TestCase(program=parent.program if program is None else program, inputs=None, state_dict=None,
                    calls=parent.calls if calls is None else calls, graph=None, meta=meta)


def mutate_chain(case: TestCase, rng: random.Random, length: int, mutators: Iterable[Mutator] | None = None,
                 probe: Probe | None = None) -> TestCase:
    """Apply `length` randomly chosen applicable mutators one after another."""
    pool = list(mutators) if mutators is not None else list(all_mutators().values())
    current = case
    for _ in range(length):
        options = [m for m in pool if m.applicable(current)]
        rng.shuffle(options)
        for m in options:
            mutant = m.mutate(current, rng, probe)
            if mutant is not None:
                current = mutant
                break
    return current


def ensure_calls(case: TestCase, at_least: int) -> tuple[CallStep, ...]:
    """The case's calls padded to `at_least` steps with calls in the first call's grad mode.

    Padding with plain calls would flip an inference seed (grad off) into grad mode on the
    second call, so every sequence would recompile for that reason alone and hide what the
    sequence mutator actually changed.
    """
    calls = tuple(case.calls) or SINGLE_CALL
    pad = CallStep(grad_enabled=calls[0].grad_enabled)
    return calls + (pad,) * max(0, at_least - len(calls))


# -- rules that rewrite forward around one tensor-valued name -------------------------------------------
class AnchorRule(Mutator):
    """A rule mutator that picks one tensor-valued name X in forward and rewrites the code after it.

    Subclasses declare what X must be (`float_`, `min_rank`) and implement `rewrite`, which edits the
    ProgramTree in place (splicing templates where `X` stands for the anchor) and returns the new
    invocation sequence, or None to keep the parent's. When facts do not prove X's type, the
    inserted code runs under a run-time guard, so the mutant stays valid on any program.
    """

    float_: ClassVar[bool] = True
    min_rank: ClassVar[int] = 0
    nonempty: ClassVar[bool] = False

    def candidates(self, tree: ProgramTree) -> list[Anchor]:
        return [a for a in tree.anchors() if a.may_be(float_=self.float_, min_rank=self.min_rank)]

    def extra_ok(self, tree: ProgramTree) -> bool:
        """Program-wide requirements beyond one anchor (default: none)."""
        return True

    def applicable(self, case: TestCase) -> bool:
        tree = parse_case(case)
        return tree is not None and self.extra_ok(tree) and bool(self.candidates(tree))

    def choose(self, tree: ProgramTree, rng: random.Random) -> Anchor | None:
        """Prefer anchors whose type the facts prove and whose value flows on to the outputs."""
        cands = self.candidates(tree)
        if not cands:
            return None
        best = [a for a in cands if a.surely(float_=self.float_, min_rank=self.min_rank) and tree.used_later(a)]
        good = best or [a for a in cands if tree.used_later(a)] or cands
        return rng.choice(good)

    def mutate(self, case: TestCase, rng: random.Random, probe: Probe | None = None) -> TestCase | None:
        tree = parse_case(case)
        if tree is None or not self.extra_ok(tree):
            return None
        anchor = self.choose(tree, rng)
        if anchor is None:
            return None
        try:
            calls = self.rewrite(tree, anchor, rng, case)
        except NotApplicable:
            return None
        return derive(case, self, program=tree.source(), calls=calls, note=tree.notes or None)

    def guard_for(self, anchor: Anchor) -> str | None:
        return tensor_guard(anchor, float_=self.float_, min_rank=self.min_rank, nonempty=self.nonempty)

    def splice(self, tree: ProgramTree, anchor: Anchor, parts: dict[str, str]) -> dict[str, str]:
        """Instantiate template parts with fresh scratch names; put them in their places.

        parts: "module" (before class Model), "init" (end of __init__), "forward" (after the anchor,
        under the anchor's guard), "forward_start" (first in forward, unguarded). Returns the
        scratch-name mapping so callers can name what they added (e.g. attributes for set_attrs).
        """
        stmts, mapping = instantiate(tree, parts, X=anchor.name)
        if stmts.get("module"):
            tree.add_module_level(stmts["module"])
        if stmts.get("init"):
            tree.add_init(stmts["init"])
        if stmts.get("forward"):  # first: the anchor's position is counted before forward_start moves it
            tree.insert_after(anchor, guard(stmts["forward"], self.guard_for(anchor), X=anchor.name))
        if stmts.get("forward_start"):
            tree.insert_forward_start(stmts["forward_start"])
        return mapping

    @abstractmethod
    def rewrite(self, tree: ProgramTree, anchor: Anchor, rng: random.Random,
                case: TestCase) -> tuple[CallStep, ...] | None:
        """Edit `tree` around `anchor`; return new calls or None (keep the parent's)."""


class NotApplicable(Exception):
    """Raised by a rewrite that finds, late, that this program offers it nothing."""
