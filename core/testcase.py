"""TestCase: the one thing every stage passes to the next (see DESIGN.md).

On disk a TestCase is a folder a human can read: program.py, calls.json, meta.json,
graph.json when the generator made it, inputs.pt / state_dict.pt once value search chose values.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nnforge.core.calls import SINGLE_CALL, CallStep

PROGRAM_FILE = "program.py"
CALLS_FILE = "calls.json"
META_FILE = "meta.json"
GRAPH_FILE = "graph.json"
INPUTS_FILE = "inputs.pt"
STATE_FILE = "state_dict.pt"


class CaseFormatError(ValueError):
    """A folder that should hold a TestCase does not; the message says what is wrong."""


@dataclass(frozen=True)
class TestCase:
    program: str
    inputs: tuple[Any, ...] | None = None
    state_dict: dict[str, Any] | None = None
    calls: tuple[CallStep, ...] = SINGLE_CALL
    graph: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    __test__ = False  # not a pytest class

    @property
    def case_id(self) -> str:
        """Content hash of program and calls: equal programs share an id across runs."""
        h = hashlib.sha256(self.program.encode())
        h.update(json.dumps([c.to_json() for c in self.calls], sort_keys=True).encode())
        return h.hexdigest()[:16]

    def with_(self, **changes: Any) -> "TestCase":
        return replace(self, **changes)

    # -- folder (de)serialisation -------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> Path:
        """Write the folder atomically enough that a crash never leaves a half-written program."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        _write_text(folder / PROGRAM_FILE, self.program)
        _write_text(folder / CALLS_FILE, json.dumps([c.to_json() for c in self.calls], indent=2))
        _write_text(folder / META_FILE, json.dumps(self.meta, indent=2, sort_keys=True, default=str))
        if self.graph is not None:
            _write_text(folder / GRAPH_FILE, json.dumps(self.graph, indent=1))
        if self.inputs is not None or self.state_dict is not None:
            import torch

            if self.inputs is not None:
                torch.save(tuple(self.inputs), folder / INPUTS_FILE)
            if self.state_dict is not None:
                torch.save(dict(self.state_dict), folder / STATE_FILE)
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike, *, with_values: bool = True) -> "TestCase":
        folder = Path(folder)
        if not folder.is_dir():
            raise CaseFormatError(f"{folder}: not a folder (a TestCase is a folder holding {PROGRAM_FILE})")
        program_path = folder / PROGRAM_FILE
        if not program_path.is_file():
            raise CaseFormatError(f"{folder}: no {PROGRAM_FILE} in it")
        program = program_path.read_text()
        calls = SINGLE_CALL
        if (folder / CALLS_FILE).is_file():
            try:
                raw = json.loads((folder / CALLS_FILE).read_text())
                if not isinstance(raw, list):
                    raise ValueError("expected a JSON list of call steps")
                calls = tuple(CallStep.from_json(s) for s in raw) or SINGLE_CALL
            except (ValueError, TypeError) as e:
                raise CaseFormatError(f"{folder / CALLS_FILE}: {e}") from e
        meta: dict[str, Any] = {}
        if (folder / META_FILE).is_file():
            try:
                meta = json.loads((folder / META_FILE).read_text())
            except ValueError as e:
                raise CaseFormatError(f"{folder / META_FILE}: {e}") from e
            if not isinstance(meta, dict):
                raise CaseFormatError(f"{folder / META_FILE}: must hold a JSON object, not a {type(meta).__name__}")
        graph = None
        if (folder / GRAPH_FILE).is_file():
            try:
                graph = json.loads((folder / GRAPH_FILE).read_text())
            except ValueError as e:
                raise CaseFormatError(f"{folder / GRAPH_FILE}: {e}") from e
        inputs = state = None
        if with_values and ((folder / INPUTS_FILE).is_file() or (folder / STATE_FILE).is_file()):
            import torch

            if (folder / INPUTS_FILE).is_file():
                raw = _load_tensor_file(folder / INPUTS_FILE)
                if not isinstance(raw, (tuple, list)):
                    raise CaseFormatError(f"{folder / INPUTS_FILE}: must hold a tuple or list of forward's arguments, "
                                          f"not a {type(raw).__name__}")
                inputs = tuple(raw)
            if (folder / STATE_FILE).is_file():
                raw = _load_tensor_file(folder / STATE_FILE)
                if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
                    raise CaseFormatError(f"{folder / STATE_FILE}: must hold a state dict (names to tensors), "
                                          f"not a {type(raw).__name__}")
                state = dict(raw)
        return cls(program=program, inputs=inputs, state_dict=state, calls=calls, graph=graph, meta=meta)


def _load_tensor_file(path: Path) -> Any:
    """A `torch.save` file, loaded weights-only; any failure is one CaseFormatError naming it."""
    import torch

    try:
        return torch.load(path, weights_only=True)
    except Exception as e:  # garbage, a truncated file, a pickle of something other than tensors
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise CaseFormatError(f"{path}: not a tensor file torch.load(weights_only=True) can read "
                              f"({type(e).__name__}: {first})") from None


def _write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
