"""Compile caches no test can poison for another run: fresh ones, seeded with trusted probes only.

Inductor keeps compiled kernels (`.so` files it loads and runs) in TORCHINDUCTOR_CACHE_DIR. A
cache a test can write is a cache a test can poison, so no cache is shared by default: each
campaign has its own (`<campaign>/inductor-cache`), every other pool and every repro check a
fresh one of its own, removed when it is done. A user may still share one on purpose
(NNFORGE_INDUCTOR_CACHE_DIR).

A cache that starts empty costs ~20 s: Inductor first compiles a probe for each vector ISA the
CPU might have. Those probes are Inductor's own code, not a test's, so they are built once per
machine and torch version by a process that loads no program (`python -c` of Inductor's own
ISA check) and copied into every fresh cache: a fresh cache then costs what a warm one does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

SEED_ROOT = Path("~/.cache/nnforge/inductor-seed")
_ISA_PROBE = "from torch._inductor.cpu_vec_isa import pick_vec_isa; pick_vec_isa()"


def seed_dir() -> Path:
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return SEED_ROOT.expanduser() / f"torch-{version}"


def trusted_seed() -> Path | None:
    """The ISA probes, built once by Inductor's own check in a process that loads no program;
    None when they cannot be built (a fresh cache then builds its own)."""
    seed = seed_dir()
    if seed.is_dir():
        return seed
    seed.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=seed.parent))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(building)
    try:
        subprocess.run([sys.executable, "-c", _ISA_PROBE], env=env, cwd=building, check=True, timeout=300,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.rename(building, seed)  # atomic: a seed is whole or absent
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(building, ignore_errors=True)
        return seed if seed.is_dir() else None  # another process may have won the race
    return seed


def fresh_compile_cache(path: str | os.PathLike | None = None) -> str:
    """An empty compile cache (at `path`, or a new temp dir) holding only the trusted seed."""
    target = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="nnforge-inductor-"))
    target.mkdir(parents=True, exist_ok=True)
    seed = trusted_seed()
    if seed is not None:
        shutil.copytree(seed, target, dirs_exist_ok=True)
    return str(target)
