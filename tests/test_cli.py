"""The command line as a user meets it: --version, --help of every command, shell completion,
budgets, tables at 80 columns, where settings come from, and what the logs say."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import click
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from nnforge.agent import cli
from nnforge.agent.campaign_config import parse_budget
from nnforge.agent.cli import _register_commands, app
from nnforge.agent.cmd_history import clip
from nnforge.agent.cmd_run import verdict_table
from nnforge.agent.cmd_triage import summary_table
from nnforge.agent.store import Cluster
from nnforge.core.settings import describe_sources, env_files, load_settings
from nnforge.core.signature import Signature
from nnforge.core.verdict import Symptom, Verdict
from nnforge.triage.reducer import describe_reduction

_register_commands()
runner = CliRunner()
NNFORGE = os.path.join(os.path.dirname(sys.executable), "nnforge")


def _nnforge(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([NNFORGE, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, **(env or {})})


# -- --version ---------------------------------------------------------------------------------------------------
def test_version_names_nnforge_and_each_compiler_and_exits_0():
    p = _nnforge("--version")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"nnforge {metadata.version('nnforge')}"
    names = [line.split(" ", 1)[0] for line in lines]
    assert names == ["nnforge", "torch", "onnx", "onnxruntime", "apache-tvm", "python"]
    assert f"torch {metadata.version('torch')}" in lines


VERSION_IMPORTS = """
import sys
from nnforge.agent.cli import main
sys.argv = ["nnforge", "--version"]
try:
    main()
except SystemExit:
    pass
print("imported:", sorted(m for m in ("tvm", "onnxruntime") if m in sys.modules))
"""


def test_version_imports_no_compiler_and_says_not_installed_for_a_missing_one(monkeypatch):
    p = subprocess.run([sys.executable, "-c", VERSION_IMPORTS], capture_output=True, text=True, timeout=120)
    assert p.stdout.splitlines()[-1] == "imported: []", p.stdout + p.stderr
    monkeypatch.setattr(cli, "VERSION_DISTRIBUTIONS", ("nnforge", "no-such-distribution-nnforge"))
    assert cli.installed_versions()[1] == ("no-such-distribution-nnforge", "not installed")


# -- --help ------------------------------------------------------------------------------------------------------
def _command_paths(command: click.Command, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, sub in getattr(command, "commands", {}).items():
        paths += _command_paths(sub, (*prefix, name))
    return paths


def test_every_help_shows_on_off_flags_as_flags_and_arguments_plainly():
    paths = _command_paths(typer.main.get_command(app))
    assert ("campaign",) in paths and ("history", "mine") in paths
    for path in paths:
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "<bool>" not in res.output, (path, res.output)  # a flag takes no value
        assert "[[" not in res.output, (path, res.output)
    out = runner.invoke(app, ["campaign", "--help"]).output
    assert "--triage" in out and "--no-triage" in out and "--plain" in out
    assert "<int>" in out and "<float>" in out  # options that take a value still say which
    mine = runner.invoke(app, ["history", "mine", "--help"]).output
    assert "Usage: nnforge history mine [OPTIONS] [PATHS]..." in mine
    assert "{CASE_DIR}" in runner.invoke(app, ["run", "--help"]).output


def test_campaign_help_gives_the_common_cases_one_example_a_line():
    out = runner.invoke(app, ["campaign", "--help"]).output
    lines = [line.strip() for line in out.splitlines()]
    for example in ("nnforge campaign --budget 8h --targets inductor,ort,tvm -o night/",
                    "nnforge campaign --budget 2h --targets inductor -o inductor/",
                    "nnforge campaign --resume night/",
                    "nnforge campaign --budget 1h --targets ort,tvm -o onnx/",
                    "nnforge campaign --budget 8h --llm openai -o llm/"):
        assert example in lines, (example, out)
    assert any("a bare" in line for line in lines) and any("130 interrupted" in line for line in lines)


# -- shell completion --------------------------------------------------------------------------------------------
def test_shell_completion_is_offered_and_completes_commands_and_flags():
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0 and "--install-completion" in res.output and "--show-completion" in res.output
    # typer names the shell from the process's ancestors (shellingham), not from an argument:
    # run it under bash (which forks for it: a lone command would be exec-ed in its place), so the
    # answer does not depend on what started the test suite
    script = subprocess.run(["bash", "-c", f"{NNFORGE} --show-completion; exit $?"], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "SHELL": "/bin/bash"})
    assert script.returncode == 0 and "_nnforge_completion" in script.stdout, script.stderr
    words = _nnforge(env={"_NNFORGE_COMPLETE": "complete_bash", "COMP_WORDS": "nnforge camp", "COMP_CWORD": "1"})
    assert words.stdout.split() == ["campaign"], words.stdout + words.stderr
    flags = _nnforge(env={"_NNFORGE_COMPLETE": "complete_bash", "COMP_WORDS": "nnforge campaign --no-t",
                          "COMP_CWORD": "2"})
    assert flags.stdout.split() == ["--no-triage"], flags.stdout + flags.stderr


# -- budgets -----------------------------------------------------------------------------------------------------
def test_a_bare_budget_number_is_seconds_and_a_number_without_unit_after_one_with_is_refused(tmp_path):
    assert parse_budget("90") == 90 and parse_budget("1h30m") == 5400 and parse_budget("1.5h") == 5400
    with pytest.raises(ValueError, match="a bare number alone is seconds"):
        parse_budget("1h30")  # a person means 1h30m; 1h00m30s would be a surprise
    res = runner.invoke(app, ["campaign", "--budget", "1h30", "--targets", "eager", "-o", str(tmp_path / "c")])
    assert res.exit_code == 2 and "cannot read budget '1h30'" in res.output
    assert not (tmp_path / "c").exists()


# -- tables at 80 columns ----------------------------------------------------------------------------------------
TITLE = ("[AOTAutograd] RuntimeError raised on one side only on torch.cumsum → torch.where → "
         "torch.nn.functional.gelu")


def _render(table, width: int) -> list[str]:
    out = io.StringIO()
    Console(width=width, file=out, color_system=None).print(table)
    return out.getvalue().splitlines()


def _header_cells(lines: list[str]) -> list[str]:
    row = next(line for line in lines if line.startswith("┃"))
    return [cell.strip() for cell in row.strip("┃").split("┃")]


def _column_text(lines: list[str], index: int) -> str:
    """Every body line's cell in column `index`, joined: what the column says, however it folded."""
    cells = [line.strip("│").split("│")[index] for line in lines if line.startswith("│")]
    return "".join("".join(cells).split())


def _clusters() -> dict[str, Cluster]:
    sig = Signature(symptom="exception_mismatch", target="inductor", rung="aot_eager", key="k")
    other = Signature(symptom="mismatch", target="ort", rung="ort_optimizer", key="k2")
    return {"3fa9c2d1e0b7": Cluster("3fa9c2d1e0b7", TITLE, sig, 1, 12, 0.0, 0.0),
            "a0b1c2d3e4f5": Cluster("a0b1c2d3e4f5", "[ORT optimizer] silently wrong result on aten.addmm", other, 2, 1,
                                    0.0, 0.0)}


@pytest.mark.parametrize("width, headers", [
    (80, ["cluster", "findings", "title / verdict"]),
    (160, ["cluster", "", "findings", "symptom", "target", "rung", "title"]),
])
def test_the_triage_table_keeps_every_header_and_the_whole_title(width, headers):
    clusters = _clusters()
    lines = _render(summary_table("triage of camp/: 2 finding(s)", list(clusters), {"3fa9c2d1e0b7"}, clusters,
                                  width), width)
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    assert _header_cells(lines) == headers
    title_col = _column_text(lines, len(headers) - 1)
    for c in clusters.values():
        assert "".join(c.title.split()) in title_col, "\n".join(lines)  # brackets too: not taken for markup
    assert ("exception_mismatchoninductor,rungaot_eager" in title_col) == (width == 80)
    assert "3fa9c2d1e0b7" in _column_text(lines, 0) and "12" in _column_text(lines, headers.index("findings"))


@pytest.mark.parametrize("width, headers", [
    (80, ["target", "verdict", "error / detail"]),
    (160, ["target", "verdict", "guilty rung", "call", "error", "detail"]),
])
def test_the_run_table_keeps_every_header_error_and_detail(width, headers):
    crash = Verdict("inductor", Symptom.CRASH, rung="inductor", call_index=0,
                    exc_type="torch._inductor.exc.InductorError",
                    exc_message="CppCompileError: /tmp/x.cpp:12: error: no matching function for max(float, double)",
                    detail="the compiled run raised while eager returned; rung [inductor] raised, aot_eager passed")
    wrong = Verdict("ort", Symptom.MISMATCH, rung="ort_optimizer", call_index=1, max_abs_err=0.25,
                    detail="output 0 differs: 12 of 24 elements beyond tolerance (atol 1e-05, rtol 1.3e-06)")
    lines = _render(verdict_table("cases/gen-000001  (ff3ecf317346efa6)", [crash, wrong], width), width)
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    assert _header_cells(lines) == headers
    text = "".join(_column_text(lines, i) for i in range(len(headers)))
    for part in (crash.exc_message, crash.detail, wrong.detail, "ort_optimizer", "max abs 0.25"):
        assert "".join(part.split()) in text, (part, "\n".join(lines))


# -- settings: where they come from ------------------------------------------------------------------------------
def test_settings_come_from_the_environment_then_dot_env_then_the_users_config(tmp_path, monkeypatch):
    config = tmp_path / "config"
    (config / "nnforge").mkdir(parents=True)
    (config / "nnforge" / ".env").write_text("NNFORGE_LLM_MODEL=from-user\nNNFORGE_WORKER_TIMEOUT_S=11\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv("NNFORGE_LLM_MODEL", raising=False)
    assert (load_settings().llm_model, load_settings().worker_timeout_s) == ("from-user", 11.0)
    assert describe_sources(env_files()) == f"settings: environment, then {config / 'nnforge' / '.env'}"
    (work / ".env").write_text("NNFORGE_LLM_MODEL=from-here\n")
    assert (load_settings().llm_model, load_settings().worker_timeout_s) == ("from-here", 11.0)
    assert describe_sources(env_files()).endswith(f"then {work / '.env'}, then {config / 'nnforge' / '.env'}")
    monkeypatch.setenv("NNFORGE_LLM_MODEL", "from-env")
    assert load_settings().llm_model == "from-env"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "empty"))
    (work / ".env").unlink()
    assert describe_sources(env_files()) == "settings: no .env file: environment and defaults"


def test_a_bad_value_in_the_users_env_file_is_one_line_naming_the_key_and_exits_2(tmp_path):
    (tmp_path / "config" / "nnforge").mkdir(parents=True)
    (tmp_path / "config" / "nnforge" / ".env").write_text("NNFORGE_WORKER_MEMORY_MB=lots\n")
    p = _nnforge("run", str(tmp_path), cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["error: setting NNFORGE_WORKER_MEMORY_MB='lots': must be a valid integer, "
                                             "unable to parse string as an integer"]


def test_a_sandboxed_worker_reads_the_users_env_file_as_empty(tmp_path, monkeypatch):
    from nnforge.oracle.sandbox import WorkerPool

    secret = tmp_path / "config" / "nnforge" / ".env"
    secret.parent.mkdir(parents=True)
    secret.write_text("NNFORGE_LLM_API_KEY=sk-test-secret\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    program = f"def main():\n    with open({str(secret)!r}) as f:\n        return f.read()\n"
    with WorkerPool(size=1, timeout_s=60, preload=(), inductor_cache_dir=str(tmp_path / "inductor")) as pool:
        if not pool.isolation.fence:
            pytest.skip("no mount namespace on this machine: " + pool.isolation.summary())
        out = pool.call("nnforge.oracle.worker:exec_program", {"program": program, "entry": "main", "args": []})
    # the file reads as empty (the fence), or a test's unprivileged uid may not reach it at all
    assert (out.ok and out.value == "") or out.exc_type == "PermissionError", out
    assert "sk-test-secret" not in repr(out)
    assert secret.read_text() == "NNFORGE_LLM_API_KEY=sk-test-secret\n"


# -- what the logs say -------------------------------------------------------------------------------------------
def test_a_long_commit_subject_is_cut_after_a_word_and_keeps_its_pr_number_whole():
    subject = "[inductor] Fix the lowering of aten.cumsum for bool inputs when dynamic shapes are on (#123456)"
    short = clip(subject, 70)
    assert len(short) <= 70 and short.endswith("… (#123456)") and short.startswith("[inductor] Fix the lowering")
    assert short[: -len("… (#123456)")] == subject[: len(short) - len("… (#123456)")]  # whole words only
    assert subject[len(short) - len("… (#123456)")] == " "
    narrow = clip(subject, 20)
    assert len(narrow) <= 20 and "(#" not in narrow and narrow == "[inductor] Fix the…"
    assert clip("Fix a thing (#12)", 70) == "Fix a thing (#12)"


def test_a_reduction_that_removed_nothing_says_so_in_words_with_singulars():
    same = {"ops": 1, "lines": 10, "calls": 1}
    assert describe_reduction(same, dict(same)) == "the reduction removed nothing (1 operator, 10 lines)"
    assert (describe_reduction({"ops": 3, "lines": 14, "calls": 2}, {"ops": 1, "lines": 1, "calls": 1})
            == "reduced from 3 operators, 14 lines, 2 calls to 1 operator, 1 line")


# -- Ray ---------------------------------------------------------------------------------------------------------
RAY_START = """
import logging
from nnforge.agent.executor import ExecutorConfig, RayExecutor
ex = RayExecutor(ExecutorConfig(workers=1, timeout_s=30, memory_mb=2000))
logging.getLogger("ray").error("an error still shows")
print("started", ex.size)
ex.close()
"""


@pytest.mark.slow
def test_a_local_ray_starts_without_printing_its_notices_over_the_screen_and_errors_still_show(tmp_path):
    pytest.importorskip("ray")
    p = subprocess.run([sys.executable, "-c", RAY_START], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == "started 1", p.stdout + p.stderr
    assert "Token authentication" not in p.stderr and "Started a local Ray instance" not in p.stderr, p.stderr
    assert "an error still shows" in p.stderr
