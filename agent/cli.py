"""The `nnforge` command line. Each command lives in its own `cmd_*.py` module and registers
itself on `app`; this module only assembles them, and owns what belongs to no command:
`--version`, shell completion (`--install-completion`, `--show-completion`) and how options
read in `--help`."""

from __future__ import annotations

import platform
from importlib import import_module
from importlib import metadata
from typing import Any

import typer
from typer.core import TyperOption

app = typer.Typer(
    name="nnforge",
    help="NNForge finds bugs in deep-learning compilers (torch.compile, ONNX Runtime, TVM) and writes them up.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

# What a bug report needs to know about this installation: NNForge and the compilers it drives.
VERSION_DISTRIBUTIONS = ("nnforge", "torch", "onnx", "onnxruntime", "apache-tvm")


def installed_versions() -> list[tuple[str, str]]:
    """(distribution, version or "not installed") for NNForge and each compiler it tests. Read
    from the installed packages' metadata, so nothing is imported (TVM takes seconds to load)."""
    out = []
    for name in VERSION_DISTRIBUTIONS:
        try:
            out.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            out.append((name, "not installed"))
    return out


def _print_version(value: bool) -> None:
    if not value:
        return
    for name, version in installed_versions():
        typer.echo(f"{name} {version}")
    typer.echo(f"python {platform.python_version()}")
    raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the versions of NNForge, torch, onnx, onnxruntime and TVM, and exit."),
) -> None:
    """NNForge finds bugs in deep-learning compilers (torch.compile, ONNX Runtime, TVM) and writes them up."""


def _flags_take_no_value_in_help() -> None:
    """Typer 0.29's Rich help prints every option's value type, on/off flags included
    (`--plain <bool>`, even `--help <bool>`), as if a flag took a value: its Rich options panel
    asks `display_type_rich` without the `is_flag` test its plain formatter makes. A flag has no
    value to show, so it gets no type; every other option keeps its own."""
    original = TyperOption.display_type_rich
    if getattr(original, "_nnforge_flags_plain", False):
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag and self.metavar is None:
            return None
        return original(self, ctx)

    display_type_rich._nnforge_flags_plain = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value_in_help()

# Modules that register commands on `app`, in the order they appear in --help.
COMMAND_MODULES = ("cmd_generate", "cmd_run", "cmd_mutate", "cmd_demo", "cmd_history", "cmd_reduce", "cmd_triage", "cmd_report", "cmd_campaign")


def _register_commands() -> None:
    for mod in COMMAND_MODULES:
        import_module(f"nnforge.agent.{mod}")


def main() -> None:
    import sys

    from nnforge.core.settings import SettingsError

    _register_commands()
    try:
        app()
    except SettingsError as e:  # a bad .env or NNFORGE_* value: one line per key, no traceback
        for line in str(e).splitlines():
            sys.stderr.write(f"error: setting {line}\n")
        sys.exit(2)


if __name__ == "__main__":  # `python -m nnforge.agent.cli`: commands register on the imported module's app
    from nnforge.agent.cli import main as _main

    _main()
