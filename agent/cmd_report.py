"""`nnforge report CLUSTER_ID`: regenerate and print the issue draft (report.md) of one cluster.

Rewrites findings/<cluster_id>/ (case/, repro.py, report.md, gh_command.sh) from the cluster's
representative finding, so a draft edited by hand or written by an older NNForge is brought
back in line with the run. A unique prefix of the id is enough.

Exit status: 0 printed, 2 no store or no such cluster.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from nnforge.agent.cli import app
from nnforge.agent.store import STORE_FILE, Store
from nnforge.core.settings import load_settings


@app.command()
def report(
    cluster_id: str = typer.Argument(..., metavar="CLUSTER_ID", help="The cluster id (or a unique prefix of it)."),
    campaign: Path = typer.Option(Path("."), "--campaign", help="The campaign folder holding store.sqlite."),
    no_llm: bool = typer.Option(False, "--no-llm", help="Template prose only, even with an LLM configured."),
    quiet: bool = typer.Option(False, "--quiet", help="Regenerate the files without printing report.md."),
) -> None:
    """Regenerate findings/<cluster_id>/ and print its report.md."""
    from nnforge.agent.cmd_triage import write_cluster_folder

    console = Console(stderr=True)
    if not (campaign / STORE_FILE).is_file():
        console.print(f"[red]no {STORE_FILE} in {campaign}: pass the campaign folder with --campaign[/red]")
        raise typer.Exit(2)
    with Store(campaign) as store:
        cluster = store.cluster(cluster_id)
        if cluster is None:
            known = ", ".join(c.cluster_id for c in store.clusters()) or "none"
            console.print(f"[red]no cluster {cluster_id!r} in {campaign} (known: {known})[/red]", soft_wrap=True)
            raise typer.Exit(2)
        folder = write_cluster_folder(store, campaign, cluster, settings=load_settings(), use_llm=not no_llm)
    if not quiet:
        typer.echo((folder / "report.md").read_text())
    console.print(f"wrote {folder}/ (report.md, repro.py, gh_command.sh, case/)")
