"""ONNX targets generate what the export path carries: the path is probed (real exporter, ONNX
checker, ONNX Runtime, TVM importer, in real sandboxed workers), the refusals go into a table
cached per versions, and generation for an ONNX target skips the instances the table blocks."""

from __future__ import annotations

from collections import Counter

import pytest

from nnforge.agent.export_probe import export_versions, probe_table
from nnforge.core.export_table import ExportTable, load_table
from nnforge.generator.engine import GeneratorConfig, generate_graph
from nnforge.generator.export_probe import node_keys


def test_a_key_is_blocked_only_where_a_check_refused_it_and_never_passed_it(tmp_path) -> None:
    t = ExportTable(versions={"torch": "x"})
    t.record("log(int64)", {"export": 0}, "checker: Log takes no int64", rank_key="log@2")
    t.record("prod(int16)", {"export": 0}, rank_key="prod@1")
    t.record("prod(int16)", {"export": 1, "ort": 0, "tvm": 1}, rank_key="prod@3")  # one attribute form exports
    t.record("tan(float64)", {"export": 1, "ort": 0, "tvm": 1}, rank_key="tan@2")
    t.record("add(float32)", {"export": 1, "ort": 1, "tvm": 1}, rank_key="add@2")
    # prod(int16) exports at rank 3: rank 1 is to blame; every probe of log was refused: the operator is
    assert t.blocked(["export"]) == {"log(int64)", "log", "prod@1"}
    # for ORT, prod(int16) and tan(float64) are refused whatever the rank: no rank takes the blame
    assert t.blocked_for_target("ort") == {"log(int64)", "log", "prod(int16)", "prod", "tan(float64)", "tan"}
    assert t.blocked_for_target("tvm") == {"log(int64)", "log", "prod@1"}  # log@2: int64 explains it, not the rank
    t.save(tmp_path)
    again = load_table(tmp_path, {"torch": "x"})
    assert again is not None and again.blocked_for_target("ort") == t.blocked_for_target("ort")
    assert again.reasons["log(int64)"].startswith("checker")
    assert load_table(tmp_path, {"torch": "y"}) is None  # another version's table is never used


def test_generation_skips_blocked_instances() -> None:
    seen: Counter[str] = Counter()
    for seed in range(30):
        seen.update(k for k, _ in node_keys(generate_graph(GeneratorConfig(n_nodes=6, seed=seed, onnx_only=True)).graph))
    blocked = frozenset(k for k, _ in seen.most_common(8))
    with_blocked: Counter[str] = Counter()
    for seed in range(30):
        gen = generate_graph(GeneratorConfig(n_nodes=6, seed=seed, onnx_only=True, blocked=blocked))
        with_blocked.update(k for k, _ in node_keys(gen.graph))
    assert not blocked & set(with_blocked)
    assert sum(with_blocked.values()) >= 0.8 * sum(seen.values())  # the graphs still grow, from other instances


@pytest.mark.slow
def test_probing_the_installed_path_blocks_what_it_refuses_and_only_that(pool) -> None:
    table = probe_table(pool.call, 2, ops=("log", "tan", "add"))
    assert table.versions == export_versions()
    assert "log(int64)" in table.blocked(["export"])  # ONNX's Log takes no integers: the checker refuses
    assert "tan(float64)" in table.blocked_for_target("ort")  # ORT has no float64 Tan kernel
    assert "tan(float64)" not in table.blocked_for_target("tvm")
    assert not any(k.startswith("add(float32") for k in table.blocked_for_target("ort"))
    assert not any(k.startswith("log(float32") for k in table.blocked_for_target("tvm"))


def test_onnx_tests_take_no_bfloat16_input_and_keep_other_configs_byte_for_byte() -> None:
    from dataclasses import replace

    from nnforge.generator.export_probe import onnx_config
    from nnforge.generator.materialize import to_program

    base = GeneratorConfig(n_nodes=6, seed=0, dtypes=("bfloat16", "float32"))
    for seed in range(20):
        gen = generate_graph(onnx_config(replace(base, seed=seed)))
        inputs = [gen.graph.values[v].dtype for v in gen.graph.inputs]
        assert "bfloat16" not in inputs
    plain = GeneratorConfig(n_nodes=6, seed=3)
    assert to_program(generate_graph(plain).graph) == to_program(generate_graph(replace(plain, blocked=frozenset())).graph)


def test_a_spelling_the_path_always_refuses_is_blocked_and_not_its_operator(tmp_path) -> None:
    from nnforge.generator.engine import form_keys
    from nnforge.oracle.export_probe import probe_program

    negative = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.permute({})\n" \
               "def make_inputs():\n    return (torch.randn(2, 3, 4),)\n"
    refused, _ = probe_program(negative.format("(0, -1, 1)"), ("export",))
    passed, _ = probe_program(negative.format("(0, 2, 1)"), ("export",))
    assert refused["export"] == 0 and passed["export"] == 1  # the exporter writes perm (0, -1, 1) as it is
    assert form_keys("permute", {"dims": (0, -1, 1)}) == ("permute[dims<0]",)
    assert form_keys("permute", {"dims": (0, 2, 1)}) == ()
    t = ExportTable(versions={"torch": "x"})
    t.record("permute(float32)", refused, rank_key="permute@3", forms=["permute[dims<0]"])
    t.record("permute(float32)", passed, rank_key="permute@3")
    t.record("permute(int64)", refused, rank_key="permute@1", forms=["permute[dims<0]"])
    t.record("permute(int64)", refused, rank_key="permute@1", forms=["permute[dims<0]"])
    # the spelling is to blame, not the operator, its dtypes (int64 was only ever spelt negative) or its rank
    assert t.blocked(["export"]) == {"permute[dims<0]"}
    t.save(tmp_path)
    assert load_table(tmp_path, {"torch": "x"}).blocked(["export"]) == {"permute[dims<0]"}
    seen = 0
    for seed in range(40):
        gen = generate_graph(GeneratorConfig(n_nodes=3, seed=seed, ops=("permute", "sin"), onnx_only=True,
                                             blocked=frozenset({"permute[dims<0]"})))
        for node in gen.graph.nodes:
            if node.op == "permute":
                seen += 1
                assert all(d >= 0 for d in node.attrs["dims"]), node.attrs
    assert seen >= 10  # permute is still generated, spelt with dims >= 0
