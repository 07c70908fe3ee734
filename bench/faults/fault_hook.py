"""Plant known bugs into the installed compilers at interpreter start, without touching their files.

A fault is a function that patches one module of torch or TVM right after that module has
executed (a post-import hook on `sys.meta_path`), registered with `@plant`. Which faults are on
is read from a file, not the environment: NNForge's sandboxed workers get a scrubbed environment
and a temp working directory, but every Python process of the virtualenv reads the `.pth` line
that `bench/faults.py install` adds to its site-packages, and that line looks for the activation
file at a fixed absolute path. With no activation file the line imports nothing and nothing is
patched.

    @plant("inductor_amax_int_init", layer="inductor lowering", module="torch._inductor.lowering",
           symptom="mismatch", summary="integer amax starts from 0 instead of the dtype's minimum")
    def _(lowering):  # the freshly executed module
        ...

This module is the only one the `.pth` line imports; the fault catalogue (`planted_*.py` beside
it) is imported from here, so a fault is one function in one file.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ACTIVE_FILE = HERE / "active.json"
PTH_NAME = "nnforge_fault_hook.pth"
CATALOGUE = ("planted_inductor", "planted_aot", "planted_dynamo", "planted_tvm")
LAYERS = (
    "inductor lowering", "inductor decomposition", "inductor codegen", "aotautograd",
    "dynamo guards", "dynamo builtins", "dynamo containers", "dynamo iterators",
    "dynamo side effects", "tvm frontend", "tvm passes",
)
# module name -> faults applied to it in this process: the check command reads it in a child.
APPLIED: dict[str, list[str]] = {}


@dataclass(frozen=True)
class Fault:
    name: str
    layer: str
    module: str  # the module patched right after it executes
    symptom: str  # "mismatch" | "crash" | "stale" (a mismatch on a later call)
    summary: str  # the bug in one line, as a changelog would put it
    target: str  # the NNForge target that should find it
    apply: Callable[[object], None]


REGISTRY: dict[str, Fault] = {}


def plant(name: str, *, layer: str, module: str, symptom: str, summary: str,
          target: str = "inductor") -> Callable[[Callable[[object], None]], Callable[[object], None]]:
    """Register a fault: `apply(module)` patches `module` (already executed) in place."""
    if layer not in LAYERS:
        raise ValueError(f"fault {name}: unknown layer {layer!r} (one of {LAYERS})")
    if symptom not in ("mismatch", "crash", "stale"):
        raise ValueError(f"fault {name}: unknown symptom {symptom!r}")

    def register(fn: Callable[[object], None]) -> Callable[[object], None]:
        if name in REGISTRY:
            raise ValueError(f"fault {name} registered twice")
        REGISTRY[name] = Fault(name, layer, module, symptom, summary, target, fn)
        return fn

    return register


def load_catalogue() -> dict[str, Fault]:
    for mod in CATALOGUE:
        importlib.import_module(mod)
    return REGISTRY


# -- activation --------------------------------------------------------------------------------------------
def read_active(path: Path = ACTIVE_FILE) -> list[str]:
    """The fault names the activation file turns on ([] when there is none)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    names = data.get("faults", []) if isinstance(data, dict) else []
    return [str(n) for n in names]


def write_active(names: list[str], path: Path = ACTIVE_FILE, fired_log: Path | None = None,
                 fired_stderr: bool = False) -> None:
    """Turn `names` on for every process started from now on; `fired_log` collects their firings;
    `fired_stderr` has each process say on stderr which faults fired (once each), for processes
    that can write no file outside their own folder (a confined repro check)."""
    if not names:
        path.unlink(missing_ok=True)
        return
    unknown = set(names) - set(load_catalogue())
    if unknown:
        raise KeyError(f"unknown faults: {sorted(unknown)}")
    data: dict[str, object] = {"faults": list(names)}
    if fired_log is not None:
        data["fired_log"] = str(Path(fired_log).resolve())
    if fired_stderr:
        data["fired_stderr"] = True
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


# -- firing: did the faulty path run at all? ---------------------------------------------------------------
# A missed fault is missed for one of three reasons: no test ever reached its trigger condition,
# tests reached it but were judged pass, or they failed and triage did not surface them. Each
# fault calls `fired(name)` where it takes its wrong branch, and the line goes to the log the
# activation file names, so the benchmark can tell the first reason from the other two.
_FIRED_LOG: list[str] = []
_FIRED_CAP = 10_000  # per process: a fault in a hot path must not fill the disk
_fired_count: dict[str, int] = {}


FIRED_MARK = "nnforge-fault-fired:"  # the stderr line of a fault's first firing in a process
_FIRED_STDERR: list[bool] = []


def fired(name: str) -> None:
    """Record that fault `name` just took its wrong branch (a no-op without a log)."""
    if _FIRED_STDERR and name not in _fired_count:
        sys.stderr.write(f"{FIRED_MARK} {name}\n")
        sys.stderr.flush()
        if not _FIRED_LOG:
            _fired_count[name] = 1
    if not _FIRED_LOG:
        return
    n = _fired_count.get(name, 0)
    if n >= _FIRED_CAP:
        return
    _fired_count[name] = n + 1
    try:
        fd = os.open(_FIRED_LOG[0], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{name}\t{os.getpid()}\n".encode())
        finally:
            os.close(fd)
    except OSError:  # a sandbox that cannot write there loses counts, never the run
        pass


def fired_counts(log: Path) -> dict[str, int]:
    """Times each fault fired, read back from a fired log (empty when none fired)."""
    counts: dict[str, int] = {}
    try:
        lines = Path(log).read_text().splitlines()
    except FileNotFoundError:
        return counts
    for line in lines:
        name = line.split("\t", 1)[0]
        if name:
            counts[name] = counts.get(name, 0) + 1
    return counts


def pth_line(active_file: Path = ACTIVE_FILE) -> str:
    """The one line of the `.pth` file: import the hook only when the activation file exists."""
    return (f"import os, sys; os.path.exists({str(active_file)!r}) and "
            f"(sys.path.insert(0, {str(HERE)!r}) or __import__('fault_hook').boot({str(active_file)!r}))\n")


def site_packages() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"])


def install_pth() -> Path:
    """Add the `.pth` line to this interpreter's site-packages (idempotent)."""
    target = site_packages() / PTH_NAME
    line = pth_line()
    if not target.exists() or target.read_text() != line:
        target.write_text(line)
    return target


def uninstall_pth() -> None:
    (site_packages() / PTH_NAME).unlink(missing_ok=True)


# -- the post-import hook ----------------------------------------------------------------------------------
class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, faults: list[Fault]):
        self.inner = inner
        self.faults = faults

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        self.inner.exec_module(module)
        for fault in self.faults:
            try:
                fault.apply(module)
            except Exception:  # a fault that no longer fits this version must say so, not hide
                sys.stderr.write(f"nnforge fault {fault.name}: cannot patch {module.__name__}:\n"
                                 f"{traceback.format_exc()}")
                continue
            if fault.target:  # the cache hygiene entries are no faults
                APPLIED.setdefault(module.__name__, []).append(fault.name)


class PostImportPatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader the other finders return for a patched module."""

    def __init__(self, faults: list[Fault]):
        self.by_module: dict[str, list[Fault]] = {}
        for f in faults:
            self.by_module.setdefault(f.module, []).append(f)

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        faults = self.by_module.get(fullname)
        if not faults:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, faults)
                return spec
        return None


def _no_inductor_cache(config: object) -> None:
    # A compiled graph cached by a clean run would hide the fault, one cached by a faulty run
    # would plant it into clean runs: with a fault on, nothing is read from or written to the
    # FX graph cache (the C++ kernel cache is keyed by the source code, which is safe).
    config.fx_graph_cache = False  # type: ignore[attr-defined]
    config.fx_graph_remote_cache = False  # type: ignore[attr-defined]


def _no_autograd_cache(config: object) -> None:
    config.enable_autograd_cache = False  # type: ignore[attr-defined]
    config.enable_remote_autograd_cache = False  # type: ignore[attr-defined]


_HYGIENE = (
    Fault("(no fx graph cache)", "inductor lowering", "torch._inductor.config", "mismatch", "", "", _no_inductor_cache),
    Fault("(no autograd cache)", "aotautograd", "torch._functorch.config", "mismatch", "", "", _no_autograd_cache),
)

_BOOTED: list[str] = []


def boot(active_file: str | os.PathLike = ACTIVE_FILE) -> list[str]:
    """Called by the `.pth` line: install the patcher for the faults the file turns on."""
    if _BOOTED:
        return _BOOTED
    names = read_active(Path(active_file))
    if not names:
        return []
    try:
        data = json.loads(Path(active_file).read_text())
    except (OSError, ValueError):
        data = {}
    log = data.get("fired_log") if isinstance(data, dict) else None
    if log:
        _FIRED_LOG.append(str(log))
    if isinstance(data, dict) and data.get("fired_stderr"):
        _FIRED_STDERR.append(True)
    faults = load_catalogue()
    chosen = [faults[n] for n in names if n in faults]
    for f in chosen:
        if f.module in sys.modules:  # imported before the hook (should not happen at start)
            sys.stderr.write(f"nnforge fault {f.name}: {f.module} was imported before the hook\n")
    sys.meta_path.insert(0, PostImportPatcher(chosen + list(_HYGIENE)))
    _BOOTED.extend(f.name for f in chosen)
    return _BOOTED


def planted_in(module_name: str) -> tuple[str, ...]:
    """Faults applied to `module_name` in this process (imports it first)."""
    importlib.import_module(module_name)
    return tuple(APPLIED.get(module_name, ()))
