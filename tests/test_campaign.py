"""`nnforge campaign`: real campaigns with short budgets, real workers, real compilers.

The slow tests run the command as a subprocess (as a person would), read the store with plain
sqlite3, and kill the campaign with SIGKILL where the behaviour under a kill is the point.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nnforge.agent.campaign_config import CampaignConfig, parse_budget
from nnforge.agent.cli import _register_commands, app
from nnforge.agent.lock import CampaignLock, CampaignLocked
from nnforge.agent.scheduler import SEED, Arm, Scheduler
from nnforge.core.testcase import TestCase
from nnforge.oracle.value_bins import FAMILIES

_register_commands()
runner = CliRunner()
NNFORGE = [sys.executable, "-m", "nnforge.agent.cli"]


def _campaign(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*NNFORGE, "campaign", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _query(folder: Path, sql: str, args: tuple = ()) -> list[tuple]:
    db = sqlite3.connect(f"file:{folder / 'store.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


# -- fast: options and start-up checks ---------------------------------------------------------------------------
def test_budget_strings_read_as_seconds():
    assert parse_budget("60s") == 60
    assert parse_budget("10m") == 600
    assert parse_budget("8h") == 8 * 3600
    assert parse_budget("1h30m") == 5400
    assert parse_budget("90") == 90
    for bad in ("", "soon", "1x", "h1", "0s"):
        with pytest.raises(ValueError):
            parse_budget(bad)


def test_an_unwritable_folder_is_refused_at_start_with_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # a folder below a file cannot be created, not even by root
    res = runner.invoke(app, ["campaign", "--budget", "60s", "--targets", "inductor", "-o", str(blocker / "camp")])
    assert res.exit_code == 2
    assert "cannot create the campaign folder" in res.output


def test_too_little_free_disk_space_is_refused_at_start_with_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("NNFORGE_CAMPAIGN_MIN_FREE_MB", str(10**12))  # more than any disk has
    res = runner.invoke(app, ["campaign", "--budget", "60s", "--targets", "inductor", "-o", str(tmp_path / "camp")])
    assert res.exit_code == 2
    assert "MB free on the disk" in res.output and "NNFORGE_CAMPAIGN_MIN_FREE_MB" in res.output
    assert not (tmp_path / "camp" / "store.sqlite").exists()


def test_a_held_lock_names_its_holder_and_is_released_when_the_holder_dies(tmp_path):
    # the holder is another process, so the lock is a real flock between processes
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from nnforge.agent.lock import CampaignLock; "
        f"l = CampaignLock({str(tmp_path)!r}); l.acquire(); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CampaignLocked, match=rf"in use by campaign pid {holder.pid} .*choose another -o"):
            CampaignLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    with CampaignLock(tmp_path) as lock:  # SIGKILL released it: no stale lock to delete by hand
        assert lock.held


def test_the_scheduler_favours_arms_that_showed_new_behaviour_and_round_trips_through_json():
    s = Scheduler(["generator"], ["B1", "I1"], ["inductor", "ort"], mutant_share=1.0, seed=3)
    good = Arm("generator", "I1", "ort")
    for _ in range(30):
        s.reward(good, 1.0)
        s.reward(Arm("generator", "B1", "inductor"), 0.0)
    picks = [s.pick().key for _ in range(200)]
    assert picks.count(good.key) > 120
    assert all(Arm.from_key(k).category != SEED for k in picks)  # mutant_share 1: mutants only
    assert s.novel(["sig:a", "sig:b"]) == ["sig:a", "sig:b"] and s.novel(["sig:a"]) == []
    again = Scheduler(["generator"], ["B1", "I1"], ["inductor", "ort"], mutant_share=1.0, seed=3)
    again.restore(json.loads(json.dumps(s.to_json())))
    assert again.to_json() == s.to_json()


def test_the_mutant_share_is_a_share_of_worker_time_whatever_each_kind_costs():
    """Mutants cost three times a seed test here: a share of tests (one in two) would give them 75% of
    the time; the split by time gives them what was asked, and a cost that changes mid-way (a bigger
    pack) moves the count of tests, not the time."""
    s = Scheduler(["generator"], ["B1", "G2"], ["inductor"], mutant_share=0.5, seed=7)
    cost = {False: 2.0, True: 6.0}
    spent = {False: 0.0, True: 0.0}
    for i in range(400):
        if i == 200:
            cost[False] = 4.0  # seed tests got twice as heavy
        arm = s.pick()
        s.made(arm)
        s.timed(arm, cost[arm.mutates])
        spent[arm.mutates] += cost[arm.mutates]
    assert abs(spent[True] / (spent[True] + spent[False]) - 0.5) < 0.05, spent
    restored = Scheduler(["generator"], ["B1", "G2"], ["inductor"], mutant_share=0.5, seed=7)
    restored.restore(json.loads(json.dumps(s.to_json())))
    assert restored.cost == s.cost and restored.spent_s() == s.spent_s()  # a resumed campaign keeps the split


def test_a_campaign_stored_with_the_old_mutate_prob_resumes_with_it_as_its_mutant_share():
    old = {k: v for k, v in CampaignConfig(out="x", budget_s=60.0).to_json().items() if k != "mutant_share"}
    assert CampaignConfig.from_json({**old, "mutate_prob": 0.3}).mutant_share == 0.3
    assert CampaignConfig.from_json(old).mutant_share == 0.5  # neither: the default


def test_when_no_mutant_can_be_made_the_split_falls_back_to_chance_and_seeds_go_on():
    s = Scheduler(["generator"], ["B1"], ["inductor"], mutant_share=0.9, seed=1)
    seed_arm = Arm("generator", SEED, "inductor")
    s.made(seed_arm)
    s.timed(seed_arm, 1.0)  # the seeds are far ahead of their share: every pick asks for a mutant
    kinds = []
    for _ in range(60):
        arm = s.pick()
        kinds.append(arm.mutates)
        if arm.mutates:
            s.missed(arm)  # no mutator could rewrite the seed
        else:
            s.made(arm)
            s.timed(arm, 1.0)
    assert all(kinds[:5]) and not all(kinds[5:])  # five misses in a row, then seeds are made again
    assert Scheduler(["generator"], [], ["inductor"], mutant_share=0.9).mutant_next() is False  # no categories


# -- slow: real campaigns ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_sixty_second_campaign_writes_store_stats_summary_and_report(tmp_path):
    from nnforge.agent.export_probe import export_versions
    from nnforge.core.export_table import ExportTable

    out = tmp_path / "camp"
    table = ExportTable(versions=export_versions())  # probed before: this campaign loads it, no probing
    table.record("log(int64)", {"export": 0, "ort": None, "tvm": None})
    table.save(tmp_path / "tables")
    t0 = time.monotonic()
    res = _campaign("--budget", "60s", "--targets", "inductor,ort", "--workers", "2", "--nodes", "5", "--llm", "none",
                    "-o", str(out), env={"NNFORGE_EXPORT_TABLE_DIR": str(tmp_path / "tables")})
    wall = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    assert wall < 60 + 15 + 45  # the budget, the drain, start and reports
    rows = _query(out, "SELECT case_id, target, symptom, source, category, t_search, t_oracle, elapsed_s FROM tests")
    assert rows, res.stdout
    assert {r[1] for r in rows} <= {"inductor", "ort"}
    assert all(r[3] == "generator" and r[4] and r[6] is not None and 0 <= r[7] <= 80 for r in rows)
    for case_id, target, symptom, *_ in rows:  # every test's case folder, with the verdict beside it
        folder = out / "cases" / case_id
        assert (folder / "program.py").is_file()
        verdicts = json.loads((folder / "verdicts.json").read_text())
        assert any(v["target"] == target and v["symptom"] == symptom for v in verdicts)
    stats = _query(out, "SELECT elapsed_s, tests, json FROM stats ORDER BY ts")
    assert len(stats) >= 5  # one about every 10 s
    assert stats[-1][1] == len(rows) and stats[-1][0] >= 60
    assert json.loads(stats[-1][2])["verdicts"]
    # what each test cost its workers, and what the workers were held for in all (tests and triage):
    # never more than a test's wall time on the oracle's thread, which also waits for a free worker
    costs = _query(out, "SELECT t_worker, t_search + t_oracle FROM tests")
    assert all(w is not None and 0 < w <= wall_s + 0.5 for w, wall_s in costs), costs
    busy = json.loads(stats[-1][2])["health"]["busy_s"]
    assert sum(w for w, _ in costs) <= busy + 0.5 <= 2 * (60 + 15 + 45), (busy, costs)
    meta = dict(_query(out, "SELECT key, value FROM meta"))
    assert meta["campaign_status"] == "finished"
    # the one refused probe blocks its instance, log(int64), and its operator, log (every probe of it refused)
    assert "export table of 1 probes" in meta["export_table"] and "ort 2" in meta["export_table"]
    assert "ONNX generation" in (out / "summary.md").read_text()
    # how the workers built Inductor's kernels is said where the reader of the morning list sees it
    assert "- **inductor kernels**: one C++ compiler run per graph" in (out / "summary.md").read_text()
    assert json.loads(meta["scheduler_state"])["policy"] == "thompson-beta"
    bugs = _query(out, "SELECT COUNT(*) FROM tests WHERE symptom NOT IN ('pass', 'invalid')")[0][0]
    assert _query(out, "SELECT COUNT(*) FROM findings")[0][0] == bugs  # every bug verdict is a finding
    assert (out / "summary.md").is_file() and (out / "report.html").is_file()
    assert "tests this run" in res.stdout
    # Dynamo's record is stored with every judged torch.compile test (a JSON list, maybe empty), never with ORT's
    records = _query(out, "SELECT target, symptom, graph_breaks, recompiles FROM tests")
    assert all((gb is None) == (t == "ort") for t, s, gb, _ in records if s == "pass")
    assert all(isinstance(json.loads(rc), list) for t, s, _, rc in records if t == "inductor" and s == "pass")
    assert "## Graph breaks and recompiles" in (out / "summary.md").read_text()
    # value bins: every test drew its values from a bin the scheduler picked, recorded with it
    bins = _query(out, "SELECT value_bin, value_bin_kept, folder FROM tests")
    assert all(b in FAMILIES for b, _, _ in bins)
    for b, kept, folder in bins:
        meta_json = json.loads((Path(folder) / "meta.json").read_text())
        assert meta_json["value_bin"] == b
        if kept is not None:  # values were chosen: what the search did with the bin is recorded too
            assert meta_json["values"]["bin"] == b and meta_json["values"]["kept"] == bool(kept)
    assert "## Yield per value bin" in (out / "summary.md").read_text()
    kinds = _query(out, "SELECT target, calls_kind FROM tests")
    assert all(k == "forward" for t, k in kinds if t == "ort")  # ONNX targets stay forward-only
    assert {k for _, k in kinds} <= {"forward", "forward + backward"}
    assert set(json.loads(meta["scheduler_state"])["bins"]) == set(FAMILIES)


def test_single_call_mutants_of_one_arm_share_a_test_and_sequences_run_alone(tmp_path):
    """--pack-mutants k: a single-call mutant is packed with up to k - 1 more of its arm's category
    (mutators/pack.py); invocation sequences and graph-break or random rewrites stay alone."""
    from nnforge.agent.campaign import Campaign
    from nnforge.mutators.base import all_mutators

    def tests(out: str, k: int) -> list:
        cfg = CampaignConfig(out=out, budget_s=60.0, targets=["inductor"], llm="none", mutant_share=1.0,
                             pack_mutants=k, nodes=6, backward_share=0.0, seed=5)
        run = Campaign(cfg)
        run._open()
        try:
            return [got for got in (run._next_test() for _ in range(24)) if got is not None]
        finally:
            if run._probe_pool is not None:
                run._probe_pool.close()
            run.store.close()
            run.lock.release()

    made = tests(str(tmp_path / "packed"), 3)
    packs = [(t, c) for t, c in made if c.meta.get("pack_members")]
    assert len(packs) >= len(made) // 3, [t.mutator for t, _ in made]
    offline = all_mutators()
    for test, case in packs:
        members = case.meta["pack_members"]
        assert 2 <= len(members) <= 3 and len(case.calls) == 1 and case.meta["pack"]
        assert {offline[m["meta"]["mutator"]].category for m in members} == {test.category}
        assert all(offline[m["meta"]["mutator"]].packable for m in members)
        assert TestCase.load(test.folder).meta["pack_members"] == members  # saved with the test
    assert all(len(c.calls) == 1 for t, c in made if c.meta.get("pack_members"))
    assert any(len(c.calls) > 1 for _, c in made)  # sequences were made, and alone
    assert not any(c.meta.get("pack_members") for _, c in tests(str(tmp_path / "alone"), 1))


@pytest.mark.slow
def test_kill_9_then_resume_keeps_every_recorded_test_and_the_seed_counter_goes_on(tmp_path):
    out = tmp_path / "camp"
    args = ["--targets", "aot_eager", "--workers", "2", "--nodes", "4", "--no-triage"]
    proc = subprocess.Popen([*NNFORGE, "campaign", "--budget", "10m", *args, "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            time.sleep(1)
            if (out / "store.sqlite").exists() and _query(out, "SELECT COUNT(*) FROM tests")[0][0] >= 3:
                break
        else:
            pytest.fail("the campaign recorded no 3 tests in 150 s")
        # a second campaign on the folder is refused while the first runs
        second = _campaign("--budget", "60s", "--targets", "aot_eager", "-o", str(out), timeout=120)
        assert second.returncode == 2
        assert f"in use by campaign pid {proc.pid}" in second.stderr
        workers = _children(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for pid in workers:  # the killed campaign's sandbox workers (their own sessions) go too
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    before = set(_query(out, "SELECT case_id, target, verdict_json FROM tests"))
    # in flight at the kill, or made ahead while every worker was busy: all must run on resume
    queued = set(_query(out, "SELECT case_id, target FROM queue WHERE status = 'queued'"))
    last_seed = _query(out, "SELECT MAX(seed_no) FROM queue")[0][0]
    last_test = _query(out, "SELECT MAX(test_no) FROM queue")[0][0]
    elapsed = float(dict(_query(out, "SELECT key, value FROM meta"))["campaign_elapsed_s"])

    res = _campaign("--resume", str(out), "--budget", f"{elapsed + 25:.0f}s", timeout=200)
    assert res.returncode == 0, res.stdout + res.stderr
    after = set(_query(out, "SELECT case_id, target, verdict_json FROM tests"))
    assert before <= after  # nothing recorded before the kill was lost or changed
    assert queued <= {(c, t) for c, t, _ in after}, queued
    new = _query(out, "SELECT seed_no, case_id FROM queue WHERE test_no > ?", (last_test,))
    assert new, "the resumed campaign ran no new test"
    assert min(s for s, _ in new) > last_seed  # the seed counter continued
    ids = _query(out, "SELECT case_id, target FROM queue")
    assert len(ids) == len(set(ids))
    assert _query(out, "SELECT COUNT(*) FROM tests")[0][0] > len(before)
    meta = dict(_query(out, "SELECT key, value FROM meta"))
    runs = json.loads(meta["campaign_runs"])
    assert len(runs) == 2 and runs[1]["resumed"] and runs[1]["elapsed_at_start"] >= elapsed - 0.01
    assert float(meta["campaign_elapsed_s"]) >= elapsed + 20  # elapsed time accumulates across runs


@pytest.mark.slow
def test_a_target_that_kills_its_worker_every_time_does_not_stop_the_campaign(tmp_path):
    out = tmp_path / "camp"
    res = _campaign("--budget", "20s", "--targets", "faulty_segv", "--workers", "2", "--nodes", "4", "--no-triage",
                    "-o", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    symptoms = dict(_query(out, "SELECT symptom, COUNT(*) FROM tests GROUP BY symptom"))
    # every test that reached the target killed its worker (a test whose eager run cannot be judged,
    # 'invalid', never reaches it)
    assert symptoms.get("segfault", 0) >= 2 and set(symptoms) <= {"segfault", "invalid"}, symptoms
    assert _query(out, "SELECT COUNT(*) FROM findings")[0][0] == symptoms["segfault"]
    restarts, segfaults = _query(out, "SELECT worker_restarts, segfaults FROM stats ORDER BY ts DESC LIMIT 1")[0]
    # each crash killed its own forked process only: the warm template served the next test
    assert segfaults >= symptoms["segfault"] and restarts <= 1
    assert "segfaults" in res.stdout


@pytest.mark.slow
def test_the_ray_executor_runs_tests_in_ray_tasks_and_the_driver_writes_the_store(tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "camp"
    res = _campaign("--budget", "20s", "--targets", "aot_eager", "--workers", "1", "--nodes", "4", "--no-triage",
                    "--executor", "ray", "-o", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    rows = _query(out, "SELECT case_id, symptom FROM tests")
    judged = [cid for cid, s in rows if s != "invalid"]
    assert judged, res.stdout
    assert all((out / "cases" / cid / "inputs.pt").is_file() for cid in judged)  # values came back from the task
    stats = json.loads(_query(out, "SELECT json FROM stats ORDER BY ts DESC LIMIT 1")[0][0])
    assert stats["executor"] == "ray" and stats["health"]["calls"] >= 2 * len(rows)


# -- Dynamo's graph breaks and recompiles: reported per test, rewarded, stored, reported ---------------------------
GRAPH_BREAK_PROGRAM = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        y = x.sin()
        print("a graph break")
        if y.sum() > 0:  # data-dependent branch: a second break
            return y * 2
        return y - 1

def make_inputs():
    return (torch.randn(3, 4),)
'''


def test_graph_breaks_and_recompiles_reach_the_result_the_scheduler_the_store_and_the_reports(tmp_path):
    import torch

    from nnforge.agent.novelty import behaviours_of, compiler_record
    from nnforge.agent.store import CampaignStore, QueuedTest
    from nnforge.agent.report_data import load_view
    from nnforge.agent.report_html import render_report
    from nnforge.agent.summary import render_summary
    from nnforge.core.calls import CallStep, InputChange
    from nnforge.core.testcase import TestCase
    from nnforge.oracle.oracle import Oracle
    from nnforge.oracle.sandbox import WorkerPool

    calls = (CallStep(), CallStep(inputs=(InputChange(index=0, shape=(5, 4)),)))  # the second call changes shape
    case = TestCase(program=GRAPH_BREAK_PROGRAM, inputs=(torch.ones(3, 4),), calls=calls)
    plain = TestCase(program=GRAPH_BREAK_PROGRAM.replace('        print("a graph break")\n', "")
                     .replace("if y.sum() > 0:", "if True:"), inputs=(torch.ones(3, 4),))
    with WorkerPool(size=1, timeout_s=120) as pool:
        oracle = Oracle(pool, ["aot_eager"])
        result = oracle.check(case)
        quiet = oracle.check(plain)
    assert result.verdicts[0].symptom.value == "pass", result.verdicts[0].detail
    breaks, recompiles = result.graph_breaks("aot_eager"), result.recompiles("aot_eager")
    assert any("print" in b for b in breaks), breaks
    assert any(b.startswith("Data-dependent branching") for b in breaks), breaks
    assert any("size mismatch" in r and "'x'" in r for r in recompiles), recompiles
    assert all(len(x) <= 160 and "\n" not in x for x in breaks + recompiles)  # short strings
    assert quiet.graph_breaks("aot_eager") == [] and quiet.recompiles("aot_eager") == []

    # the scheduler is paid for a reason it has not seen, once
    found = behaviours_of(result, case)
    assert any(b.startswith("gb:") and "print" in b for b in found) and any(b.startswith("rc:") for b in found)
    sched = Scheduler(["generator"], [], ["aot_eager"], mutant_share=0.0, seed=0)
    assert sched.novel(found) and not sched.novel(behaviours_of(result, case)) and not behaviours_of(quiet, plain)

    # stored with the test, and the reports list the top reasons
    store = CampaignStore(tmp_path / "camp")
    for no, (c, r) in enumerate(((case, result), (plain, quiet))):
        test = QueuedTest(test_no=no, case_id=c.case_id, target="aot_eager", folder=str(tmp_path / c.case_id),
                          source="generator", mutator=None, category=SEED, arm="generator|seed|aot_eager",
                          seed_no=no, t_generate=0.0, t_mutate=0.0)
        store.enqueue(test)
        store.record_verdict(test, r.verdicts[0], t_search=0.0, t_oracle=1.0, elapsed_s=1.0, novel=True,
                             compiler=compiler_record(r, "aot_eager"))
    store.close()
    stored = _query(tmp_path / "camp", "SELECT graph_breaks, recompiles FROM tests ORDER BY test_no")
    assert json.loads(stored[0][0]) == breaks and json.loads(stored[0][1]) == recompiles
    assert json.loads(stored[1][0]) == [] and json.loads(stored[1][1]) == []
    view = load_view(tmp_path / "camp")
    assert view.compiler.tests == 2 and view.compiler.with_graph_breaks == 1 and view.compiler.with_recompiles == 1
    assert any("print" in r.reason for r in view.compiler.graph_breaks)
    summary = render_summary(view)
    assert "## Graph breaks and recompiles" in summary and "size mismatch" in summary
    assert "Graph breaks and recompiles" in render_report(view) and "Failed to trace builtin operator" in render_report(view)


@pytest.mark.slow
def test_triage_on_two_threads_shares_the_workers_and_leaves_nothing_waiting(tmp_path):
    out = tmp_path / "camp"
    res = _campaign("--budget", "45s", "--targets", "faulty_crash:sin|cos", "--workers", "2", "--nodes", "4",
                    "--llm", "none", "--triage-budget-s", "10", "-o", str(out),
                    env={"NNFORGE_TRIAGE_WORKERS": "2", "NNFORGE_TRIAGE_RESERVE_S": "15",
                         # a cold compile cache on a loaded machine: the findings of the last
                         # seconds still get their reduction and repro check after the budget
                         "NNFORGE_TRIAGE_AFTER_BUDGET_S": "120"})
    assert res.returncode == 0, res.stdout + res.stderr
    statuses = dict(_query(out, "SELECT status, COUNT(*) FROM findings GROUP BY status"))
    assert statuses and statuses.get("new", 0) == 0, statuses  # each reduced or attached to its key's cluster
    assert statuses.get("triaged", 0) >= 1
    clusters = _query(out, "SELECT title, json_extract(signature_json, '$.rung'), json_extract(signature_json, "
                           "'$.symptom') FROM clusters")
    planted = [title for title, rung, symptom in clusters if rung == "faulty_crash" and symptom == "crash"]
    # sin and cos: one crash each, whatever the programs around them. The backend is aot_autograd
    # apart from its planted crash, so random programs also find what torch itself gets wrong
    # (cold runs found a wrong gradient through a grad-mode toggle, and a Dynamo-rung crash):
    # those are other clusters, blamed elsewhere or with another symptom.
    assert 1 <= len(planted) <= 2 and all("no lowering for aten." in t for t in planted), clusters


@pytest.mark.slow
def test_in_the_triage_reserve_workers_that_triage_does_not_hold_go_on_testing(tmp_path):
    # every graph disagrees (faulty_perturb without an op), so findings wait for a reduction from
    # the first tests on, and the reserve (the last 34 of 40 s) begins as soon as one is recorded;
    # triage may take one worker (by default it would take both while that many findings wait)
    out = tmp_path / "camp"
    res = _campaign("--budget", "40s", "--targets", "faulty_perturb", "--workers", "2", "--nodes", "4",
                    "--llm", "none", "--triage-budget-s", "15", "--plain", "-o", str(out),
                    env={"NNFORGE_TRIAGE_RESERVE_S": "34", "NNFORGE_TRIAGE_RESERVE_SHARE": "0.85",
                         "NNFORGE_TRIAGE_MAX_WORKERS": "1",
                         "NNFORGE_TRIAGE_AFTER_BUDGET_S": "0"})  # the reserve is under test, not what follows it
    assert res.returncode == 0, res.stdout + res.stderr
    said = [ln for ln in res.stdout.splitlines() if "s left: triage finishes" in ln]
    assert said and "tests go on on 1 of 2 workers" in said[0], res.stdout
    reserve_from = 40 - float(said[0].split(" s left:")[0].split()[-1])
    # a faulty_perturb test takes a second or two: one with a verdict 10 s into the reserve started in it
    later = _query(out, "SELECT COUNT(*) FROM tests WHERE elapsed_s > ?", (reserve_from + 10,))[0][0]
    assert later >= 2, (reserve_from, later, res.stdout)


@pytest.mark.slow
def test_while_findings_wait_triage_takes_every_worker_and_testing_resumes_once_they_are_triaged(tmp_path):
    # sin and cos crash: the first findings of each key wait for a reduction, more than one worker
    # can keep up with, so triage takes both; once two of a key are reduced the rest attach at
    # once, the queue drains and both workers test again
    out = tmp_path / "camp"
    res = _campaign("--budget", "90s", "--targets", "faulty_crash:sin|cos", "--workers", "2", "--nodes", "4",
                    "--llm", "none", "--triage-budget-s", "8", "--plain", "-o", str(out),
                    env={"NNFORGE_TRIAGE_RESERVE_S": "0", "NNFORGE_TRIAGE_AFTER_BUDGET_S": "60"})
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    took = [ln for ln in lines if "it takes 2 of 2 workers until the queue drains" in ln]
    assert took and "wait for a reduction" in took[0], res.stdout

    def clock(line: str) -> float:
        h, m, s = line.split()[0].split(":")
        return int(h) * 3600 + int(m) * 60 + int(s)

    started = next(clock(ln) for ln in lines if "campaign started" in ln)
    took_at = clock(took[0]) - started
    statuses = dict(_query(out, "SELECT status, COUNT(*) FROM findings GROUP BY status"))
    assert statuses.get("new", 0) == 0 and statuses.get("attached", 0) >= 1, (statuses, res.stdout)
    # testing resumed: tests were judged well after triage took both workers
    assert _query(out, "SELECT COUNT(*) FROM tests WHERE elapsed_s > ?", (took_at + 10,))[0][0] >= 2, res.stdout


def test_triage_wants_more_workers_as_findings_wait_and_all_of_them_when_the_backlog_would_outlast_the_budget(tmp_path):
    from nnforge.agent.campaign_config import CampaignConfig
    from nnforge.agent.triage_thread import TriageGroup

    left = [3600.0]
    group = TriageGroup(tmp_path, object(), CampaignConfig(out=str(tmp_path), budget_s=3600), lambda s: None,
                        most=4, time_left=lambda: left[0])
    wants = []
    for backlog in (0, 1, 2, 3, 5, 7, 40):
        group.backlog = backlog
        wants.append(group.wanted())
    assert wants == [1, 1, 1, 2, 3, 4, 4]
    group.backlog = 2
    group.reduced(60.0)  # 2 findings at 60 s on one worker: 2 min
    assert group.wanted() == 1 and group.busy() == 1 and "2 wait for a reduction, ≈ 2.0 min" in group.outlook()
    left[0] = 90.0  # the budget ends first: every worker triages
    assert group.wanted() == 4 and group.drain_s() == 30.0
    group.backlog = 0
    assert group.busy() == 0 and group.outlook() == ""
    # without shared workers (Ray) each thread would start one of its own: only the base
    assert TriageGroup(tmp_path, None, CampaignConfig(out=str(tmp_path), budget_s=60), lambda s: None, most=4).most == 1


@pytest.mark.slow
def test_findings_recorded_as_the_budget_ends_are_triaged_before_the_campaign_ends(tmp_path):
    # no triage reserve and a short budget: both workers test until the end, so the findings wait
    # for a reduction when the budget is spent; a crash on sin or cos is one key each: their first
    # two findings are reduced, the rest attach
    out = tmp_path / "camp"
    res = _campaign("--budget", "12s", "--targets", "faulty_crash:sin|cos", "--workers", "2", "--nodes", "4",
                    "--llm", "none", "--triage-budget-s", "8", "--mutant-share", "0", "--plain", "-o", str(out),
                    env={"NNFORGE_TRIAGE_RESERVE_S": "0", "NNFORGE_TRIAGE_AFTER_BUDGET_S": "90"})
    assert res.returncode == 0, res.stdout + res.stderr
    said = [ln for ln in res.stdout.splitlines() if "budget spent: triage finishes" in ln]
    assert said and "at most 90 s more" in said[0], res.stdout
    statuses = dict(_query(out, "SELECT status, COUNT(*) FROM findings GROUP BY status"))
    assert statuses.get("new", 0) == 0 and statuses.get("triaged", 0) >= 1, (statuses, res.stdout)
    # a finding leaves "new" when its cluster is chosen: its repro check must still run to the end
    repro = dict(_query(out, "SELECT cluster_id, repro_status FROM clusters"))
    assert repro and "unchecked" not in repro.values(), (repro, res.stdout)
    summary = (out / "summary.md").read_text()
    assert "## Waiting for triage" not in summary and "## Unique bugs" in summary


def test_onnx_targets_get_backend_category_arms_only():
    from nnforge.agent.campaign_config import categories_for_target

    s = Scheduler(["generator"], ["A1", "G2", "I1", "I2"], ["inductor", "ort"], mutant_share=1.0, seed=0,
                  categories_for=categories_for_target)
    arms = {(a.category, a.target) for a in map(Arm.from_key, s.arms)}
    assert {("A1", "inductor"), ("G2", "inductor"), ("I1", "inductor"), ("I1", "ort"), ("I2", "ort")} <= arms
    assert ("A1", "ort") not in arms and ("G2", "ort") not in arms  # Dynamo's families test no ONNX runtime
    picked = {(a.category, a.target) for a in (s.pick() for _ in range(200))}
    assert not any(t == "ort" and c in ("A1", "G2") for c, t in picked)
