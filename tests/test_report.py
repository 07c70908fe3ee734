"""The campaign summary (summary.md), the static HTML report, and compiler coverage in workers."""

from __future__ import annotations

import re
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from nnforge.agent.coverage_map import CoverageMap
from nnforge.agent.report_html import write_report
from nnforge.agent.scheduler import Arm, Scheduler
from nnforge.agent.store import CampaignStore, QueuedTest, Store
from nnforge.agent.summary import write_summary
from nnforge.agent.svg_plots import Series, line_chart, nice_ticks
from nnforge.core.signature import Signature
from nnforge.core.verdict import Symptom, Verdict

TITLE_A = "inductor crashes lowering aten.cumsum on <lambda> & friends"
TITLE_B = "inductor: wrong result for int8 -> float promotion"
TITLE_C = "ort: mismatch after Cast(bool) folding"

# (category, target, symptom, cluster) for 20 tests
PLAN = ([("dtype_promotion", "inductor", Symptom.CRASH, "A")] * 2 + [("dtype_promotion", "inductor", Symptom.MISMATCH, "B")]
        + [("dtype_promotion", "inductor", Symptom.PASS, None)] * 7
        + [("seed", "ort", Symptom.MISMATCH, "C")] + [("seed", "ort", Symptom.INVALID, None)] * 2
        + [("seed", "ort", Symptom.PASS, None)] * 7)
CLUSTER_IDS = {"A": "a" * 16, "B": "b" * 16, "C": "c" * 16}
TITLES = {"A": TITLE_A, "B": TITLE_B, "C": TITLE_C}


def _campaign(folder: Path) -> CampaignStore:
    """A finished 10-minute campaign written through the store's own API."""
    store = CampaignStore(folder)
    t0 = time.time() - 600
    store.set_meta("campaign_started", str(t0))
    store.set_json("campaign_config", {"targets": ["inductor", "ort"], "workers": 2})
    sched = Scheduler(["generator"], ["dtype_promotion"], ["inductor", "ort"], seed=1)
    for i, (category, target, symptom, cluster) in enumerate(PLAN):
        arm = Arm("generator", category, target)
        test = QueuedTest(test_no=i, case_id=f"case{i}", target=target, folder=str(folder / "cases" / f"case{i}"),
                          source="generator", mutator=None if category == "seed" else "promote_dtype", category=category,
                          arm=arm.key, seed_no=i, t_generate=0.25, t_mutate=0.0 if category == "seed" else 0.05)
        store.enqueue(test)
        verdict = Verdict(target=target, symptom=symptom, rung=target if symptom.is_bug else None)
        fid = store.record_verdict(test, verdict, t_search=0.1, t_oracle=2.0, elapsed_s=30.0 * i, novel=cluster is not None)
        sched.reward(arm, 1.0 if cluster else 0.0)
        if cluster is not None:
            assert fid is not None
            sig = Signature(symptom=symptom.value, target=target, rung=target, key=f"key-{cluster}")
            store.assign_cluster(fid, CLUSTER_IDS[cluster], sig, title=TITLES[cluster])
            if cluster == "C":
                store.set_repro_status(CLUSTER_IDS[cluster], "unreproduced", "the script saw no bug (exit codes [0])")
            else:
                store.set_repro_status(CLUSTER_IDS[cluster], "reproduced", "exit 1 in 1 fresh run(s)")
    for j, (tests, rss, covered) in enumerate([(0, 1000.0, 0), (10, 1300.0, 5000), (20, 1100.0, 6200)]):
        store.add_stats({"ts": t0 + 300 * j, "elapsed_s": 300.0 * j, "tests": tests, "tests_per_min": 2.0, "bugs": 2 * j,
                         "clusters": j, "invalid": j, "worker_restarts": j, "timeouts": 0, "segfaults": 0, "rss_mb": rss,
                         "covered_lines": covered, "json": {}})
    store.set_json("scheduler_state", sched.to_json())
    store.set_meta("campaign_elapsed_s", "600")
    store.set_meta("campaign_status", "finished")
    report = folder / "findings" / CLUSTER_IDS["A"] / "report.md"
    report.parent.mkdir(parents=True)
    report.write_text("# draft\n")
    return store


class _TagBalance(HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "source", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        pass

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def _svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg\b.*?</svg>", html, flags=re.S)]


def test_summary_lists_campaign_figures_clusters_yield_and_scheduler(tmp_path: Path) -> None:
    store = _campaign(tmp_path)
    text = write_summary(tmp_path, store).read_text()
    assert "**tests**: 20" in text
    assert "**tests per minute**: 2.0 (1.0 per worker)" in text
    assert "**unique bugs (clusters whose repro.py reproduced)**: 2" in text
    assert "**compiler lines covered**: 6200" in text
    for title in TITLES.values():
        assert title in text
    listed, _, unlisted = text.partition("## Not listed")
    assert TITLE_A in listed and TITLE_B in listed and TITLE_C not in listed
    assert TITLE_C in unlisted and "the script saw no bug (exit codes [0])" in unlisted
    assert f"[report.md](findings/{CLUSTER_IDS['A']}/report.md)" in text
    assert "| dtype_promotion | 10 | 3 | 30.0% | 2 | 0.0% |" in text
    assert "| seed | 10 | 1 | 10.0% | 1 | 20.0% |" in text
    assert "| inductor | 10 | 7 | 2 | 1 |" in text  # verdicts per target: tests, pass, crash, mismatch
    # the scheduler's arm state: tests, rewards, clusters the arm found first, of those listed
    assert "| generator / dtype_promotion / inductor | 10 | 3 | 2 | 2 |" in text
    assert "| generator / seed / ort | 10 | 1 | 1 | 0 |" in text
    assert "thompson-beta" in text
    assert "first 1000 MB, last 1100 MB, max 1300 MB" in text
    assert "**worker restarts**: 2" in text
    # stage times: generate 20 x 0.25 s of 20 x (0.25 + 0.1 + 2.0) + 10 x 0.05
    assert re.search(r"\| oracle \| 40\.0 \| 84\.2% \|", text)


def test_report_is_one_static_page_with_parseable_svg_plots(tmp_path: Path) -> None:
    store = _campaign(tmp_path)
    html = write_report(tmp_path, store).read_text()
    checker = _TagBalance()
    checker.feed(html)
    assert checker.errors == [] and checker.stack == []
    assert "<script" not in html and "<link" not in html and "src=" not in html
    assert not re.search(r"(href|src)=\"https?://", html)
    svgs = _svgs(html)
    titles = [el.findtext("{http://www.w3.org/2000/svg}title") for el in svgs]
    for want in ("Tests over time", "Unique bugs over time", "Yield per category", "Yield per target",
                 "Worker restarts over time", "Worker memory over time", "Share of time per stage"):
        assert want in titles
    assert any(t and t.startswith("Compiler lines covered") for t in titles)
    tests_svg = svgs[titles.index("Tests over time")]
    assert tests_svg.find("{http://www.w3.org/2000/svg}polyline") is not None
    assert "tests (20)" in ET.tostring(tests_svg, encoding="unicode")
    cat_svg = ET.tostring(svgs[titles.index("Yield per category")], encoding="unicode")
    assert "30.0%" in cat_svg and "dtype_promotion" in cat_svg
    assert "&lt;lambda&gt; &amp; friends" in html  # titles are escaped, not injected
    assert f'href="findings/{CLUSTER_IDS["A"]}/report.md"' in html
    assert "promote_dtype" in html  # yield per mutator


def test_empty_and_pre_campaign_stores_still_render(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    with Store(empty) as store:
        assert "_none found_" in write_summary(empty, store).read_text()
        html = write_report(empty, store).read_text()
    assert "no data yet" in html and len(_svgs(html)) >= 6
    old = tmp_path / "old"  # a store from `nnforge triage`: no stats, no campaign columns
    with Store(old) as store:
        crash = Verdict(target="inductor", symptom=Symptom.CRASH, rung="inductor")
        store.add_test("x", Verdict(target="inductor", symptom=Symptom.PASS))
        store.add_test("y", crash)
        fid = store.add_finding("y", crash)
        store.assign_cluster(fid, "d" * 16, Signature("crash", "inductor", "inductor", "k"), title=TITLE_B)
        text = write_summary(old, store).read_text()
        html = write_report(old, store).read_text()
    assert TITLE_B in text and "| inductor | 2 | 1 | 1 |" in text
    assert all(el.tag.endswith("svg") for el in _svgs(html))


def test_line_chart_axis_covers_the_data() -> None:
    assert nice_ticks(0, 97)[-1] >= 97 and nice_ticks(0, 97)[0] == 0
    svg = ET.fromstring(line_chart([Series("s", ((0.0, 3.0), (5.0, 42.0)))], title="t"))
    labels = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "50" in labels and "s (42)" in labels


def test_coverage_map_counts_only_lines_new_to_the_campaign() -> None:
    cmap = CoverageMap()
    assert cmap.add({"torch/_dynamo/a.py": [1, 2, 3]}) == 3
    assert cmap.add({"torch/_dynamo/a.py": [2, 3, 4], "torch/_inductor/b.py": [7]}) == 2
    assert cmap.covered_lines == 5
    assert cmap.per_package()["torch/_inductor"] == 1
    assert CoverageMap.from_json(cmap.to_json()).covered_lines == 5


PROGRAM = '''
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x * 3.0 - 1.0).cumsum(dim=-1)


def make_inputs():
    return (torch.randn(3, 5),)
'''


@pytest.mark.slow
def test_worker_reports_dynamo_lines_once_then_nothing_new(tmp_path: Path) -> None:
    from nnforge.oracle.sandbox import WorkerPool

    payload = {"program": PROGRAM, "targets": ["eager"], "coverage": True, "search": False}
    # a worker that serves many tests remembers its lines; a fork server's calls each start from
    # the template, so each reports every line it covered and the parent's map keeps the union
    with WorkerPool(size=1, timeout_s=240, inductor_cache_dir=str(tmp_path / "inductor"), slate="reuse") as pool:
        first = pool.call("nnforge.oracle.job:run_case", payload)
        second = pool.call("nnforge.oracle.job:run_case", payload)
        plain = pool.call("nnforge.oracle.job:run_case", {**payload, "coverage": False})
    assert first.ok and second.ok and plain.ok, (first.exc_message, second.exc_message)
    assert first.value["verdicts"][0]["symptom"] == "pass"
    new1, new2 = first.value["coverage_new"], second.value["coverage_new"]
    dynamo = sum(len(v) for k, v in new1.items() if k.startswith("torch/_dynamo/"))
    assert dynamo > 500, sorted(new1)[:5]
    assert all(k.startswith(("torch/_dynamo/", "torch/_inductor/", "torch/_functorch/")) for k in new1)
    assert sum(map(len, new2.values())) < sum(map(len, new1.values())) / 10
    assert "coverage_new" not in plain.value
    cmap = CoverageMap()
    assert cmap.add(new1) == sum(map(len, new1.values()))
    assert cmap.add(new2) <= sum(map(len, new2.values()))
