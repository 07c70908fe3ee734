"""Graph IR: what the generator produced, concretely, kept beside the program so that
graph-level reduction and ONNX export can work on structure instead of text.

Values carry dtype and concrete shape; nodes are operator instances with concrete attributes.
Placeholders are split into `inputs` (fed by make_inputs) and `weights` (nn.Parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Value:
    id: int
    dtype: str
    shape: list[int]

    @property
    def name(self) -> str:
        return f"v{self.id}"


@dataclass
class Node:
    id: int
    op: str
    attrs: dict[str, Any]
    inputs: list[int]
    outputs: list[int]
    solver_attrs: list[str] = field(default_factory=list)  # attributes whose values z3 chose


@dataclass
class Graph:
    values: dict[int, Value] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)  # topological order
    inputs: list[int] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def consumers(self, vid: int) -> list[Node]:
        return [n for n in self.nodes if vid in n.inputs]

    def producer(self, vid: int) -> Node | None:
        for n in self.nodes:
            if vid in n.outputs:
                return n
        return None

    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]

    def to_json(self) -> dict[str, Any]:
        return {
            "values": [{"id": v.id, "dtype": v.dtype, "shape": list(v.shape)} for v in self.values.values()],
            "nodes": [
                {"id": n.id, "op": n.op, "attrs": encode_attrs(n.attrs), "inputs": n.inputs, "outputs": n.outputs,
                 **({"solver_attrs": n.solver_attrs} if n.solver_attrs else {})}
                for n in self.nodes
            ],
            "inputs": list(self.inputs),
            "weights": list(self.weights),
            "outputs": list(self.outputs),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Graph":
        return cls(
            values={v["id"]: Value(v["id"], v["dtype"], list(v["shape"])) for v in d["values"]},
            nodes=[Node(n["id"], n["op"], decode_attrs(n["attrs"]), list(n["inputs"]), list(n["outputs"]),
                        list(n.get("solver_attrs", []))) for n in d["nodes"]],
            inputs=list(d["inputs"]),
            weights=list(d["weights"]),
            outputs=list(d["outputs"]),
        )


def encode_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """JSON has no tuples and no inf; attributes have both, and the difference matters to torch."""
    return {k: _enc(v) for k, v in attrs.items()}


def decode_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: _dec(v) for k, v in attrs.items()}


def _enc(v: Any) -> Any:
    if isinstance(v, tuple):
        return {"__tuple__": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return {"__float__": repr(v)}
    return v


def _dec(v: Any) -> Any:
    if isinstance(v, dict) and "__tuple__" in v:
        return tuple(_dec(x) for x in v["__tuple__"])
    if isinstance(v, dict) and "__float__" in v:
        return float(v["__float__"])
    if isinstance(v, list):
        return [_dec(x) for x in v]
    return v
