"""Packing single-call mutants into one test (mutators/pack.py): what may pack, and the pack's text."""

from __future__ import annotations

import ast
import random

import pytest

from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.mutators.base import get_mutator
from nnforge.mutators.pack import NotPackable, pack_mutants, packable, subpack, unpack

OPS = ("add", "sin", "cos", "relu", "mul", "exp", "sub", "tanh", "sigmoid", "neg", "abs")


def _mutant(name: str, seed: int) -> TestCase:
    for s in range(seed, seed + 40):
        case, _ = generate_case(GeneratorConfig(seed=s, ops=OPS, n_nodes=6))
        m = get_mutator(name)
        if m.applicable(case):
            out = m.mutate(case, random.Random(s), None)
            if out is not None:
                return out
    raise AssertionError(f"{name} made no mutant")


def _text(program: str, mutator: str = "e1_globals_closures", calls=None) -> TestCase:
    meta = {"mutator": mutator, "chain": [mutator]}
    return TestCase(program=program, meta=meta, calls=calls or (CallStep(grad_enabled=False),))


GLOBAL_COUNTER = """import torch
from math import sqrt

_SEEN = 0

def _helper(t):
    return t * sqrt(2.0)

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        global _SEEN
        _SEEN = _SEEN + 1
        return (_helper(x) + _SEEN,)

def make_inputs():
    return (torch.randn(3),)
"""


def test_members_are_renamed_apart_and_the_pack_calls_each_on_inputs_of_its_own():
    a = _mutant("e1_globals_closures", 1)
    b = _text(GLOBAL_COUNTER)
    assert packable(a) is None and packable(b) is None
    pack = pack_mutants([a, b, b.with_(program=GLOBAL_COUNTER.replace("2.0", "3.0"))])
    tree = ast.parse(pack.program)
    top = {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.ClassDef))}
    assert {"Model", "make_inputs", "_p0_Model", "_p1_Model", "_p2_Model", "_p1__helper", "_p2__helper"} <= top
    # the global statement follows the rename, so each member counts its own calls
    assert "global _p1__SEEN" in pack.program and "global _p2__SEEN" in pack.program
    assert pack.program.splitlines().count("from math import sqrt") == 1  # one shared import
    forward = next(f for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "Model"
                   for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
    arity_a = len(next(f for c in ast.parse(a.program).body if isinstance(c, ast.ClassDef) and c.name == "Model"
                       for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "forward").args.args) - 1
    assert len(forward.args.args) - 1 == arity_a + 2
    assert pack.meta["pack"] and len(pack.meta["pack_members"]) == 3 and pack.calls == a.calls
    compile(pack.program, "<pack>", "exec")  # it is valid Python


def test_members_come_back_with_their_slices_of_the_values():
    two_inputs = (GLOBAL_COUNTER.replace("forward(self, x)", "forward(self, x, y)").replace("_helper(x)", "_helper(x) * y")
                  .replace("(torch.randn(3),)", "(torch.randn(3), torch.randn(3))"))
    a, b = _text(GLOBAL_COUNTER), _text(two_inputs)
    pack = pack_mutants([a, b])
    valued = pack.with_(inputs=("x0", "x1", "y1"), state_dict={"m0.w": 1, "m1.w": 2, "m1.b": 3})
    first, second = unpack(valued)
    assert first.inputs == ("x0",) and first.state_dict == {"w": 1} and first.program == a.program
    assert second.inputs == ("x1", "y1") and second.state_dict == {"w": 2, "b": 3} and second.program == b.program
    assert second.meta["unpacked_from"] == pack.case_id and unpack(first) == []


def test_a_subpack_keeps_the_chosen_members_with_their_values_renumbered():
    two_inputs = (GLOBAL_COUNTER.replace("forward(self, x)", "forward(self, x, y)").replace("_helper(x)", "_helper(x) * y")
                  .replace("(torch.randn(3),)", "(torch.randn(3), torch.randn(3))"))
    a, b, c = _text(GLOBAL_COUNTER), _text(two_inputs), _text(GLOBAL_COUNTER.replace("2.0", "3.0"))
    valued = pack_mutants([a, b, c]).with_(inputs=("x0", "x1", "y1", "x2"),
                                           state_dict={"m0.w": 0, "m1.w": 1, "m2.w": 2, "m2.b": 3})
    sub = subpack(valued, [0, 2])
    assert sub.inputs == ("x0", "x2") and sub.state_dict == {"m0.w": 0, "m1.w": 2, "m1.b": 3}
    assert [m.program for m in unpack(sub)] == [a.program, c.program] and "_p2_" not in sub.program
    assert sub.meta["unpacked_from"] == valued.case_id and len(sub.meta["pack_members"]) == 2


@pytest.mark.parametrize("case, why", [
    (_text(GLOBAL_COUNTER, calls=(CallStep(), CallStep(reset_cache=True))), "not one plain call"),
    (_text(GLOBAL_COUNTER.replace("_helper(x) +", "torch.rand_like(x) +")), "random"),
    (_text(GLOBAL_COUNTER.replace("return (_helper", "return (globals()['_helper']")), "namespace"),
    (_text(GLOBAL_COUNTER.replace("def _helper(t):\n    return t", "def _helper(_SEEN):\n    return _SEEN")),
     "rebound in a nested scope"),
    (_text(GLOBAL_COUNTER, mutator="h1_graph_breaks"), "graph break"),
    (_text(GLOBAL_COUNTER, mutator="some_llm_rewrite"), "offline rule"),
    (_text(GLOBAL_COUNTER.replace("_SEEN = 0\n", "_SEEN = 0\ntorch.set_default_dtype(torch.float64)\n")),
     "module-level Expr"),
])
def test_what_a_pack_would_change_runs_alone(case, why):
    assert why in (packable(case) or "")
    with pytest.raises(NotPackable):
        pack_mutants([case, _text(GLOBAL_COUNTER)])


def test_dropout_that_cannot_draw_does_not_keep_a_mutant_alone():
    calm = GLOBAL_COUNTER.replace("_helper(x) +", "torch.nn.functional.dropout(x, p=0.5, training=False) +")
    assert packable(_text(calm)) is None
    assert "random" in packable(_text(calm.replace("training=False", "training=True")))


def test_two_members_importing_different_things_under_one_name_do_not_pack():
    other = GLOBAL_COUNTER.replace("from math import sqrt", "from torch import sqrt").replace("sqrt(2.0)", "sqrt(x)")
    with pytest.raises(NotPackable, match="sqrt"):
        pack_mutants([_text(GLOBAL_COUNTER), _text(other)])
