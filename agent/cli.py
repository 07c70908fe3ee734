"""The `nnforge` command line. Each command lives in its own `cmd_*.py` module and registers
itself on `app`; this module only assembles them."""

from __future__ import annotations

from importlib import import_module

import typer

app = typer.Typer(
    name="nnforge",
    help="NNForge finds bugs in deep-learning compilers (torch.compile, ONNX Runtime, TVM) and writes them up.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """NNForge finds bugs in deep-learning compilers (torch.compile, ONNX Runtime, TVM) and writes them up."""


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
