"""Offline mutators: every category has one, mutants keep the TestCase contract and run in eager
(in real sandbox workers, never in this process), they compose, and the CLI writes them."""

from __future__ import annotations

import ast
import random
import zlib
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from typer.testing import CliRunner

from nnforge.core.testcase import TestCase
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_case
from nnforge.mutators.ast_tools import ProgramTree
from nnforge.mutators.base import CATEGORIES, STATEFUL, all_mutators, get_mutator, mutate_chain, mutators_for
from nnforge.mutators.validate import check_case, eager_probe
from programs import LINEAR_SIN

TAXONOMY_IDS = ("A1", "A2", "A3", "B1", "B2", "C1", "D1", "D2", "E1", "E2", "F1", "F2", "G1", "G2", "H1",
                "I1", "I2", "I3", "J1", "K1")
N_SEEDS = 10
MIN_VALIDITY = 0.95


@pytest.fixture(scope="module")
def seeds(pool):
    """Float-heavy generator programs that run in eager themselves: the seeds mutators start from.

    A seed the generator got wrong is not the mutators' fault, so it is skipped (and counted).
    """
    cases = [generate_case(GeneratorConfig(n_nodes=6, seed=s, dtypes=("float32",)))[0] for s in range(N_SEEDS + 5)]
    valid = [c for c, r in zip(cases, checks(pool, cases)) if r.ok][:N_SEEDS]
    assert len(valid) == N_SEEDS, "too many generator seeds fail in eager"
    return valid


def checks(pool, cases):
    with ThreadPoolExecutor(max_workers=pool.size) as ex:
        return list(ex.map(lambda c: check_case(pool.call, c), cases))


def test_every_taxonomy_category_has_a_registered_mutator():
    assert set(TAXONOMY_IDS) <= set(CATEGORIES)
    for cat in TAXONOMY_IDS + (STATEFUL,):
        assert mutators_for(cat), f"no mutator aims at {cat}"
    for m in all_mutators().values():
        assert m.category in CATEGORIES and m.summary


def test_validator_rejects_crashes_and_nondeterminism_and_accepts_a_seed(pool, seeds):
    base = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return (BODY,)\n\n" \
           "def make_inputs():\n    return (torch.randn([3, 4]),)\n"
    crash, id_dependent, fine = (TestCase(program=base.replace("BODY", b))
                                 for b in ("x.view(5)", "x * (id(object()) % 1000003)", "x + 1"))
    assert checks(pool, [crash])[0].stage == "call 0"
    assert checks(pool, [id_dependent])[0].stage == "determinism"
    assert all(r.ok for r in checks(pool, [fine, seeds[0]]))


def test_each_mutator_makes_valid_mutants_on_generator_seeds(pool, seeds):
    probe = eager_probe(pool.call)
    made: dict[str, list[TestCase]] = defaultdict(list)
    for case in seeds:
        for name, m in sorted(all_mutators().items()):
            if not m.applicable(case):
                continue
            mutant = m.mutate(case, random.Random(zlib.crc32(name.encode()) + len(made[name])), probe if m.uses_probe else None)
            if mutant is None:
                continue
            tree = ProgramTree(mutant.program)  # parses, keeps class Model + forward and make_inputs
            assert tree.params() is not None
            assert mutant.meta["origin"] == "mutator" and mutant.meta["parent"] == case.case_id
            assert mutant.meta["mutator"] == name and mutant.meta["category"] == m.category
            assert mutant.meta["chain"] == [name]
            assert (mutant.program, mutant.calls) != (case.program, case.calls)
            made[name].append(mutant)
    for name in all_mutators():
        # seq_state needs attributes/globals a rule introduces (tested below), seq_mode a program that
        # reads the mode (tests/test_mutators_reach.py)
        # train_optimizer and train_freeze a parameter, which a minority of generator programs create
        # (tests them below, on one that does)
        if name not in ("seq_state", "seq_mode", "train_optimizer", "train_freeze"):
            assert len(made[name]) >= N_SEEDS // 2, f"{name} made only {len(made[name])} mutants"
    flat = [(name, c) for name, cs in made.items() for c in cs]
    results = checks(pool, [c for _, c in flat])
    ok: dict[str, list[bool]] = defaultdict(list)
    failures = []
    for (name, _), r in zip(flat, results):
        ok[name].append(r.ok)
        if not r.ok:
            failures.append(f"{name}: {r.stage}: {r.error}")
    for name, flags in ok.items():
        assert sum(flags) / len(flags) >= MIN_VALIDITY, f"{name} validity {sum(flags)}/{len(flags)}: {failures}"


def test_chains_of_three_random_mutators_still_run_and_record_their_lineage(pool, seeds):
    probe = eager_probe(pool.call)
    chained = [mutate_chain(case, random.Random(7 + i), 3, probe=probe) for i, case in enumerate(seeds[:6])]
    for c in chained:
        assert len(c.meta["chain"]) == 3 and len(c.meta["categories"]) == 3
    results = checks(pool, chained)
    assert all(r.ok for r in results), [(c.meta["chain"], r) for c, r in zip(chained, results) if not r.ok]


def test_applying_one_rule_twice_uses_fresh_names(pool, seeds):
    m = get_mutator("a1_dunder_object")
    twice = m.mutate(m.mutate(seeds[1], random.Random(0)), random.Random(1))
    classes = [n.name for n in ast.parse(twice.program).body if isinstance(n, ast.ClassDef)]
    assert len(classes) == len(set(classes)) == 3  # _Scaled, a fresh second name, Model
    assert twice.meta["chain"] == ["a1_dunder_object", "a1_dunder_object"]
    assert checks(pool, [twice])[0].ok


def test_state_sequence_changes_an_attribute_a_guard_rule_introduced(pool, seeds):
    g2 = get_mutator("g2_state_guards").mutate(seeds[2], random.Random(0))
    seq = get_mutator("seq_state")
    assert not seq.applicable(seeds[2]) and seq.applicable(g2)
    mutant = seq.mutate(g2, random.Random(3))
    changed = [k for step in mutant.calls for k in list(step.set_attrs) + list(step.set_globals)]
    assert changed and all(k in mutant.program for k in changed)
    assert len(mutant.calls) > len(g2.calls)
    assert checks(pool, [mutant])[0].ok


def test_sequence_mutant_calls_round_trip_through_save_and_load(tmp_path, seeds):
    j1 = get_mutator("j1_dynamic_input").mutate(seeds[3], random.Random(0))
    mutant = get_mutator("seq_shape").mutate(j1, random.Random(0))  # the J1 input is declared dynamic: no probe needed
    assert mutant is not None and any(ch.shape is not None for step in mutant.calls for ch in step.inputs)
    back = TestCase.load(mutant.save(tmp_path / "m"))
    assert back.calls == mutant.calls and back.meta == mutant.meta and back.case_id == mutant.case_id


def test_mutate_cli_writes_valid_case_folders_and_lists_mutators(tmp_path, seeds):
    from nnforge.agent.cli import _register_commands, app

    _register_commands()
    src = seeds[4].save(tmp_path / "seed")
    runner = CliRunner()
    res = runner.invoke(app, ["mutate", str(src), "--category", "B1", "--count", "2", "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    folders = sorted((tmp_path / "out").iterdir())
    assert len(folders) == 2
    for f in folders:
        case = TestCase.load(f)
        assert case.meta["category"] == "B1" and case.meta["parent"] == seeds[4].case_id
    bad = runner.invoke(app, ["mutate", str(src), "--category", "Z9", "-o", str(tmp_path / "out2")])
    assert bad.exit_code == 2
    listing = runner.invoke(app, ["mutators"])
    assert listing.exit_code == 0
    for cat in TAXONOMY_IDS:
        assert cat in listing.output


def test_training_mutators_train_a_generator_program_and_reach_a_joint_graph():
    import random

    from nnforge.generator.engine import GeneratorConfig
    from nnforge.generator.seeds import generate_case
    from nnforge.mutators.base import TRAINING
    from nnforge.mutators.reach import measure_compile, reach

    seed, _ = generate_case(GeneratorConfig(n_nodes=8, seed=0))
    base = measure_compile({"program": seed.program, "calls": [c.to_json() for c in seed.calls]})
    training = [m for m in all_mutators().values() if m.category == TRAINING]
    assert {m.name for m in training} >= {"train_backward", "train_optimizer", "train_freeze", "train_no_grad",
                                          "train_retain_graph"}
    rng = random.Random(0)
    for m in training:
        assert m.applicable(seed), m.name
        mutant = m.mutate(seed, rng)
        assert mutant is not None and mutant.program == seed.program and any(c.backward for c in mutant.calls)
        rec = measure_compile({"program": mutant.program, "calls": [c.to_json() for c in mutant.calls]})
        assert rec["ok"], (m.name, rec.get("error"))
        assert reach(TRAINING, rec, base), m.name  # a graph whose inputs require grad: AOTAutograd's joint graph


def test_train_backward_keeps_a_stateful_sequence_and_trains_every_call():
    from nnforge.core.calls import CallStep
    from nnforge.core.testcase import TestCase

    case = TestCase(program=LINEAR_SIN, calls=(CallStep(grad_enabled=False), CallStep(reset_cache=True)))
    mutant = get_mutator("train_backward").mutate(case, __import__("random").Random(0))
    assert [c.backward for c in mutant.calls] == [True, True] and mutant.calls[1].reset_cache
    assert mutant.calls[0].grad_enabled is None  # out of no_grad: a backward needs the graph

