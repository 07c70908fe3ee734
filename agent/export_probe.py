"""The export table a campaign's ONNX targets generate by: loaded from disk when these versions
were probed before, else probed now in the campaign's own sandboxed workers (a minute or two on
two cores) and saved. See core/export_table.py and generator/export_probe.py for what it holds.
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from nnforge.core.export_table import CHECKS, ExportTable, load_table

PROBE_FUNCTION = "nnforge.oracle.export_probe:probe_export"
PAIRS_PER_CALL = 24  # (operator, dtype) pairs per worker call: a few seconds each
CALL_TIMEOUT_S = 240.0


def export_versions() -> dict[str, str]:
    """What decides the table: the installed packages of the path and NNForge's operator specs."""
    out = {}
    for dist in ("torch", "onnx", "onnxruntime", "apache-tvm"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    from nnforge.generator import export_probe, spec

    specs = Path(spec.__file__).parent / "specs"
    digest = hashlib.sha256()
    for path in sorted([*specs.glob("*.py"), Path(spec.__file__), Path(export_probe.__file__)]):
        digest.update(path.name.encode() + path.read_bytes())
    out["nnforge specs"] = digest.hexdigest()[:16]
    return out


def probe_table(call: Callable[..., Any], workers: int, *, progress: Callable[[int, int], None] | None = None,
                ops: tuple[str, ...] | None = None, seed: int = 0) -> ExportTable:
    """Probe every (operator, dtype) pair through `call` (a WorkerPool's), `workers` calls at a time.
    A batch whose worker died or timed out is skipped: its keys stay unknown, so nothing is blocked."""
    from nnforge.generator.export_probe import probe_pairs

    t0 = time.monotonic()
    pairs = probe_pairs(ops)
    batches = [pairs[i:i + PAIRS_PER_CALL] for i in range(0, len(pairs), PAIRS_PER_CALL)]
    table = ExportTable(versions=export_versions())
    done = 0

    def run(batch: list[tuple[str, str]]) -> list[Any]:
        payload = {"pairs": [[op, dtype, seed] for op, dtype in batch], "checks": list(CHECKS)}
        outcome = call(PROBE_FUNCTION, payload, timeout_s=CALL_TIMEOUT_S)
        value = outcome.value if outcome.ok else None
        if not isinstance(value, dict) or not isinstance(value.get("results"), list):
            return []
        return value["results"]

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="nnforge-export-probe") as threads:
        for results in threads.map(run, batches):
            for row in results:
                if isinstance(row, list) and len(row) in (4, 5) and isinstance(row[0], str) and isinstance(row[1], str) \
                        and isinstance(row[2], dict):
                    forms = [f for f in (row[4] if len(row) == 5 and isinstance(row[4], list) else []) if isinstance(f, str)]
                    table.record(row[0], {c: row[2].get(c) for c in CHECKS if row[2].get(c) in (0, 1)},
                                 str(row[3] or ""), rank_key=row[1], forms=forms)
            done += 1
            if progress is not None:
                progress(done, len(batches))
    table.probe_s = round(time.monotonic() - t0, 1)
    return table


def export_table_for(folder: str, call: Callable[..., Any], workers: int,
                     event: Callable[[str], None] = lambda s: None) -> ExportTable:
    """The table for the installed versions: from `folder` when probed before, else probed and saved."""
    versions = export_versions()
    table = load_table(folder, versions)
    if table is not None:
        event(f"export table: {len(table.probes)} probes made before ({folder})")
        return table
    event("export table: probing what the installed ONNX path carries (once per set of versions) ...")
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.monotonic() - last[0] > 15 or done == total:
            last[0] = time.monotonic()
            event(f"export table: {done}/{total} probe batches")

    table = probe_table(call, workers, progress=progress)
    try:
        path = table.save(folder)
        event(f"export table: {len(table.probes)} probes in {table.probe_s:.0f} s, saved to {path}")
    except OSError as e:
        event(f"export table: probed in {table.probe_s:.0f} s but not saved ({e}); the next campaign probes again")
    return table
