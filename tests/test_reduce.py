"""Reduction through the real sandbox and real torch.compile, on the planted faults of oracle/faulty.py.

The faults fire only when the captured ATen graph holds a chosen op, so the right answer is
known: the reduced case must keep that op, show the same bug, and pass on a healthy backend.
"""

import time

import pytest
from typer.testing import CliRunner

from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.oracle.oracle import Oracle
from nnforge.oracle.sandbox import WorkerPool
from nnforge.triage.canonical import op_names
from nnforge.triage.interesting import same_bug
from nnforge.triage.reducer import Reducer
from nnforge.triage.signature import signature_of

pytestmark = pytest.mark.slow

OPS = ("add", "sin", "cos", "relu", "mul", "exp", "sub", "tanh", "sigmoid", "neg", "abs")

TWO_FAULTS = """import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.scale = 2.5

    def forward(self, x, y):
        a = self.lin(x)
        b = torch.relu(a) * self.scale
        c = torch.sin(b + y)
        d = torch.cos(c).sum(dim=-1, keepdim=True)
        e = torch.tanh(a) - 0.5
        return (d, e)


def make_inputs():
    return (torch.randn(4, 8), torch.randn(4, 8))
"""


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(size=1, timeout_s=120, memory_mb=6000) as p:
        yield p


def _generated_with(op: str):
    for seed in range(30):
        case, _ = generate_case(GeneratorConfig(seed=seed, ops=OPS, n_nodes=10))
        if op in case.meta["ops"]:
            return case
    raise AssertionError(f"no generated program with {op}")


def _check(pool, case, target):
    result = Oracle(pool, [target]).check(case)
    return result.verdicts[0], result.case


@pytest.fixture(scope="module")
def crash_reduction(pool):
    case = _generated_with("sin")
    verdict, case = _check(pool, case, "faulty_crash:sin")
    assert verdict.symptom is Symptom.CRASH and "aten.sin" in verdict.exc_message
    return case, verdict, Reducer(pool, "faulty_crash:sin", max_queries=60).reduce(case, verdict)


def test_graph_reduction_keeps_the_crash_and_shrinks_to_the_faulty_op(crash_reduction):
    case, verdict, res = crash_reduction
    assert res.before["ops"] >= 8 and res.after["ops"] <= 2, res.steps
    assert "sin" in op_names(res.case)
    assert res.verified and same_bug(verdict, res.verdict)
    assert signature_of(res.verdict, res.case).digest == signature_of(verdict, case).digest
    assert res.case.inputs is not None and res.queries <= 60
    assert any(s.startswith("graph:") for s in res.steps)


def test_reduced_case_shows_the_bug_in_a_fresh_pool_and_passes_on_a_healthy_backend(crash_reduction, tmp_path):
    _, verdict, res = crash_reduction
    res.case.save(tmp_path / "reduced")
    loaded = TestCase.load(tmp_path / "reduced")
    with WorkerPool(size=1, timeout_s=120) as fresh:
        result = Oracle(fresh, ["faulty_crash:sin", "eager"]).check(loaded)
    faulty, eager = result.verdicts
    assert same_bug(verdict, faulty)
    assert eager.symptom is Symptom.PASS


def test_reduction_does_not_slide_onto_another_planted_fault(pool):
    target = "faulty_crash:sin|cos"  # two planted bugs: sin is named when present, else cos
    verdict, case = _check(pool, TestCase(program=TWO_FAULTS), target)
    assert "aten.sin" in verdict.exc_message
    res = Reducer(pool, target, max_queries=60).reduce(case, verdict)
    assert res.verified and "aten.sin" in res.verdict.exc_message
    assert "sin" in op_names(res.case) and res.after["ops"] <= 2, res.case.program
    # the other bug is reachable from this program, and it is a different signature
    cos_only, cos_case = _check(pool, TestCase(program=TWO_FAULTS.replace("torch.sin(b + y)", "b + y")), target)
    assert "aten.cos" in cos_only.exc_message and not same_bug(verdict, cos_only)
    assert signature_of(cos_only, cos_case).digest != signature_of(res.verdict, res.case).digest


def test_perturbation_reduces_to_a_program_around_one_add(pool):
    case = _generated_with("add")
    verdict, case = _check(pool, case, "faulty_perturb:add")
    assert verdict.symptom is Symptom.MISMATCH
    res = Reducer(pool, "faulty_perturb:add", max_queries=60).reduce(case, verdict)
    assert res.verified and res.verdict.symptom is Symptom.MISMATCH
    ops = op_names(res.case)
    assert "add" in ops and len(ops) <= 3, res.case.program


def test_sequence_shortening_keeps_one_call_when_only_the_fault_matters(pool):
    case = TestCase(program=TWO_FAULTS, calls=(CallStep(grad_enabled=False),) * 3)
    verdict, case = _check(pool, case, "faulty_crash:sin")
    res = Reducer(pool, "faulty_crash:sin", passes=("calls",)).reduce(case, verdict)
    assert res.before["calls"] == 3 and res.after["calls"] == 1 and res.verified


def test_reduce_command_writes_a_reduced_case_folder(tmp_path):
    from nnforge.agent.cli import _register_commands, app

    _register_commands()
    src = tmp_path / "case"
    TestCase(program=TWO_FAULTS).save(src)
    out = tmp_path / "small"
    r = CliRunner().invoke(app, ["reduce", str(src), "--target", "faulty_crash:sin", "-o", str(out), "--budget-s", "60"])
    assert r.exit_code == 0, r.output
    assert "reduced from 9 operators" in r.output and "to 1 operator," in r.output and "queries" in r.output
    reduced = TestCase.load(out)
    assert (out / "verdict.json").is_file() and "sin" in op_names(reduced) and reduced.inputs is not None


def test_a_pack_reduces_to_the_member_that_holds_the_bug(pool):
    """Packing k programs needs no unpacking step: the graph pass deletes the other members."""
    from nnforge.generator.pack import pack_cases

    guilty = _generated_with("sin")
    others = [c for c in (generate_case(GeneratorConfig(seed=s, ops=OPS, n_nodes=6))[0] for s in range(100, 130))
              if "sin" not in c.meta["ops"]][:2]
    packed = pack_cases([others[0], guilty, others[1]])
    verdict, case = _check(pool, packed, "faulty_crash:sin")
    assert verdict.symptom is Symptom.CRASH
    res = Reducer(pool, "faulty_crash:sin", max_queries=60).reduce(case, verdict)
    assert "sin" in op_names(res.case)
    assert len(res.case.program.splitlines()) < len(guilty.program.splitlines())  # less than one member is left
    # the outputs' pass unpacks it, and the node-by-node search after it starts a fresh time budget
    assert any(s.startswith("graph: outputs ") and "of a pack of 3" in s for s in res.steps), res.steps


def test_a_mutant_pack_is_unpacked_to_the_member_that_holds_the_bug(pool):
    """Mutants pack by text (mutators/pack.py): the reducer's first pass tries each member alone
    on its slice of the pack's values, before any other pass."""
    import random

    from nnforge.mutators.base import get_mutator
    from nnforge.mutators.pack import pack_mutants

    closures = get_mutator("e1_globals_closures")
    def mutant(case):
        return closures.mutate(case, random.Random(0), None)
    guilty = mutant(_generated_with("sin"))
    others = [mutant(c) for c in (generate_case(GeneratorConfig(seed=s, ops=OPS, n_nodes=6))[0] for s in range(100, 130))
              if "sin" not in c.meta["ops"] and closures.applicable(c)][:2]
    packed = pack_mutants([others[0], guilty, others[1]])
    verdict, case = _check(pool, packed, "faulty_crash:sin")
    assert verdict.symptom is Symptom.CRASH
    res = Reducer(pool, "faulty_crash:sin", passes=("members",)).reduce(case, verdict)
    assert res.verified and res.case.meta["unpacked_from"] == case.case_id  # the member, perhaps less its dead lines
    assert "_p1_" not in res.case.program and "class Model" in res.case.program and "sin" in op_names(res.case)
    assert any(step.startswith("members: member 1 of 3 alone") for step in res.steps)
    assert res.case.inputs is not None and len(res.case.inputs) < len(case.inputs)


def test_a_mutant_pack_whose_bug_needs_two_members_keeps_just_those_two(pool):
    """A bug that needs two members in one graph (here a planted fault that fires only on a graph
    with both sin and cos) shows in no member alone: the pack is cut down to the two it needs."""
    import random

    from nnforge.mutators.base import get_mutator
    from nnforge.mutators.pack import pack_mutants, unpack

    closures = get_mutator("e1_globals_closures")
    plain = [c for c in (generate_case(GeneratorConfig(seed=s, ops=OPS, n_nodes=6))[0] for s in range(200, 260))
             if closures.applicable(c)]
    def first(has: str, lacks: str):
        return next(closures.mutate(c, random.Random(0), None) for c in plain
                    if has in c.meta["ops"] and lacks not in c.meta["ops"])
    neither = [c for c in plain if not {"sin", "cos"} & set(c.meta["ops"])]
    members = [first("sin", "cos"), closures.mutate(neither[0], random.Random(0), None), first("cos", "sin"),
               closures.mutate(neither[1], random.Random(0), None)]
    verdict, case = _check(pool, pack_mutants(members), "faulty_crash:sin&cos")
    assert verdict.symptom is Symptom.CRASH and "sin&cos" in verdict.exc_message
    res = Reducer(pool, "faulty_crash:sin&cos", passes=("members",)).reduce(case, verdict)
    assert res.verified
    assert any(step.startswith("members: none of the 4 shows the bug alone, members [0, 2] together do")
               for step in res.steps), res.steps
    kept = unpack(res.case)
    assert [m.program for m in kept] == [members[0].program, members[2].program]
    ins = unpack(case)  # each kept member runs on its own slice of the pack's values
    assert all(len(k.inputs) == len(i.inputs) and all(a.equal(b) for a, b in zip(k.inputs, i.inputs))
               for k, i in zip(kept, (ins[0], ins[2])))


DEAD_LINES = """import torch
import collections
import math
_Pair = collections.namedtuple("_Pair", ["lo", "hi"])
_SCALE = math.pi


class _Helper:
    def __init__(self, t):
        self.t = t


def _scale(t):
    return t * 2


class Model(torch.nn.Module):
    def forward(self, x, y, z):
        a = torch.sin(x)
        b = torch.cos(y)
        c = torch.maximum(a, b)
        z.add_(1)
        s = _scale(y)
        return (a * _SCALE,)


def make_inputs():
    return (torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8))
"""


def test_lines_nothing_reads_go_but_side_effects_and_own_calls_stay():
    from nnforge.triage.program_reduce import without_dead_code

    cleaned = without_dead_code(TestCase(program=DEAD_LINES, inputs=(1, 2, 3)))
    src = cleaned.program
    assert "cos" not in src and "maximum" not in src and "_Helper" not in src, src  # dead lines, and a class no one names
    assert "_Pair" not in src and "collections" not in src, src  # a module-level name no one reads, then its import
    assert "_SCALE = math.pi" in src and "import math" in src and "import torch" in src, src
    assert "z.add_(1)" in src and "s = _scale(y)" in src and "def _scale" in src, src  # may have effects: kept
    assert without_dead_code(cleaned) is None  # nothing left to drop


def test_a_reduction_out_of_budget_still_ends_without_dead_lines(pool):
    # no budget at all: every pass stops at once, and the final check tests the case without its dead lines
    verdict, case = _check(pool, TestCase(program=DEAD_LINES), "faulty_crash:sin")
    res = Reducer(pool, "faulty_crash:sin", time_budget_s=0.0).reduce(case, verdict)
    assert res.exhausted == "time" and res.verified and same_bug(verdict, res.verdict), res.steps
    assert "cos" not in res.case.program and "_Helper" not in res.case.program, res.case.program
    assert res.after["ops"] < res.before["ops"] and any(s.startswith("dead code:") for s in res.steps)


SLOW_SIN = """import time
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        time.sleep(0.3)
        a = torch.sin(x) + 1
        b = torch.cos(x) * 2
        c = torch.relu(x) - 3
        return (a + b + c,)


def make_inputs():
    return (torch.randn(4, 8),)
"""


def test_a_query_that_would_end_past_the_time_budget_is_not_started(pool):
    """A timeout finding's queries each wait a worker timeout: the reducer must not start one its
    budget cannot hold (it used to stop only once the budget was spent, overrunning it by a query)."""
    verdict, _ = _check(pool, TestCase(program=SLOW_SIN), "faulty_crash:sin")
    assert verdict.symptom is Symptom.CRASH
    t0 = time.monotonic()
    again, _ = _check(pool, TestCase(program=SLOW_SIN), "faulty_crash:sin")  # one query's cost, warm
    cost = time.monotonic() - t0
    assert same_bug(verdict, again)
    # without values, the reduction's first query draws them (about `cost`); a second query would
    # start near `cost` and end near twice it, past a budget of 1.5x: it is not started
    res = Reducer(pool, "faulty_crash:sin", time_budget_s=1.5 * cost).reduce(TestCase(program=SLOW_SIN), verdict)
    assert res.exhausted == "time" and res.verified, res.steps
    assert res.queries == 2, res.steps  # the values' query and the final check
    assert "time.sleep" in res.case.program


def test_a_few_queries_are_enough_to_drop_the_outputs_the_bug_does_not_need(pool):
    """The graph pass tries outputs before nodes: with a budget of a handful of queries (a slow
    machine's minute) a pack comes down to the guilty op."""
    from nnforge.generator.pack import pack_cases

    guilty = _generated_with("sin")
    others = [c for c in (generate_case(GeneratorConfig(seed=s, ops=OPS, n_nodes=6))[0] for s in range(200, 240))
              if "sin" not in c.meta["ops"]][:3]
    packed = pack_cases([others[0], others[1], guilty, others[2]])
    verdict, case = _check(pool, packed, "faulty_crash:sin")
    res = Reducer(pool, "faulty_crash:sin", max_queries=4).reduce(case, verdict)
    assert res.verified and "sin" in op_names(res.case), res.steps
    # 28 ops, the guilty member 10; nodes first, 4 queries left 4 ops (6 queries: 2)
    assert res.after["ops"] <= 2, (res.steps, res.case.program)


MUTATOR_BLOCKS = """import torch
import contextlib


class _Stop(Exception):
    pass


@contextlib.contextmanager
def _flipped(t):
    with torch.set_grad_enabled(not torch.is_grad_enabled()):
        try:
            yield t * 0.5
        except _Stop:
            pass


class Model(torch.nn.Module):
    def forward(self, x, m):
        a = torch.where(m, x, -x)
        b = a.repeat((2,))
        c = -1 / torch.sgn(b)
        keys = sorted(['p', 'q'], key=lambda k: -ord(k))
        picked = [k for k in keys if k == 'p']
        with _flipped(c) as half:
            c = c + half
            raise _Stop()
        return (c, len(picked))


def make_inputs():
    return (torch.randint(1, 9, [6], dtype=torch.int64), torch.randint(0, 2, [6]).bool())
"""


def test_names_a_block_binds_for_itself_are_no_reads_from_outside():
    import ast

    from nnforge.triage.program_reduce import Edit

    edit = Edit.of(TestCase(program=MUTATOR_BLOCKS, inputs=(1, 2)))
    assert edit.undefined() == set()  # `half`, `k` bound by the with, the lambda, the comprehension
    body = edit.forward.body
    edit.forward.body = [s for s in body if not (isinstance(s, ast.Assign) and s.targets[0].id == "c")]
    assert edit.undefined() == {"c"}  # a name the with-block reads from outside is still missed
    edit.forward.body = [ast.parse("y = y + 1").body[0]] + body
    assert "y" in edit.undefined()  # an assignment reads its value before it binds


def test_statements_before_a_mutator_block_are_cut(pool):
    verdict, case = _check(pool, TestCase(program=MUTATOR_BLOCKS), "faulty_perturb:add")
    assert verdict.symptom is Symptom.MISMATCH
    res = Reducer(pool, "faulty_perturb:add", max_queries=60).reduce(case, verdict)
    assert res.verified and res.verdict.symptom is Symptom.MISMATCH, res.steps
    src = res.case.program
    assert "repeat" not in src and "sgn" not in src and "where" not in src, src  # cut: their values feed in
    assert "with _flipped" in src and "sorted" not in src, src


def test_integer_inputs_become_float32_where_the_bug_stays(pool):
    program = ("import torch\nimport torch.nn.functional as F\n\n\nclass Model(torch.nn.Module):\n"
               "    def forward(self, x, i):\n        return (F.softsign(x) * 2, torch.gather(x, 0, i))\n\n\n"
               "def make_inputs():\n    return (torch.randint(-8, 9, [6], dtype=torch.int64), "
               "torch.randint(0, 6, [3], dtype=torch.int64))\n")
    verdict, case = _check(pool, TestCase(program=program), "faulty_perturb:add")
    assert verdict.symptom is Symptom.MISMATCH
    res = Reducer(pool, "faulty_perturb:add", passes=("dtypes",)).reduce(case, verdict)
    assert res.verified, res.steps
    src = res.case.program
    # softsign's input went float32; gather's index cannot, and stays int64
    assert "torch.randn([6], dtype=torch.float32)" in src and "randint(0, 6, [3], dtype=torch.int64)" in src, src
    assert res.case.inputs[0].dtype.is_floating_point and not res.case.inputs[1].dtype.is_floating_point
