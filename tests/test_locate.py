"""Where a wrong value first appears (oracle/locate.py) and the root-cause keys built on it
(triage/rootcause.py, triage/signature.py): one wrong operator is one key, whatever the program
does with its values afterwards."""

from __future__ import annotations

import ast

import pytest
import torch

from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom, Verdict
from nnforge.oracle.locate import probe_source
from nnforge.oracle.oracle import Oracle
from nnforge.triage.rootcause import attribute_class, guilty_ops, provisional_key
from nnforge.triage.signature import signature_of

HEAD = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x, y):\n"


def _program(body: str, dtype: str = "int32") -> str:
    lines = "".join(f"        {line}\n" for line in body.strip().splitlines())
    return (HEAD + lines + "\n\ndef make_inputs():\n"
            f"    return (torch.randn(3, 4), torch.randint(1, 9, (3, 5), dtype=torch.{dtype}))\n")


def _case(body: str, dtype: str = "int32") -> TestCase:
    return TestCase(program=_program(body, dtype),
                    inputs=(torch.randn(3, 4), torch.randint(1, 9, (3, 5), dtype=getattr(torch, dtype))))


def test_the_probe_returns_every_assigned_value_in_order_and_refuses_what_it_cannot_follow():
    source, slots = probe_source(_program("v1 = torch.sin(x)\nwith torch.no_grad():\n    v2, v3 = v1.split(2, 1)\n"
                                          "v4 = v2 + y.sum()\nreturn (v4,)"))
    assert [s.name for s in slots] == ["v1", "v2", "v3", "v4"]
    assert slots[3].line == "v4 = v2 + y.sum()" and slots[3].reads == ("v2", "y")
    forward = next(f for f in ast.walk(ast.parse(source)) if isinstance(f, ast.FunctionDef) and f.name == "forward")
    assert ast.unparse(forward.body[-1]) == "return tuple(_nnforge_seen)"
    assert probe_source(_program("v1 = x\nfor i in range(2):\n    v1 = v1 + 1\nreturn (v1,)")) is None
    assert probe_source(_program("if x.sum() > 0:\n    return (x,)\nreturn (y,)")) is None
    assert probe_source("not python (") is None


def test_one_wrong_operator_is_one_key_whatever_its_values_flow_into(pool):
    """faulty_amin_zero_init computes integer amin wrong. Three programs carry it into different
    operators (an add, a cumsum, a gather by index); the worker locates the amin in each, and the
    early and final keys name it and nothing after it."""
    oracle = Oracle(pool, ["faulty_amin_zero_init"], locate=True)
    bodies = [
        "v1 = torch.sin(x)\nv3 = torch.amin(y, dim=1)\nv4 = v3 + 1\nv5 = v4.float() + v1.sum()\nreturn (v5,)",
        "v3 = torch.amin(y, dim=1)\nv4 = torch.cumsum(v3, 0)\nv5 = v4 * 2\nreturn (v5, x)",
        "v1 = x.abs()\nv3 = torch.amin(y, 1)\nv6 = v1[:, 0] - v3.float()\nreturn (v6,)",
    ]
    verdicts = [oracle.check(_case(b)).verdicts[0] for b in bodies]
    for v in verdicts:
        assert v.symptom is Symptom.MISMATCH, v.detail
        assert v.first_wrong is not None and v.first_wrong["line"].startswith("v3 = torch.amin(y"), v.first_wrong
        assert v.first_wrong["dtype"] == "int32" and v.first_wrong["operands"] == {"y": [3, 5]}
    keys = {provisional_key(v, _case(b)) for v, b in zip(verdicts, bodies)}
    assert len(keys) == 1 and '"amin"' in keys.pop()
    assert len({signature_of(v, _case(b)).digest for v, b in zip(verdicts, bodies)}) == 1
    # int64: another early key (its dtype), the same final one (amin)
    wide = oracle.check(_case(bodies[1], "int64")).verdicts[0]
    assert wide.first_wrong["dtype"] == "int64"
    assert provisional_key(wide, _case(bodies[1], "int64")) not in {provisional_key(verdicts[1], _case(bodies[1]))}
    assert signature_of(wide, _case(bodies[1], "int64")).digest == signature_of(verdicts[1], _case(bodies[1])).digest
    # without the fault nothing is wrong and nothing is located
    clean = Oracle(pool, ["aot_eager"], locate=True).check(_case(bodies[0])).verdicts[0]
    assert clean.symptom is Symptom.PASS and clean.first_wrong is None


def test_a_wrong_value_and_the_nan_it_becomes_downstream_are_one_signature_and_other_operators_are_not():
    case = TestCase(program=_program("v1 = x - y\nv2 = torch.log(v1)\nreturn (v2,)"))
    fw = {"name": "v1", "line": "v1 = x - y", "dtype": "float32", "shape": [3, 4], "operands": {"x": [3, 4], "y": [4]}}
    wrong = Verdict(target="inductor", symptom=Symptom.MISMATCH, rung="inductor", first_wrong=fw)
    nan = Verdict(target="inductor", symptom=Symptom.NAN_MISMATCH, rung="inductor", first_wrong=fw)
    assert signature_of(wrong, case).digest == signature_of(nan, case).digest
    assert provisional_key(wrong, case) == provisional_key(nan, case)
    assert guilty_ops(fw) == ("sub",) and attribute_class(fw) == ("broadcast",)
    other = Verdict(target="inductor", symptom=Symptom.MISMATCH, rung="inductor",
                    first_wrong={**fw, "line": "v1 = torch.atan2(x, y)"})
    assert signature_of(other, case).digest != signature_of(wrong, case).digest
    # a reduction to a different dim is the same call class; a negative literal is not
    assert attribute_class({**fw, "line": "v1 = torch.sum(x, -1)", "operands": {"x": [3, 4]}, "shape": [3]}) == (
        "negative int",)


@pytest.mark.parametrize("line,ops", [("v5 = torch.sub(v3, v4)", ("sub",)), ("v6 = v1", ()),
                                      ("v2 = v1.float().abs()", ("float[float32]", "abs")),
                                      ("v3 = torch.concatenate((x, y), 1).clip(0, 1)", ("cat", "clamp"))])
def test_statement_ops_name_what_the_statement_calls(line, ops):
    from nnforge.triage.canonical import statement_ops

    assert statement_ops(line) == ops


def test_the_guilty_statement_of_a_reduced_program_is_the_first_one_wrong_alone(pool, settings):
    """faulty_perturb:add puts its error in the graph's first float output whenever the graph holds
    an add: the first wrong value is the clone's, yet the clone alone is right and the add alone
    is wrong. A bug local to its operator (integer amin) stays on its own statement."""
    from nnforge.triage.guilty import guilty_verdict

    case = _case("v1 = torch.clone(x)\nv2 = v1 + x.sum()\nreturn (v2,)")
    located = Oracle(pool, ["faulty_perturb:add"], locate=True).check(case).verdicts[0]
    assert located.first_wrong["line"] == "v1 = torch.clone(x)"
    guilty = guilty_verdict(pool, case, located, settings=settings)
    # and below the statement, of its ATen operators (sum, add) the add is wrong alone
    assert guilty.first_wrong["line"] == "v2 = v1 + x.sum()" and guilty_ops(guilty.first_wrong) == ("aten.add",)
    local = _case("v3 = torch.amin(y, dim=1)\nv4 = v3 + 1\nreturn (v4,)")
    verdict = Oracle(pool, ["faulty_amin_zero_init"], locate=True).check(local).verdicts[0]
    amin = guilty_verdict(pool, local, verdict, settings=settings).first_wrong
    assert amin["line"] == "v3 = torch.amin(y, dim=1)" and guilty_ops(amin) == ("aten.amin",)
    # a statement that is several ATen operators: softsign is abs, add, div; the add is the bug
    soft = _case("v1 = F.softsign(x)\nreturn (v1,)").with_(program=_program("v1 = F.softsign(x)\nreturn (v1,)")
                                                           .replace("import torch\n", "import torch\nimport torch.nn.functional as F\n", 1))
    verdict = Oracle(pool, ["faulty_perturb:add"], locate=True).check(soft).verdicts[0]
    fw = guilty_verdict(pool, soft, verdict, settings=settings).first_wrong
    assert fw["aten"] == "aten.add.Tensor" and guilty_ops(fw) == ("aten.add",)
    # statements tied by a Python dict no input can carry: none stands alone, the ATen calls of
    # the whole program still do, and the add is found there
    tied = _case("d = {'a': x, 'b': x * 2}\nd.setdefault('c', d['a'] + d['b'])\nv1 = torch.clone(d['c'])\n"
                 "return (v1,)")
    verdict = Oracle(pool, ["faulty_perturb:add"], locate=True).check(tied).verdicts[0]
    assert verdict.symptom is Symptom.MISMATCH
    fw = guilty_verdict(pool, tied, verdict, settings=settings).first_wrong
    assert fw["aten"] == "aten.add.Tensor" and guilty_ops(fw) == ("aten.add",), fw


def test_an_in_place_aten_variant_keys_as_its_functional_operator():
    assert guilty_ops({"aten": "aten.add_.Tensor", "line": "v1 = x + 1"}) == ("aten.add",)
    assert guilty_ops({"aten": "aten.__and__.Tensor", "line": "v1 = x & y"}) == ("aten.__and__",)


def test_an_unreduced_finding_joins_the_cluster_whose_guilty_operator_is_wrong_alone_in_it(pool, settings):
    """Before paying for a reduction: a listed cluster's guilty ATen operator (`aten.add`) that is
    wrong alone on the values this program gave it claims the finding; an operator right alone
    (`aten.mul` under a fault in add) claims nothing. Pieces come from what torch.compile hands
    the compiler: Dynamo rewrites `addcdiv(..., value=v)` into a div and an add."""
    from nnforge.triage.guilty import known_guilty_cluster

    case = _case("v1 = torch.addcdiv(x, x, x, value=-0.5)\nv2 = torch.clone(v1) * 3\nreturn (v2,)")
    verdict = Oracle(pool, ["faulty_perturb:add"], locate=True).check(case).verdicts[0]
    assert verdict.symptom is Symptom.MISMATCH
    assert known_guilty_cluster(pool, case, verdict, [("c-mul", "aten.mul"), ("c-add", "aten.add")],
                                settings=settings) == "c-add"
    assert known_guilty_cluster(pool, case, verdict, [("c-mul", "aten.mul")], settings=settings) is None


def test_a_wrong_aten_call_is_named_by_the_operator_of_its_reference_that_is_wrong_alone(pool, settings):
    """One level below ATen: `aten.addcdiv`'s reference is a mul, a div and an add, and under a
    fault in add only the add is wrong alone; a call that is one operator already stays itself."""
    from nnforge.oracle.job import dump_values
    from nnforge.triage.guilty import _deepest

    t = torch.randn(2, 5)
    program = ("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, a0, a1, a2):\n"
               "        out = torch.ops.aten.addcdiv.default(a0, a1, a2, value=-0.5)\n"
               "        return out if isinstance(out, tuple) else (out,)\n\n\n"
               "def make_inputs():\n    return (torch.zeros([2, 5]), torch.zeros([2, 5]), torch.zeros([2, 5]))\n")
    piece = {"program": program, "inputs_pt": dump_values((t, t + 1, t.abs() + 1))}
    oracle = Oracle(pool, ["faulty_perturb:add"], locate=True)
    op, fw, _ = _deepest(pool, oracle, ("aten.addcdiv.default", {}, piece), settings)
    assert guilty_ops({"aten": op}) == ("aten.add",), op
    assert fw["dtype"] == "float32"
    single = program.replace("torch.ops.aten.addcdiv.default(a0, a1, a2, value=-0.5)", "torch.ops.aten.add.Tensor(a0, a1)")
    same = ("aten.add.Tensor", {}, {"program": single, "inputs_pt": piece["inputs_pt"]})
    assert _deepest(pool, oracle, same, settings) == same


def test_a_crash_that_follows_a_wrong_value_is_keyed_by_the_wrong_value(pool, settings):
    """The add's output comes back off (faulty_perturb:add); after a graph break Python reads it
    and picks a reshape that cannot be done: a crash in the compiled run only. Cut after the add,
    the program is already wrong: that prefix is the bug, the crash its consequence."""
    from nnforge.triage.guilty import wrong_before_crash

    program = ("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
               "        a = torch.ones_like(x) + 0.0\n        b = a.max().item()\n"
               "        c = x.reshape(int(b * 100) - 99, -1)\n        return (c,)\n\n\n"
               "def make_inputs():\n    return (torch.randn(5),)\n")
    got = Oracle(pool, ["faulty_perturb:add"]).check(TestCase(program=program, inputs=(torch.randn(5),)))
    crash = got.verdicts[0]
    assert crash.symptom is Symptom.CRASH
    upstream = wrong_before_crash(pool, got.case, crash, settings=settings)
    assert upstream is not None
    case, verdict = upstream
    assert verdict.symptom is Symptom.MISMATCH and "reshape" not in case.program and "ones_like" in case.program
    assert signature_of(verdict, case).key != signature_of(crash, got.case).key
    # a crash with nothing wrong before it stays a crash
    lone = Oracle(pool, ["faulty_crash:sin"]).check(_case("v1 = torch.sin(x)\nv2 = v1 * 2\nreturn (v2,)"))
    assert lone.verdicts[0].symptom is Symptom.CRASH
    assert wrong_before_crash(pool, lone.case, lone.verdicts[0], settings=settings) is None


def test_wrong_state_written_in_place_is_one_key_whatever_operator_or_nan():
    """A buffer the call writes in place that comes back off, or NaN, under batch_norm or
    instance_norm: one key per rung and kind of state; a wrong output is not such a key."""
    from nnforge.triage.rootcause import written_state_key

    def v(symptom, detail, rung="aot_eager"):
        return Verdict(symptom=symptom, target="inductor", rung=rung, detail=detail)

    off = v(Symptom.MISMATCH, "dynamo: pass; aot_eager: mismatch at call 0 (module state after the call: leaf 0: max abs err 0.03)")
    nan = v(Symptom.NAN_MISMATCH, "dynamo: pass; aot_eager: nan_mismatch at call 0 (module state after the call: 4 of 4 positions differ in NaN/Inf)")
    bn = TestCase(program=_program("v1 = F.batch_norm(x, self.m, self.v, training=True)\nreturn (v1,)"))
    inorm = TestCase(program=_program("v1 = F.instance_norm(x, self.m, self.v)\nreturn (v1,)"))
    assert written_state_key(off) == written_state_key(nan) is not None
    assert signature_of(off, bn).digest == signature_of(nan, inorm).digest
    other_rung = v(Symptom.MISMATCH, "dynamo: pass; inductor: mismatch at call 0 (module state after the call: x)", "inductor")
    assert signature_of(other_rung, bn).digest != signature_of(off, bn).digest
    assert written_state_key(v(Symptom.MISMATCH, "aot_eager: mismatch at call 0 (output: [0]: 3 of 4 values)")) is None
