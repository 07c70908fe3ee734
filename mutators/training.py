"""Training-sequence mutators: same program, calls that train it (category "training").

Much of torch.compile runs only in training: AOTAutograd's joint graph and partitioner, the
`*_backward` decompositions, Inductor's backward kernels, Dynamo's guards on `requires_grad`
and grad mode. Each mutator here turns a case's invocation sequence into one that trains the
model (core/calls.py, core/backward.py): calls that run a backward, optimizer steps that carry
state from call to call, `zero_grad`, parameters frozen and unfrozen between calls, inference
calls under no_grad between training calls, a second backward through a retained graph.

`train_backward` keeps whatever sequence the case already has (a stateful mutant's shape
changes, cache resets, mode switches) and makes every call of it train: that is how training
combines with the stateful mutators.
"""

from __future__ import annotations

import ast
import random
from typing import ClassVar

from nnforge.core.backward import differentiable
from nnforge.core.calls import OPTIMIZER_KINDS, CallStep
from nnforge.core.testcase import TestCase
from nnforge.mutators.ast_tools import ProgramTree
from nnforge.mutators.base import TRAINING, Probe, derive, ensure_calls, parse_case, register_mutator
from nnforge.mutators.sequence import SequenceMutator, tensor_inputs


def parameter_owners(tree: ProgramTree) -> list[str]:
    """Names under which Model.__init__ creates parameters: `self.w = nn.Parameter(...)` (the
    parameter `w`) and `self.lin = nn.Linear(...)` (the parameters `lin.*`); what
    CallStep.param_requires_grad may name."""
    init = next((n for n in tree.model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    names: list[str] = []
    for node in ast.walk(init) if init is not None else []:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute)
                and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "self"
                and isinstance(node.value, ast.Call)):
            continue
        func = ast.unparse(node.value.func)
        if func.endswith("Parameter") or func.startswith(("torch.nn.", "nn.")) and func.split(".")[-1][:1].isupper():
            names.append(node.targets[0].attr)
    return names


def _train(**kw) -> CallStep:
    return CallStep(backward=True, **kw)


class TrainingMutator(SequenceMutator):
    """A sequence mutator whose `sequence` replaces the case's calls (a SequenceMutator appends
    steps in the first call's grad mode; a training call sets its own). The program must have
    something to differentiate (a float input or a parameter) and nothing autograd refuses
    (core/backward.differentiable)."""

    category = TRAINING
    needs_parameters: ClassVar[bool] = False

    def offers(self, tree: ProgramTree, case: TestCase) -> bool:
        if not differentiable(case.program):
            return False
        owners = parameter_owners(tree)
        return bool(owners) if self.needs_parameters else bool(owners) or any(f.is_float for _, f in tensor_inputs(tree))

    def sequence(self, tree: ProgramTree, case: TestCase, rng: random.Random) -> tuple[CallStep, ...] | None:
        raise NotImplementedError

    def mutate(self, case: TestCase, rng: random.Random, probe: Probe | None = None) -> TestCase | None:
        tree = parse_case(case)
        if tree is None or not self.offers(tree, case):
            return None
        calls = self.sequence(tree, case, rng)
        if not calls or calls == tuple(case.calls):
            return None
        return derive(case, self, calls=calls, note={"sequence_kind": self.kind})


@register_mutator
class TrainEveryCall(TrainingMutator):
    """Every call of the case's sequence also runs a backward (a stateful sequence, trained)."""

    name = "train_backward"
    kind = "backward"
    needs = ("a float input or a parameter",)

    def sequence(self, tree, case, rng):
        base = ensure_calls(case, 1)
        trained = tuple(s.with_backward() for s in base)
        return trained + ((_train(),) if len(trained) == 1 else ())


@register_mutator
class OptimizerSteps(TrainingMutator):
    """Two or three optimizer steps (SGD with momentum or Adam), then an inference call."""

    name = "train_optimizer"
    kind = "optimizer"
    needs_parameters = True
    needs = ("a parameter (nn.Parameter or a module in Model.__init__)",)

    def sequence(self, tree, case, rng):
        kind = rng.choice(OPTIMIZER_KINDS)
        zero = rng.random() < 0.5  # without zero_grad the steps accumulate, as a loop that forgets it
        steps = [_train(optimizer=kind)] + [_train(optimizer=kind, zero_grad=zero) for _ in range(rng.randint(1, 2))]
        return ensure_calls(case, 1)[:1] + tuple(steps) + (CallStep(grad_enabled=False),)


@register_mutator
class FreezeParameter(TrainingMutator):
    """A parameter stops requiring grad for one training step and starts again on the next."""

    name = "train_freeze"
    kind = "freeze"
    needs_parameters = True
    needs = ("a parameter (nn.Parameter or a module in Model.__init__)",)

    def sequence(self, tree, case, rng):
        owner = rng.choice(parameter_owners(tree))
        kind = rng.choice(OPTIMIZER_KINDS)
        return ensure_calls(case, 1)[:1] + (
            _train(optimizer=kind), _train(optimizer=kind, zero_grad=True, param_requires_grad={owner: False}),
            _train(optimizer=kind, zero_grad=True, param_requires_grad={owner: True}))


@register_mutator
class NoGradBetween(TrainingMutator):
    """Inference calls under no_grad between training calls (a validation pass in a loop)."""

    name = "train_no_grad"
    kind = "no_grad"
    needs = ("a float input or a parameter",)

    def sequence(self, tree, case, rng):
        kind = rng.choice(OPTIMIZER_KINDS) if parameter_owners(tree) else None
        inference = CallStep(grad_enabled=False)
        return (_train(optimizer=kind), inference, _train(optimizer=kind, zero_grad=True), inference)


@register_mutator
class RetainedGraph(TrainingMutator):
    """A backward run twice through the retained graph, then a fresh training call."""

    name = "train_retain_graph"
    kind = "retain_graph"
    needs = ("a float input or a parameter",)

    def sequence(self, tree, case, rng):
        return (_train(retain_graph=True), _train())
