"""Invocation-sequence mutators: same program, a new `calls` sequence (category "stateful").

A stateful compiler bug shows only on a later call, after earlier calls established state (a
cached graph, guards, a specialised size). Each mutator here appends steps of one kind to the
case's sequence: repeated calls, changed input shapes, dtypes, layouts, requires_grad, train/eval
mode, grad mode, attribute and global values, cache resets.

What the program tolerates is not always visible in its text: a shape change may break a `view`,
a dtype change may meet an op that wants equal dtypes. Mutators that cannot know statically take
a probe (an eager run in a sandbox worker) and keep only candidates that run; without a probe they
use only what the program declares (inputs a J1 rewrite made dynamic, constants it defines).
"""

from __future__ import annotations

import ast
import random
from dataclasses import replace
from typing import Any, ClassVar

from nnforge.core.calls import CallStep, InputChange
from nnforge.core.testcase import TestCase
from nnforge.mutators.ast_tools import Fact, ProgramTree, channels_last_ok
from nnforge.mutators.base import STATEFUL, Mutator, Probe, derive, ensure_calls, parse_case, register_mutator

LAYOUTS = ("transposed", "channels_last", "strided", "expanded")
CANDIDATE_TRIES = 6


class SequenceMutator(Mutator):
    """Shared plumbing: parse, build new steps, append them to the sequence, probe if asked."""

    category = STATEFUL
    kind: ClassVar[str] = ""

    def applicable(self, case: TestCase) -> bool:
        tree = parse_case(case)
        return tree is not None and self.offers(tree, case)

    def offers(self, tree: ProgramTree, case: TestCase) -> bool:
        return True

    def steps(self, tree: ProgramTree, case: TestCase, rng: random.Random) -> tuple[CallStep, ...] | None:
        raise NotImplementedError

    def mutate(self, case: TestCase, rng: random.Random, probe: Probe | None = None) -> TestCase | None:
        tree = parse_case(case)
        if tree is None or not self.offers(tree, case):
            return None
        for _ in range(CANDIDATE_TRIES if self.uses_probe and probe is not None else 1):
            new = self.steps(tree, case, rng)
            if new is None:
                return None
            base = ensure_calls(case, 1)
            # steps that say nothing about grad mode keep the seed's (an inference seed stays inference)
            new = tuple(st if st.grad_enabled is not None else replace(st, grad_enabled=base[0].grad_enabled) for st in new)
            mutant = derive(case, self, calls=base + new, note={"sequence_kind": self.kind})
            if not (self.uses_probe and probe is not None) or probe(mutant):
                return mutant
        return None


def tensor_inputs(tree: ProgramTree) -> list[tuple[int, Fact]]:
    """(index, facts) of forward's inputs that make_inputs visibly builds as tensors."""
    return [(i, tree.facts[p]) for i, p in enumerate(tree.params()) if p in tree.facts]


@register_mutator
class RepeatCalls(SequenceMutator):
    """The same call two to four more times (a cached graph must keep giving eager's answer)."""

    name = "seq_repeat"
    kind = "repeat"

    def steps(self, tree, case, rng):
        return (CallStep(),) * rng.randint(2, 4)


@register_mutator
class ResetCache(SequenceMutator):
    """Repeated calls with a compiler cache reset in the middle."""

    name = "seq_reset_cache"
    kind = "reset_cache"

    def steps(self, tree, case, rng):
        return (CallStep(), CallStep(reset_cache=True), CallStep())


MODE_MODULES = ("Dropout", "AlphaDropout", "FeatureAlphaDropout", "BatchNorm", "InstanceNorm", "RReLU")


def reads_mode(tree: ProgramTree) -> bool:
    """Does anything in the program read train/eval mode: a `.training` attribute or a mode-dependent module?"""
    for node in ast.walk(tree.tree):
        if isinstance(node, ast.Attribute) and (node.attr == "training" or node.attr.startswith(MODE_MODULES)):
            return True
    return False


@register_mutator
class TrainEvalMode(SequenceMutator):
    """Switch train/eval mode between calls (dropout, batch norm, `self.training` branches)."""

    name = "seq_mode"
    kind = "mode"
    needs = ("a program that reads the mode (`.training`, or a Dropout/BatchNorm/InstanceNorm/RReLU module)",)

    def offers(self, tree, case):
        # A program that never reads the mode gives the compiler nothing to guard: no recompile,
        # the same graph on every call (the 0% reach such mutants had on generator seeds).
        return reads_mode(tree)

    def steps(self, tree, case, rng):
        first = rng.choice(["eval", "train"])
        second = "train" if first == "eval" else "eval"
        return (CallStep(mode=first), CallStep(mode=second), CallStep(mode=first))[: rng.randint(2, 3)]


@register_mutator
class GradMode(SequenceMutator):
    """Alternate grad mode between calls (no_grad vs enabled)."""

    name = "seq_grad_mode"
    kind = "grad_mode"

    def steps(self, tree, case, rng):
        first = rng.random() < 0.5
        return (CallStep(grad_enabled=first), CallStep(grad_enabled=not first), CallStep(grad_enabled=first))


@register_mutator
class RequiresGrad(SequenceMutator):
    """A float input that does not require grad on one call and does on the next (or back)."""

    name = "seq_requires_grad"
    kind = "requires_grad"
    needs = ("a float tensor input of known dtype",)

    def offers(self, tree, case):
        return any(f.is_float for _, f in tensor_inputs(tree))

    def steps(self, tree, case, rng):
        i = rng.choice([i for i, f in tensor_inputs(tree) if f.is_float])
        on = CallStep(inputs=(InputChange(index=i, requires_grad=True),))
        off = CallStep(inputs=(InputChange(index=i, requires_grad=False),))
        return (on, off, on) if rng.random() < 0.5 else (off, on)


@register_mutator
class LayoutChange(SequenceMutator):
    """Same values, other strides on a later call: transposed, channels_last, strided, expanded."""

    name = "seq_layout"
    kind = "layout"
    uses_probe = True
    needs = ("a tensor input of rank >= 1", "forward without .view (or a probe)")

    def offers(self, tree, case):
        return any((f.rank or 0) >= 1 for _, f in tensor_inputs(tree))

    def mutate(self, case, rng, probe=None):
        tree = parse_case(case)
        if tree is not None and probe is None and (tree.forward_calls("view") or tree.forward_calls("view_as")):
            return None  # a view of a non-contiguous input may fail; only a probe can tell
        return super().mutate(case, rng, probe)

    def steps(self, tree, case, rng):
        i, f = rng.choice([(i, f) for i, f in tensor_inputs(tree) if (f.rank or 0) >= 1])
        rank = f.rank or 0
        kinds = ["strided", "expanded"] + (["transposed"] if rank >= 2 else [])
        kinds += ["channels_last"] if rank == 4 and channels_last_ok(tree) else []
        layout = rng.choice(kinds)
        return (CallStep(inputs=(InputChange(index=i, layout=layout),)), CallStep())


@register_mutator
class DtypeChange(SequenceMutator):
    """A float input cast to another precision on a later call (kept only if eager accepts it)."""

    name = "seq_dtype"
    kind = "dtype"
    uses_probe = True
    needs = ("a float tensor input of known dtype", "a probe (eager run in a worker)")

    def offers(self, tree, case):
        return any(f.is_float for _, f in tensor_inputs(tree))

    def mutate(self, case, rng, probe=None):
        return None if probe is None else super().mutate(case, rng, probe)

    def steps(self, tree, case, rng):
        i, f = rng.choice([(i, f) for i, f in tensor_inputs(tree) if f.is_float])
        dtype = rng.choice([d for d in ("float64", "float16", "bfloat16", "float32") if d != f.dtype])
        return (CallStep(inputs=(InputChange(index=i, dtype=dtype),)), CallStep())


@register_mutator
class ShapeChange(SequenceMutator):
    """Later calls with other sizes (0, 1, larger) on dims the program is agnostic to.

    Without a probe only dims a rewrite declared dynamic (`meta["dynamic_inputs"]`) change; with one,
    any dim of any input is tried and only sequences that run in eager are kept.
    """

    name = "seq_shape"
    kind = "shape"
    uses_probe = True
    needs = ("an input with a declared dynamic dim, or a probe",)

    def offers(self, tree, case):
        return bool(case.meta.get("dynamic_inputs")) or any((f.rank or 0) >= 1 and f.shape for _, f in tensor_inputs(tree))

    def mutate(self, case, rng, probe=None):
        if probe is None and not case.meta.get("dynamic_inputs"):
            return None
        return super().mutate(case, rng, probe)

    def steps(self, tree, case, rng):
        declared = {int(k): v for k, v in (case.meta.get("dynamic_inputs") or {}).items()}
        facts = dict(tensor_inputs(tree))
        if declared and (rng.random() < 0.5 or not facts):
            i = rng.choice(sorted(declared))
            dim = rng.choice(declared[i])
            shape = list(_declared_shape(tree, i) or [5])
        else:
            cands = [(i, f) for i, f in facts.items() if f.shape]
            if not cands:
                return None
            i, f = rng.choice(cands)
            shape = list(f.shape or ())
            dim = rng.randrange(len(shape))
        steps = []
        for size in rng.sample(_sizes_for(shape[dim]), k=2):
            new = list(shape)
            new[dim] = size
            steps.append(CallStep(inputs=(InputChange(index=i, shape=tuple(new)),)))
        return tuple(steps)


def _sizes_for(n: int) -> list[int]:
    return sorted({0, 1, n + 1, max(2, 2 * n)} - {n})


def _declared_shape(tree: ProgramTree, index: int) -> tuple[int, ...] | None:
    params = tree.params()
    if index < len(params) and params[index] in tree.facts:
        return tree.facts[params[index]].shape
    return None


# -- attributes and globals ---------------------------------------------------------------------------------------
def tunable_globals(tree: ProgramTree) -> dict[str, Any]:
    """Module-level `NAME = <number or bool>` the program reads: candidates for set_globals."""
    out: dict[str, Any] = {}
    for node in tree.tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (bool, int, float))):
            out[node.targets[0].id] = node.value.value
    return out


def tunable_attrs(tree: ProgramTree) -> dict[str, Any]:
    """`self.NAME = <number, bool or dict of numbers>` in Model.__init__: candidates for set_attrs."""
    out: dict[str, Any] = {}
    init = next((n for n in tree.model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    for node in init.body if init else []:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute)
                and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "self"):
            continue
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            continue
        if isinstance(value, (bool, int, float)) or (isinstance(value, dict) and value
                                                     and all(isinstance(v, (int, float)) for v in value.values())):
            out[node.targets[0].attr] = value
    return out


def changed(value: Any, rng: random.Random) -> Any:
    """Another value of the same type and sign: bools flip, ints grow, floats double or halve."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.randint(1, 3)
    if isinstance(value, float):
        return value * rng.choice([2.0, 0.5]) if value else 1.0
    if isinstance(value, dict):
        return {k: changed(v, rng) for k, v in value.items()}
    return value


@register_mutator
class StateChange(SequenceMutator):
    """Change a model attribute or a program global the program defines (flags, counters, dict entries) between calls."""

    name = "seq_state"
    kind = "state"
    needs = ("a constant attribute set in Model.__init__ or a module-level constant",)

    def offers(self, tree, case):
        return bool(tunable_attrs(tree) or tunable_globals(tree))

    def steps(self, tree, case, rng):
        attrs, globs = tunable_attrs(tree), tunable_globals(tree)
        options = [("attr", k, v) for k, v in attrs.items()] + [("global", k, v) for k, v in globs.items()]
        kind, key, value = rng.choice(options)
        new = changed(value, rng)
        if kind == "attr":
            return (CallStep(set_attrs={key: new}), CallStep(set_attrs={key: value}))
        return (CallStep(set_globals={key: new}), CallStep(set_globals={key: value}))
