"""The solver generator as a seed source: config in, TestCases out."""

from __future__ import annotations

from typing import Iterator

from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase
from nnforge.generator.engine import Generated, GeneratorConfig, generate_graph
from nnforge.generator.materialize import to_program


INFERENCE_CALL = (CallStep(grad_enabled=False),)


def generate_case(cfg: GeneratorConfig) -> tuple[TestCase, Generated]:
    gen = generate_graph(cfg)
    meta = {
        "origin": "generator",
        "seed": cfg.seed,
        "n_nodes": len(gen.graph.nodes),
        "ops": gen.graph.ops(),
        "onnx_exportable": gen.onnx_exportable,
        "generation_ms": round(gen.elapsed_ms, 2),
        "binning": cfg.binning,
    }
    # Inference: with grad on, AOTAutograd would trace a backward for the parameters, and ops
    # without a derivative (floor_divide, ...) would fail there while eager's forward runs fine.
    case = TestCase(program=to_program(gen.graph), calls=INFERENCE_CALL, graph=gen.graph.to_json(), meta=meta)
    return case, gen


def generate_cases(base: GeneratorConfig, count: int) -> Iterator[tuple[TestCase, Generated]]:
    """`count` programs with seeds base.seed, base.seed+1, ...: the same base gives the same programs."""
    from dataclasses import replace

    for i in range(count):
        yield generate_case(replace(base, seed=base.seed + i))
