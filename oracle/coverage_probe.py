"""Line coverage of torch's compiler packages, measured inside a sandbox worker.

Why: a campaign that knows which tests reach new lines of Dynamo, AOTAutograd (functorch) and
Inductor can favour the seed sources, mutators and categories that keep reaching new code, and
can plot how much of the compiler it has exercised over time.

One `CoverageProbe` lives in each worker process and keeps every line it has seen, so each test
reports only the lines that are new *to this worker* (`{"torch/_dynamo/utils.py": [12, 40], ...}`):
small replies, and nothing to send for the common test that reaches no new code. A fresh worker
starts from nothing, so the parent (`nnforge.agent.coverage_map.CoverageMap`) keeps the union.
Under a fork server (the default slate) every test is a fresh process forked from the template,
so each reports every line it covered: larger replies, the same union.

Python 3.11 has no `sys.monitoring`, so coverage.py traces with its C tracer (`sys.settrace`):
compiling under it costs roughly 1.5-2x the time of compiling without; measure with
bench/campaign.py --coverage before relying on a figure. Work done in Inductor's compile
subprocesses is not seen.
"""

from __future__ import annotations

import os
import time
from typing import Any

COMPILER_PACKAGES = ("_dynamo", "_inductor", "_functorch")
_QUIET_WARNINGS = ["no-data-collected", "module-not-measured", "module-not-imported", "couldnt-parse",
                   "already-imported", "no-ctracer"]


def torch_root() -> str:
    """The folder holding the `torch` package; covered files are named relative to it."""
    import torch

    return os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))


class CoverageProbe:
    """Measures `packages` of torch around each test and hands back the lines new to this process."""

    def __init__(self, packages: tuple[str, ...] = COMPILER_PACKAGES) -> None:
        import coverage

        self.root = torch_root()
        include = [os.path.join(self.root, "torch", p, "*") for p in packages]
        self._cov = coverage.Coverage(data_file=None, include=include, branch=False, config_file=False,
                                      auto_data=False)
        self._cov.set_option("run:disable_warnings", _QUIET_WARNINGS)
        self._seen: dict[str, set[int]] = {}
        self._running = False

    @property
    def covered_lines(self) -> int:
        """Lines this process has covered so far (all tests together)."""
        return sum(len(v) for v in self._seen.values())

    def start(self) -> None:
        if not self._running:
            self._cov.start()
            self._running = True

    def stop(self) -> None:
        if self._running:
            self._cov.stop()
            self._running = False

    def take_new(self) -> dict[str, list[int]]:
        """Stop measuring and return {file relative to torch's parent folder: sorted new lines}.

        The raw data is erased after each take so the cost of a take follows what the last test
        touched, not everything the worker has ever run.
        """
        self.stop()
        data = self._cov.get_data()
        new: dict[str, list[int]] = {}
        for path in data.measured_files():
            lines = data.lines(path)
            if not lines:
                continue
            name = os.path.relpath(path, self.root)
            seen = self._seen.setdefault(name, set())
            fresh = set(lines) - seen
            if fresh:
                seen |= fresh
                new[name] = sorted(fresh)
        self._cov.erase()
        return new


_PROBE: CoverageProbe | None = None


def probe() -> CoverageProbe:
    """This process's probe (created on first use, so workers without coverage pay nothing)."""
    global _PROBE
    if _PROBE is None:
        _PROBE = CoverageProbe()
    return _PROBE


def run_with_coverage(func: Any, payload: Any) -> tuple[Any, dict[str, list[int]], float]:
    """`func(payload)` under the probe: (its result, new lines, seconds spent collecting)."""
    p = probe()
    p.start()
    try:
        result = func(payload)
    finally:
        p.stop()
    t = time.perf_counter()
    new = p.take_new()
    return result, new, time.perf_counter() - t
