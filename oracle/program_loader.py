"""Load a program's source text as a real module backed by a real file.

Why a file and not `exec` of a string: `inspect.getsource`, tracebacks, faulthandler dumps and
torch.compile (Dynamo reads source lines through `linecache`) all need the code object's
`co_filename` to name a file that exists. Each load gets its own module name so two programs in
one worker never shadow each other or hit a stale `linecache` entry.

Only ever called inside a sandbox worker (its cwd is the worker's temp dir): importing a
program runs its top-level code, which is untrusted.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import sys
import types

_counter = itertools.count(1)
_NAME_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def load_program(source: str, name: str = "program") -> types.ModuleType:
    """Write `source` to `<cwd>/<name>_<pid>_<n>.py`, import it under that unique name, return it.

    The module stays registered in `sys.modules` so pickling, `inspect` and Dynamo can find it;
    workers are recycled, which bounds what accumulates.
    """
    if not _NAME_OK.match(name):
        raise ValueError(f"program name must be a Python identifier, got {name!r}")
    module_name = f"{name}_{os.getpid()}_{next(_counter)}"
    path = os.path.join(os.getcwd(), module_name + ".py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - only for odd file systems
        raise ImportError(f"cannot build an import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def unload_program(module: types.ModuleType) -> None:
    """Forget a loaded program (its file stays in the worker's temp dir until the worker goes)."""
    sys.modules.pop(module.__name__, None)
