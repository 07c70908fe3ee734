"""Triage end to end: findings recorded in the store, clustered by signature, written up as a
standalone repro.py and a report.md, with real sandboxed workers, real torch.compile and the
test-only planted faults of oracle/faulty.py (whose answer is known)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nnforge.agent.cli import _register_commands, app
from nnforge.agent.cmd_triage import import_cases, triage_findings
from nnforge.agent.store import Store
from nnforge.core.settings import load_settings
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import INFERENCE_CALL, generate_case
from nnforge.oracle.oracle import Oracle
from nnforge.oracle.sandbox import WorkerPool
from nnforge.triage.cluster import choose_cluster, pairwise_precision_recall
from nnforge.triage.report import TEMPLATE_PROSE, accept_rewrite, draft_report, llm_prose_line, rewrite_prose
from nnforge.triage.repro import write_repro
from nnforge.triage.signature import signature_of

# Program A has the ops of all three planted faults (aten.sin, aten.add, aten.relu);
# program B has sin and relu but no add, so `faulty_perturb:add` passes on it.
PROGRAM_A = '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, x, y):
        return (x.sin() + y * self.w, x.relu())

def make_inputs():
    return (torch.randn(2, 3), torch.randn(2, 3))
'''

PROGRAM_B = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        h = torch.relu(x.cos() * 3.0)
        return torch.sin(h).tanh()

def make_inputs():
    return (torch.randn(4, 5),)
'''

THREE_FAULTS = "faulty_crash:sin,faulty_perturb:add,faulty_segv:relu"
_register_commands()


@pytest.fixture(scope="module")
def pool(settings):
    with WorkerPool(size=1, timeout_s=settings.worker_timeout_s,
                    inductor_cache_dir=settings.inductor_cache_dir) as p:
        yield p


def _cases_with_op(op: str, count: int) -> list[TestCase]:
    """`count` different generator programs whose graph contains `op`."""
    ops = (op, "add", "mul", "relu", "neg", "abs", "tanh", "exp", "sub")
    out: dict[str, TestCase] = {}
    seed = 0
    while len(out) < count:
        case, _ = generate_case(GeneratorConfig(n_nodes=5, seed=seed, ops=ops, dtypes=("float32",)))
        seed += 1
        if op in case.meta["ops"]:
            out.setdefault(case.case_id, case)
    return list(out.values())


def _run_repro(path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(path)], cwd=path.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


# -- the store ---------------------------------------------------------------------------------------------
def test_store_keeps_tests_findings_and_clusters_across_a_reopen(tmp_path):
    from nnforge.core.verdict import Verdict

    crash = Verdict(target="inductor", symptom=Symptom.CRASH, rung="inductor", exc_type="RuntimeError",
                    exc_message="no lowering for aten.sin")
    with Store(tmp_path) as store:
        store.add_test("case1", crash, folder=tmp_path / "c1", origin="generator")
        fid = store.add_finding("case1", crash, case_folder=tmp_path / "c1")
        assert store.add_finding("case1", crash) == fid  # one case and target is one finding
        with pytest.raises(ValueError):
            store.add_finding("case2", Verdict(target="inductor", symptom=Symptom.PASS))
    assert (tmp_path / "store.sqlite").is_file()
    with Store(tmp_path) as store:  # reopened: nothing lost
        assert store.tests_count() == 1
        assert [f.finding_id for f in store.new_findings()] == [fid]
        assert store.new_findings()[0].verdict == crash
        sig = signature_of(crash, TestCase(program=PROGRAM_A))
        store.assign_cluster(fid, sig.digest, sig, title="t")
        store.assign_cluster(fid, sig.digest, sig, title="t")  # re-assigning does not count twice
    with Store(tmp_path / "store.sqlite") as store:
        assert store.new_findings() == []
        [cluster] = store.clusters()
        assert (cluster.cluster_id, cluster.count, cluster.signature, cluster.representative) == (sig.digest, 1, sig, fid)
        assert store.cluster(sig.digest[:5]) == cluster  # a unique prefix finds it
        assert store.get_meta("schema_version") == "1"


def test_clustering_joins_equal_digests_and_near_identical_wrong_outputs_only():
    from nnforge.core.signature import Signature

    a = Signature("mismatch", "inductor", "inductor", "k1", ops=("sin", "add", "mul", "relu", "exp", "tanh", "neg"))
    b = Signature("mismatch", "inductor", "inductor", "k2", ops=("sin", "add", "mul", "relu", "exp", "tanh", "abs"))
    c = Signature("crash", "inductor", "inductor", "k3", ops=a.ops)
    d = Signature("crash", "inductor", "inductor", "k4", ops=a.ops)
    from nnforge.triage.cluster import ClusterRecord

    records = [ClusterRecord(a.digest, a, 1), ClusterRecord(c.digest, c, 1)]
    assert choose_cluster(a, records).how == "digest"
    joined = choose_cluster(b, records)  # one op of seven differs: similarity 6/7 ≥ 0.85
    assert (joined.cluster_id, joined.how) == (a.digest, "similar")
    assert choose_cluster(b, records, threshold=None).is_new  # tie-breaker off
    assert choose_cluster(d, records).is_new  # crashes never join by similarity
    assert pairwise_precision_recall({1: "x", 2: "x", 3: "y"}, {1: "p", 2: "p", 3: "p"}) == (1 / 3, 1.0)


def test_small_values_are_written_as_literals_that_rebuild_them_bit_for_bit():
    import torch

    from nnforge.triage.repro import literal

    values = (torch.randn(2, 3), torch.randn(4).half(), torch.randn(3).bfloat16(), torch.tensor([-0.0, 1e-30, 3.4e38]),
              torch.randint(-5, 5, (3,)), torch.tensor(True), torch.empty(0, 2), torch.randn(2, requires_grad=True), 3)
    back = eval(literal(values), {"torch": torch})
    for a, b in zip(values, back):
        if isinstance(a, torch.Tensor):
            assert (a.dtype, a.shape, a.requires_grad) == (b.dtype, b.shape, b.requires_grad)
            assert torch.equal(a.detach(), b.detach()) and torch.equal(a.detach().signbit(), b.detach().signbit())
        else:
            assert a == b
    assert "1.5409960746765137" not in literal(torch.tensor([1.5409960746765137]))  # shortest float32 decimals
    assert literal(torch.tensor([float("nan")])) is None and literal(torch.randn(3, 2).t()) is None  # -> base64


# -- kill safety ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_finding_whose_reduction_fails_stays_new_with_the_error(tmp_path, pool, settings):
    """Findings are written first: when reduction raises (here: the recorded bug no longer
    reproduces on the case), the finding is still in the store, `new`, with the reason."""
    from nnforge.core.verdict import Verdict

    folder = TestCase(program=PROGRAM_B.replace("torch.sin(h)", "torch.exp(h)")).save(tmp_path / "case")
    stale = Verdict(target="faulty_crash:sin", symptom=Symptom.CRASH, rung="faulty_crash", exc_type="RuntimeError")
    with Store(tmp_path / "camp") as store:
        fid = store.add_finding("stale", stale, case_folder=folder)
        [outcome] = triage_findings(store, pool, tmp_path / "camp", settings=settings, reduce=True, budget_s=20)
        assert outcome.error and "does not show the bug" in outcome.error
    with Store(tmp_path / "camp") as store:
        [f] = store.new_findings()
        assert f.finding_id == fid and f.status == "new" and "does not show the bug" in f.error
        assert store.clusters() == []


# -- clustering ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_twenty_different_cases_hitting_one_planted_crash_end_in_one_cluster(tmp_path, pool, settings):
    cases = _cases_with_op("sin", 20)
    assert len({c.program for c in cases}) == 20
    for i, case in enumerate(cases):
        case.save(tmp_path / "inbox" / f"c{i:02d}")
    camp = tmp_path / "camp"
    with Store(camp) as store:
        ids = import_cases(store, pool, tmp_path / "inbox", camp, ["faulty_crash:sin"], settings)
        assert len(ids) == 20  # every case holds aten.sin, so every case crashes
        outcomes = triage_findings(store, pool, camp, settings=settings, reduce=True, budget_s=20, per_key=2)
        assert not [o.error for o in outcomes if o.error]
        [cluster] = store.clusters()
        assert cluster.count == 20 and cluster.signature.symptom == "crash"
        assert sum(o.is_new_cluster for o in outcomes) == 1
        # only the key's first two were reduced; the other 18 joined their cluster unreduced
        statuses = sorted(f.status for f in store.findings())
        assert statuses == ["attached"] * 18 + ["triaged"] * 2
        assert sum(1 for f in store.findings() if f.reduced_folder) == 2
        assert cluster.repro_status == "reproduced"  # its repro.py crashed (exit 1) in a fresh process
    folder = camp / "findings" / cluster.cluster_id
    assert {p.name for p in folder.iterdir()} >= {"case", "repro.py", "report.md", "gh_command.sh", "cluster.json"}
    assert len(json.loads((folder / "cluster.json").read_text())["findings"]) == 20
    # the report quotes what repro.py printed when triage ran it, under the pt2 template's headings
    report = (folder / "report.md").read_text()
    assert "### 🐛 Describe the bug" in report and "### Error logs" in report and "### Versions" in report
    assert "Output of `python repro.py` in a fresh process" in report
    assert "BUG PRESENT" in report and "faulty_crash: no lowering for aten.sin" in report
    assert (folder / "repro_output.txt").read_text().startswith("BUG PRESENT")


@pytest.mark.slow
def test_three_planted_faults_end_in_three_clusters_through_the_cli(tmp_path):
    inbox = tmp_path / "inbox"
    # inference calls, as the generator makes them: with grad on, AOTAutograd takes its training
    # path for A (it has a parameter) and its inference path for B, and the planted abort's
    # frames differ by that path
    TestCase(program=PROGRAM_A, calls=INFERENCE_CALL).save(inbox / "a")
    TestCase(program=PROGRAM_B, calls=INFERENCE_CALL).save(inbox / "b")
    camp = tmp_path / "camp"
    env = {"NNFORGE_VALUE_SEARCH_BUDGET_MS": "100", "NNFORGE_LLM_PROVIDER": "none",
           "NNFORGE_INDUCTOR_CACHE_DIR": os.environ["TORCHINDUCTOR_CACHE_DIR"]}
    result = CliRunner().invoke(app, ["triage", str(camp), "--import", str(inbox), "--target", THREE_FAULTS,
                                      "--no-reduce", "--json"], env=env)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert len(out["outcomes"]) == 5  # A: all three faults; B: crash and segv (it has no add)
    assert len(out["clusters"]) == 3, out["clusters"]
    counts = sorted(c["count"] for c in out["clusters"])
    assert counts == [1, 2, 2]
    with Store(camp) as store:
        symptoms = sorted(c.signature.symptom for c in store.clusters())
        assert symptoms == ["crash", "mismatch", "segfault"]
        truth = {f.finding_id: f.target for f in store.findings()}
        predicted = {f.finding_id: f.signature_digest for f in store.findings()}
        assert pairwise_precision_recall(truth, predicted) == (1.0, 1.0)
        perturbed = next(c for c in store.clusters() if c.signature.symptom == "mismatch")

    # `nnforge report` regenerates and prints that cluster's draft
    rep = CliRunner().invoke(app, ["report", perturbed.cluster_id[:6], "--campaign", str(camp), "--no-llm"], env=env)
    assert rep.exit_code == 0, rep.output
    assert perturbed.title in rep.stdout and "module: correctness (silent)" in rep.stdout
    missing = CliRunner().invoke(app, ["report", "nosuchcluster", "--campaign", str(camp)], env=env)
    assert missing.exit_code == 2


# -- repro and report ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_reduced_repro_fails_in_a_fresh_process_with_the_fault_and_passes_on_healthy_backends(tmp_path, pool, settings):
    from nnforge.triage.reducer import Reducer

    checked = Oracle(pool, ["faulty_crash:sin", "faulty_perturb:add"], 100.0).check(TestCase(program=PROGRAM_A))
    crash, perturb = checked.verdicts
    assert crash.symptom is Symptom.CRASH and perturb.symptom is Symptom.MISMATCH
    reduced = Reducer(pool, "faulty_crash:sin", max_queries=30, time_budget_s=25).reduce(checked.case, crash)
    assert reduced.verified and reduced.after["ops"] < reduced.before["ops"]

    scripts = {
        "crash_faulty": write_repro(reduced.case, reduced.verdict),
        "crash_on_eager": write_repro(reduced.case, reduced.verdict, target="eager"),  # healthy Dynamo
        "crash_on_inductor": write_repro(reduced.case, reduced.verdict, target="inductor"),  # a real target
        "perturb_faulty": write_repro(checked.case, perturb),
    }
    assert "from nnforge" not in scripts["crash_on_inductor"] and "import nnforge" not in scripts["crash_on_inductor"]
    assert "from nnforge" in scripts["crash_faulty"]  # a planted fault needs nnforge, and says so
    procs = {}
    for name, text in scripts.items():
        (tmp_path / name).mkdir()
        path = tmp_path / name / "repro.py"
        path.write_text(text)
        procs[name] = _run_repro(path)
    outs = {name: (p.wait(timeout=240), p.stdout.read()) for name, p in procs.items()}
    assert outs["crash_faulty"][0] == 1, outs["crash_faulty"][1]
    assert "RuntimeError: faulty_crash: no lowering for aten.sin" in outs["crash_faulty"][1]
    assert "torch " + __import__("torch").__version__ in outs["crash_faulty"][1]  # prints versions
    assert outs["crash_on_eager"][0] == 0, outs["crash_on_eager"][1]
    assert outs["crash_on_inductor"][0] == 0, outs["crash_on_inductor"][1]
    assert outs["perturb_faulty"][0] == 1, outs["perturb_faulty"][1]
    assert "max abs err" in outs["perturb_faulty"][1] and "RMSE vs float64" in outs["perturb_faulty"][1]

    # the report of the wrong-output finding: title, repro, numbers, rung, versions, labels
    draft = draft_report(checked.case, perturb, repro=scripts["perturb_faulty"], cluster_id="abc", count=3)
    body = draft.body
    assert body.startswith(f"# {draft.title}") and "wrong result" in draft.title
    # the minimal program inline; the long repro attached as a file, not pasted
    assert checked.case.program.strip() in body
    assert scripts["perturb_faulty"].rstrip() not in body and "attached as `repro.py`" in body
    assert f"{perturb.max_abs_err:.6g}" in body and f"{perturb.fp64_rmse_actual:.6g}" in body
    assert "**`faulty_perturb` mismatch**" in body and "`dynamo` pass" in body
    assert f"torch {perturb.versions['torch']}" in body
    assert {"oncall: pt2", "topic: fuzzer", "module: correctness (silent)"} <= set(draft.labels)
    assert "cluster `abc`, 3 findings" in body

    # an LLM rewrite is accepted only if it keeps every code block, number and version
    prose = body.replace("Compiling this model", "When this model is compiled")
    assert accept_rewrite(body, prose)
    assert not accept_rewrite(body, body.replace(f"{perturb.max_abs_err:.6g}", "0.01"))
    assert not accept_rewrite(body, body.replace(checked.case.program.strip(), "print('hi')"))
    assert rewrite_prose(draft, load_settings(llm_provider="none")) == draft  # no LLM: the template stands


def _replaying_client(cache_dir: Path, system: str, user: str, reply: str | None):
    """A real LLMClient with no server behind it: it answers only from its disk cache, as on the
    rerun of a campaign; anything else fails as an unreachable server would."""
    from nnforge.core.llm import LLMClient, cache_key

    client = LLMClient(None, model="replay", temperature=0.0, cache_dir=cache_dir, token_budget=10**6,
                       max_retries=0, backoff_s=0.0)
    if reply is not None:
        client._write_cache(cache_key("replay", 0.0, system, user), "report", reply, 10)
    return client


def test_llm_prose_is_used_only_when_it_keeps_code_numbers_and_versions(tmp_path):
    from nnforge.core.verdict import Verdict
    from nnforge.core.prompt_files import prompt_text

    REWRITE_SYSTEM = prompt_text("report/rewrite.md")

    verdict = Verdict(target="inductor", symptom=Symptom.MISMATCH, rung="inductor", call_index=0, output_index=0,
                      max_abs_err=0.0262111, max_rel_err=0.110134, fp64_rmse_actual=0.0136668,
                      fp64_rmse_eager=2.96316e-08, versions={"torch": "2.13.0+cpu"})
    case = TestCase(program=PROGRAM_A)
    draft = draft_report(case, verdict, repro=write_repro(case, verdict))
    kept = draft.body.replace("Compiling this model with", "When this model is compiled with")
    changed = draft.body.replace("0.0262111", "0.03")
    for reply, used in ((kept, True), (changed, False), (None, False)):
        client = _replaying_client(tmp_path / str(used) / str(reply is None), REWRITE_SYSTEM, draft.body, reply)
        out = rewrite_prose(draft, client=client)
        # an accepted rewrite ends with NNForge's own line naming the model, whatever the model wrote there
        declared = kept.replace(TEMPLATE_PROSE, llm_prose_line("replay"))
        assert (out.body == declared and out.prose_by == "llm:replay") if used else out == draft
    assert draft.body.rstrip().endswith(TEMPLATE_PROSE)


@pytest.mark.slow
def test_a_cluster_whose_repro_does_not_reproduce_is_listed_apart_as_unreproduced(tmp_path, pool, settings):
    """A finding claimed against a program inductor computes correctly: its repro.py exits 0 in
    a fresh process, so the cluster is not on the morning list but under "Not listed", with why."""
    from nnforge.agent.store import CampaignStore
    from nnforge.agent.summary import write_summary
    from nnforge.core.verdict import Verdict

    folder = TestCase(program=PROGRAM_B).save(tmp_path / "case")
    claimed = Verdict(target="inductor", symptom=Symptom.CRASH, rung="inductor", exc_type="RuntimeError",
                      exc_message="a crash that never happens")
    camp = tmp_path / "camp"
    with CampaignStore(camp) as store:
        store.add_finding("claimed", claimed, case_folder=folder)
        [outcome] = triage_findings(store, pool, camp, settings=settings, reduce=False)
        assert outcome.repro == "unreproduced"
        [cluster] = store.clusters()
        assert cluster.repro_status == "unreproduced" and "saw no bug" in cluster.repro_detail
        text = write_summary(camp, store).read_text()
    listed, _, unlisted = text.partition("## Not listed")
    assert "_none found_" in listed and cluster.title in unlisted and "unreproduced" in unlisted


def test_a_repro_given_by_a_relative_path_runs_from_its_own_temp_cwd(tmp_path):
    """Campaigns started with a relative -o hand triage relative paths; the fresh process that
    verifies a repro runs in a temp cwd, so the path must not be taken relative to that."""
    from nnforge.triage.pipeline import run_repro_once

    (tmp_path / "camp").mkdir()
    (tmp_path / "camp" / "repro.py").write_text("import sys\nprint('BUG PRESENT: planted')\nsys.exit(1)\n")
    code, out = run_repro_once(Path("camp") / "repro.py")  # the suite runs each test in tmp_path
    assert code == 1 and "BUG PRESENT" in out, out
