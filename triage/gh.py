"""The `gh issue create` command line for a report, written beside it and never run.

Filing an issue is a person's decision: NNForge writes `gh_command.sh` so that, after reading
report.md and running repro.py, filing takes one command. Labels must exist in the target
repository (gh refuses unknown ones); the suggested ones are PyTorch's.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Iterable

GH_FILE = "gh_command.sh"


def gh_command(title: str, labels: Iterable[str] = (), *, repo: str = "pytorch/pytorch",
               body_file: str = "report.md") -> str:
    """`gh issue create --repo REPO --title TITLE --body-file BODY --label L ...`, shell-quoted."""
    argv = ["gh", "issue", "create", "--repo", repo, "--title", title, "--body-file", body_file]
    for label in labels:
        argv += ["--label", label]
    return shlex.join(argv)


def write_gh_command(folder: str | Path, title: str, labels: Iterable[str] = (), *,
                     repo: str = "pytorch/pytorch", body_file: str = "report.md") -> Path:
    """Write `gh_command.sh` into `folder` (not executable: it is a draft to review)."""
    path = Path(folder) / GH_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "#!/bin/sh\n"
        "# Files report.md as a GitHub issue. NNForge never runs this: read report.md and run\n"
        "# `python repro.py` (exit 1 = bug present) first, then run this script yourself.\n"
        "# gh refuses labels the repository does not have; drop those it complains about.\n"
        'cd "$(dirname "$0")" || exit 1\n'
        + gh_command(title, labels, repo=repo, body_file=body_file) + "\n"
    )
    path.write_text(text)
    return path
