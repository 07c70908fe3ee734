"""What a person sees of a running campaign: the live panel on a terminal (read off a terminal
emulator, pyte, fed by a real pseudo-terminal of the size asked), plain timestamped lines through a
pipe, and the exit status a script gets (0 budget spent, 130 interrupted)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

pyte = pytest.importorskip("pyte")

NNFORGE = os.path.join(os.path.dirname(sys.executable), "nnforge")
SHORT_CAMPAIGN = ["campaign", "--budget", "20s", "--targets", "eager", "--workers", "1", "--nodes", "3", "--no-triage"]
PANEL_FIELDS = ("elapsed", "tests", "findings", "last new", "workers", "verdicts per target")


def _env(cols: int, rows: int, config: Path) -> dict[str, str]:
    return {**os.environ, "COLUMNS": str(cols), "LINES": str(rows), "TERM": "xterm-256color",
            "XDG_CONFIG_HOME": str(config)}


def _panel(screen_lines: list[str]) -> list[str]:
    """The rows of the last 'NNForge campaign' panel on the screen, once its bottom border is
    drawn to the end (a read can stop halfway through a redraw)."""
    tops = [i for i, line in enumerate(screen_lines) if line.startswith("╭") and "NNForge campaign" in line]
    if not tops:
        return []
    bottom = next((i for i in range(tops[-1], len(screen_lines)) if screen_lines[i].startswith("╰")), None)
    if bottom is None or not screen_lines[bottom].endswith("╯"):
        return []
    return screen_lines[tops[-1]:bottom + 1]


def _run_on_a_terminal(out: Path, cols: int, rows: int, config: Path,
                       timeout: float = 90) -> tuple[int, list[str], list[str]]:
    """Run a short campaign on a pseudo-terminal of `cols` x `rows`; the exit status, the screen
    while it ran (the first panel with tests counted and budget left) and the screen at the end."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen([NNFORGE, *SHORT_CAMPAIGN, "-o", str(out)], stdin=slave, stdout=slave, stderr=slave,
                            env=_env(cols, rows, config), cwd=out.parent, start_new_session=True)
    os.close(slave)
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    during: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 0.5)[0]:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            stream.feed(data)
            if not during:
                panel = _panel([line.rstrip() for line in screen.display])
                if any(re.search(r"tests\s+[1-9]", line) for line in panel) and not any("(100%)" in r for r in panel):
                    during = [line.rstrip() for line in screen.display]
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(master)
    return rc, during, [line.rstrip() for line in screen.display]


def _check_panel(panel: list[str], cols: int) -> None:
    assert panel, "no panel on the screen"
    for row in panel:  # every row keeps both borders on one screen line: nothing wider than the terminal
        assert len(row) == cols and row[0] in "╭│╰" and row[-1] in "╮│╯", "\n".join(panel)
    text = "\n".join(panel)
    for field in PANEL_FIELDS:
        assert field in text, (field, text)
    assert re.search(r"elapsed\s+\d+m\d\ds of 0m20s \(\d+%\)", text), text
    assert re.search(r"│ target\s+┃|┃ target\s+┃", text) and "eager" in text and "pass" in text, text


@pytest.mark.slow
@pytest.mark.parametrize("cols, rows", [(80, 50), (160, 50)])
def test_the_live_panel_fits_the_terminal_and_shows_progress_verdicts_and_health(tmp_path, cols, rows):
    rc, during, end = _run_on_a_terminal(tmp_path / "camp", cols, rows, tmp_path / "config")
    assert rc == 0, "\n".join(end)  # the budget was spent
    _check_panel(_panel(during), cols)
    _check_panel(_panel(end), cols)
    assert any("(100%)" in row for row in _panel(end))
    screen = "\n".join(end)
    assert "campaign budget:" in screen and "store:" in screen


@pytest.mark.slow
def test_through_a_pipe_a_campaign_writes_plain_timestamped_lines_and_ctrl_c_exits_130(tmp_path):
    config = tmp_path / "config"
    (config / "nnforge").mkdir(parents=True)
    (config / "nnforge" / ".env").write_text("NNFORGE_WORKER_TIMEOUT_S=60\n")
    proc = subprocess.Popen([NNFORGE, *SHORT_CAMPAIGN, "-o", str(tmp_path / "camp")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env(80, 24, config), cwd=tmp_path)
    lines: list[str] = []
    interrupted = False
    try:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            lines.append(raw.decode())
            # Ctrl-C once a status line has counted a test
            if not interrupted and re.match(r"\d\d:\d\d:\d\d \[\d+m\d\ds/0m20s\] tests [1-9]", lines[-1]):
                proc.send_signal(signal.SIGINT)
                interrupted = True
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    assert interrupted, out
    assert rc == 130, out + proc.stderr.read().decode()
    assert "\x1b" not in out  # no colour, no cursor movement: a pipe gets text
    log = lines[:next(i for i, line in enumerate(lines) if line.startswith("campaign interrupted:"))]
    assert log and all(re.match(r"\d\d:\d\d:\d\d ", line) for line in log), out
    assert log[0].rstrip() == f"{log[0][:8]} settings: environment, then {config / 'nnforge' / '.env'}"
    assert any("campaign started in" in line for line in log) and any("stopping: SIGINT" in line for line in log)
    assert f"continue with: nnforge campaign --resume {tmp_path / 'camp'}\n" in lines
