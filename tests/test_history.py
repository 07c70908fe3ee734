"""History mining: bug-fix commits of a real (small) git repository and bug reports of an issue export
become seed TestCases that run in eager in real sandbox workers and carry where they came from."""

from __future__ import annotations

import ast
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from typer.testing import CliRunner

from history_fixture import EXPECTED, TEST_FILE, build_repo, write_issues
from nnforge.agent.cli import _register_commands, app
from nnforge.agent.cmd_history import ingest_issues, mine_history
from nnforge.core.settings import Settings
from nnforge.core.testcase import TestCase
from nnforge.generator.history_category import TAXONOMY_IDS, guess_category
from nnforge.generator.history_extract import extract_script, extract_test
from nnforge.generator.history_git import candidates_from_commit, fix_reasons, scan_history
from nnforge.generator.history_issues import code_blocks, load_issues
from nnforge.generator.history_llm import HistoryLLM
from nnforge.generator.history_seeds import category_prior, load_history_seeds, load_text_seeds, read_summary
from nnforge.mutators.validate import check_case

_register_commands()
runner = CliRunner()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("history") / "repo"
    shas = build_repo(root)
    return root, shas


@pytest.fixture(scope="module")
def mined(repo, pool, tmp_path_factory):
    root, shas = repo
    out = tmp_path_factory.mktemp("seeds")
    summary = mine_history(str(root), out, paths=("test/inductor",), call=pool.call, workers=pool.size)
    return out, summary


# -- finding fix commits ------------------------------------------------------------------------------------------
def test_fix_commits_are_found_by_message_or_by_a_regression_test_next_to_a_code_change(repo):
    root, shas = repo
    label = {sha: name for name, sha in shas.items()}
    scans = {label[s.sha]: s for s in scan_history(str(root), paths=["test/inductor"])}
    # Only commits touching test/inductor are walked: the feature, docs and other-path commits are not.
    assert set(scans) == {"initial", "clamp_fix", "sum_fix", "strides_fix", "test_only"}
    for name, scan in scans.items():
        assert scan.is_fix == EXPECTED[name]["fix"], (name, scan.fix_reasons)
    assert any("issue" in r for r in scans["sum_fix"].fix_reasons)
    assert scans["strides_fix"].fix_reasons == ("adds a regression test next to a code change",)
    assert [n for _, n in scans["strides_fix"].added_tests] == EXPECTED["strides_fix"]["tests"]
    assert "torch_like/lowering.py" in scans["clamp_fix"].files and TEST_FILE in scans["clamp_fix"].files

    everything = {label[s.sha]: s for s in scan_history(str(root))}
    assert set(everything) == set(shas)
    assert not everything["docs"].is_fix  # "Fix typo in README" touches documentation only
    assert not everything["cat_feature"].is_fix
    assert everything["misc_other_path"].is_fix  # without --paths, any test folder counts
    assert [s for s in scan_history(str(root), since="2024-01-06")] and \
        len(list(scan_history(str(root), since="2024-01-06"))) < len(shas)


def test_fix_reasons_need_more_than_a_pull_request_reference():
    assert fix_reasons("Add cat lowering (#555)", ["torch/x.py"], adds_test=False) == ()
    assert fix_reasons("Add cat lowering (#555)", ["test/test_a.py"], adds_test=True)
    assert fix_reasons("Resolves #12: wrong stride", ["torch/x.py"], adds_test=False)
    assert fix_reasons("Fix typo", ["docs/index.rst", "README.md"], adds_test=False) == ()


# -- extraction ---------------------------------------------------------------------------------------------------
def test_added_tests_become_model_and_make_inputs_programs_with_their_helpers(repo):
    root, shas = repo
    by_sha = {s.sha: s for s in scan_history(str(root), paths=["test/inductor"])}
    for name in ("clamp_fix", "sum_fix", "strides_fix"):
        cands = {c.case.meta["test_name"] if c.ok else c.seed_id: c for c in candidates_from_commit(by_sha[shas[name]])}
        want = EXPECTED[name].get("extracted", EXPECTED[name]["tests"])
        assert sorted(k for k, c in cands.items() if c.ok) == sorted(want), name
        for c in cands.values():
            if not c.ok:
                continue
            tree = ast.parse(c.case.program)
            assert {"Model", "make_inputs"} <= {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
            assert "torch.compile" not in c.case.program and "assertEqual" not in c.case.program
            assert "self.device" not in c.case.program
    sum_case = next(c for c in candidates_from_commit(by_sha[shas["sum_fix"]]) if c.ok).case
    assert "def _scale(x)" in sum_case.program and "SCALE = 2.0" in sum_case.program  # helper + its constant
    assert "TestCase" not in sum_case.program  # unused imports stay behind
    failed = [c for c in candidates_from_commit(by_sha[shas["strides_fix"]]) if not c.ok]
    assert len(failed) == 1 and "self.<method>" in failed[0].error


def test_extractor_handles_the_common_shapes_of_compiler_regression_tests(pool):
    src = '''
import torch
import torch.nn.functional as F

class TestShapes:
    def test_optimize_with_args_tuple(self):
        def fn(a, b):
            return F.gelu(a) @ b
        args = (torch.randn(3, 4), torch.randn(4, 2))
        opt = torch._dynamo.optimize("eager", nopython=True)(fn)
        self.assertEqual(opt(*args), fn(*args))

    def test_compile_with_backend_factory(self):
        mod = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        for dtype in [torch.float32, torch.float64]:
            x = torch.randn(2, 4, dtype=torch.float32)
            with torch.no_grad():
                res = torch.compile(backend="aot_eager")(mod)(x)

    def test_parametrized(self, dtype):
        pass
'''
    a = extract_test(src, "TestShapes.test_optimize_with_args_tuple")
    b = extract_test(src, "TestShapes.test_compile_with_backend_factory")
    assert a.ok and a.pattern == "compile-call" and "def forward(self, a, b)" in a.program
    assert b.ok and "torch.nn.Sequential" in b.program
    assert "parametrized" in extract_test(src, "TestShapes.test_parametrized").error
    script = extract_script('''
import torch
def f(x):
    return torch.sin(x) + 1
x = torch.randn(5)
print(torch.compile(f)(x))
''')
    assert script.ok and script.pattern == "compile-call"
    export = extract_script('''
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.softmax(x, dim=-1)
net = Net()
x = torch.randn(2, 3)
torch.onnx.export(net, (x,), "net.onnx")
''')
    assert export.ok and export.pattern == "compare-helper" and "onnx" not in export.program
    cases = [TestCase(program=e.program) for e in (a, b, script, export)]
    with ThreadPoolExecutor(2) as ex:
        checks = list(ex.map(lambda c: check_case(pool.call, c), cases))
    assert all(c.ok for c in checks), checks


# -- mining end to end --------------------------------------------------------------------------------------------
def test_mined_seeds_run_in_eager_and_carry_commit_files_and_category(mined, repo, pool):
    out, summary = mined
    root, shas = repo
    seeds = load_history_seeds(out)
    by_test = {s.meta["test_name"]: s for s in seeds}
    valid = [t for name in ("clamp_fix", "sum_fix", "strides_fix") for t in EXPECTED[name]["valid"]]
    assert sorted(by_test) == sorted(valid)
    for s in seeds:
        assert s.meta["origin"] == "history-git" and s.meta["validated"] is True
        assert s.meta["commit"] in shas.values()
        assert "torch_like/lowering.py" in s.meta["files_touched"]
        assert s.meta["category"] in TAXONOMY_IDS and s.meta["category_reason"]
    assert by_test["TestX.test_sum_empty_dim"].meta["category"] == EXPECTED["sum_fix"]["category"]
    assert by_test["TestX.test_repro_module"].meta["category"] == EXPECTED["strides_fix"]["category"]
    assert by_test["TestX.test_repro_module"].meta["commit"] == shas["strides_fix"]
    # An independent run of every written seed in a fresh sandbox call.
    with ThreadPoolExecutor(2) as ex:
        assert all(c.ok for c in ex.map(lambda s: check_case(pool.call, s), seeds))

    assert summary["scanned"] == 5 and summary["fix_commits"] == 3
    assert summary["tests_added"] == 6 and summary["extracted"] == 5 and summary["valid"] == 4
    assert summary["invalid"] == 1 and summary["fix_commits_with_seed"] == 3 and summary["seed_fraction"] == 1.0
    stages = {e["stage"] for e in summary["errors"]}
    assert stages == {"extract", "eager"}
    eager_err = next(e for e in summary["errors"] if e["stage"] == "eager")
    assert "test_bad_shapes" in eager_err["item"] and "RuntimeError" in eager_err["error"]
    assert read_summary(out)["git"]["valid"] == 4


def test_category_prior_is_the_category_mix_of_the_history(mined):
    out, summary = mined
    prior = category_prior(out)
    assert abs(sum(prior.values()) - 1.0) < 1e-9
    assert set(prior) == {c for c in summary["categories"] if c in TAXONOMY_IDS}
    assert prior["I1"] > 0 and prior["I3"] > 0
    smoothed = category_prior(out, smoothing=1.0)
    assert set(smoothed) == set(TAXONOMY_IDS)


# -- bug reports --------------------------------------------------------------------------------------------------
def test_issue_export_gives_runnable_seeds_text_seeds_and_counted_item_errors(tmp_path, pool):
    issues_file = write_issues(tmp_path / "issues.json")
    issues, errors = load_issues(issues_file)
    assert [i.number for i in issues] == [101, 102, 103]
    assert len(errors) == 4
    why = " | ".join(e.error for e in errors)
    assert "missing 'body'" in why and "null" in why and "'labels'" in why and "not an object" in why
    assert len(code_blocks(issues[0].body)) == 1  # the traceback block is not code

    out = tmp_path / "seeds"
    summary = ingest_issues(issues_file, out, call=pool.call, workers=pool.size)
    seeds = load_history_seeds(out)
    assert [s.meta["issue"] for s in seeds] == [101]
    seed = seeds[0]
    assert seed.meta["origin"] == "history-issue" and "class ReproModel" in seed.program
    assert '"cuda"' not in seed.program and "'cuda'" not in seed.program
    assert seed.meta["labels"] == ["oncall: pt2", "module: inductor"]
    text = {t["issue"]: t for t in load_text_seeds(out)}
    assert set(text) == {102, 103}
    assert "did not run" in text[102]["why_text_only"] and "RuntimeError" in text[102]["why_text_only"]
    assert text[103]["why_text_only"] == "no code block" and text[103]["category"] == "G1"
    assert summary["items"] == 7 and summary["malformed"] == 4 and summary["valid"] == 1
    assert summary["invalid"] == 1 and summary["text_seeds"] == 2
    assert sum(1 for e in summary["errors"] if e["stage"] == "parse") == 4


# -- the command line ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_mine_writes_seeds_and_accepts_several_paths_after_one_option(repo, tmp_path):
    root, shas = repo
    out = tmp_path / "cli-seeds"
    res = runner.invoke(app, ["history", "mine", "--repo", str(root), "-o", str(out), "--no-llm",
                              "--paths", "test/inductor", "test/other"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "history_summary.json").read_text())["git"]
    assert summary["paths"] == ["test/inductor", "test/other"]
    assert summary["scanned"] == 6 and summary["fix_commits"] == 4  # the test/other commit is a fix now
    names = {s.meta["test_name"] for s in load_history_seeds(out)}
    assert "test_misc_op" in names and "TestX.test_clamp_negative" in names


def test_cli_reports_bad_inputs_with_exit_status_2(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    res = runner.invoke(app, ["history", "mine", "--repo", str(plain), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "not a git repository" in res.output
    res = runner.invoke(app, ["history", "ingest", str(tmp_path / "missing.json"), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "no such file" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("number: 1\ntitle: not json\n")
    res = runner.invoke(app, ["history", "ingest", str(bad), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "not JSON" in res.output
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"number": 1}))
    res = runner.invoke(app, ["history", "ingest", str(obj), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "expected a JSON list" in res.output


# -- categories and the optional LLM ------------------------------------------------------------------------------
def test_category_rules_read_message_paths_and_labels():
    assert guess_category("Fix graph break on print inside forward").category == "H1"
    assert guess_category("Support mark_dynamic on size-1 dims").category == "J1"
    assert guess_category("Fix wrong result", paths=["torch/_dynamo/variables/lists.py"]).category == "B1"
    assert guess_category("wrong output", labels=["module: dynamic shapes"]).category == "J1"
    assert guess_category("Bump version").category == "unknown"


def test_an_unreachable_llm_falls_back_to_rules_and_says_so_once(repo, tmp_path):
    root, shas = repo
    settings = Settings(llm_provider="openai", llm_base_url="http://127.0.0.1:9/v1", llm_api_key="x",
                        llm_max_retries=0, llm_timeout_s=5, llm_cache_dir=str(tmp_path / "llm"))
    notes: list[str] = []
    llm = HistoryLLM.from_settings(settings, on_note=notes.append)
    assert llm is not None
    assert HistoryLLM.from_settings(Settings(llm_provider="none")) is None
    scan = next(s for s in scan_history(str(root), paths=["test/inductor"]) if s.sha == shas["strides_fix"])
    cands = candidates_from_commit(scan, llm)
    assert [c.ok for c in cands] == [True, True, False, True]  # the rules' result, unchanged
    assert all(c.case.meta["category_source"] == "rules" for c in cands if c.ok)
    assert len(notes) == 1 and "unavailable" in notes[0] and not llm.available
