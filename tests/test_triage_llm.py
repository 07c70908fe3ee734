"""The triage LLM step against a real OpenAI-compatible server on 127.0.0.1 (the real LangChain
client talks to it): the model may title a new cluster, propose a root-cause hypothesis and name
a duplicate, and NNForge takes only what passes its checks."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from nnforge.agent.cmd_triage import import_cases, triage_findings
from nnforge.agent.store import Store
from nnforge.core.settings import load_settings
from nnforge.core.signature import Signature
from nnforge.core.testcase import TestCase
from nnforge.oracle.sandbox import WorkerPool
from nnforge.triage.llm_triage import judge_advice, parse_advice
from nnforge.triage.report import TEMPLATE_PROSE

SIN_ONLY = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x) * 2.0

def make_inputs():
    return (torch.randn(3, 4),)
'''
COS_ONLY = SIN_ONLY.replace("torch.sin(x)", "torch.cos(x)")
ADD_ONLY = SIN_ONLY.replace("torch.sin(x) * 2.0", "x + x.flip(0)")
TARGETS = ["faulty_crash:sin|cos", "faulty_perturb:add"]


class AdvisingServer:
    """/v1/chat/completions answered by `respond(request JSON of the user message) -> content`."""

    def __init__(self, respond: Callable[[dict[str, Any]], str]):
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                user = next(m["content"] for m in body["messages"] if m["role"] == "user")
                asked = json.loads(user)
                server.requests.append(asked)
                payload = json.dumps({
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": respond(asked)},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(size=1, timeout_s=60, inductor_cache_dir=os.environ.get("TORCHINDUCTOR_CACHE_DIR")) as p:
        yield p


def _inbox(root: Path) -> Path:
    for name, program in (("a_sin", SIN_ONLY), ("b_cos", COS_ONLY), ("c_add", ADD_ONLY)):
        TestCase(program=program).save(root / name)
    return root


def _settings(**kw: Any):
    return load_settings(worker_timeout_s=60.0, value_search_budget_ms=100.0,
                         inductor_cache_dir=os.environ["TORCHINDUCTOR_CACHE_DIR"], **kw)


def test_the_model_titles_and_merges_within_rung_and_symptom_and_nothing_else(tmp_path: Path, pool) -> None:
    inbox = _inbox(tmp_path / "inbox")
    # offline, the structural key keeps the two crashes apart (they name different ops)
    offline = tmp_path / "offline"
    with Store(offline) as store:
        assert len(import_cases(store, pool, inbox, offline, TARGETS, _settings(llm_provider="none"))) == 3
        triage_findings(store, pool, offline, settings=_settings(llm_provider="none"), reduce=False, verify=False)
        assert sorted(c.signature.symptom for c in store.clusters()) == ["crash", "crash", "mismatch"]

    seen: dict[str, str] = {}

    def respond(asked: dict[str, Any]) -> str:
        new, existing = asked["new_cluster"], asked["existing_clusters"]
        if new["symptom"] == "crash" and not existing:
            return json.dumps({"title": "[faulty_crash] the planted lowering rejects trigonometric ops",
                               "hypothesis": "Hypothesis: the faulty_crash compiler has no lowering for sin or cos.",
                               "duplicate_of": None})
        if new["symptom"] == "crash":
            seen["crash"] = existing[0]["id"]
            return "```json\n" + json.dumps({"title": "same bug", "duplicate_of": existing[0]["id"]}) + "\n```"
        # a wrong result: the model invents a number and claims the crash cluster, which it was not shown
        return json.dumps({"title": "[faulty_perturb] 17 outputs are wrong", "duplicate_of": seen.get("crash", "x")})

    server = AdvisingServer(respond)
    camp = tmp_path / "camp"
    try:
        settings = _settings(llm_provider="openai", llm_base_url=server.base_url, llm_model="scripted-model",
                             llm_api_key="sk-test-not-secret", llm_cache_dir=str(tmp_path / "llm"), llm_max_retries=0)
        with Store(camp) as store:
            import_cases(store, pool, inbox, camp, TARGETS, settings)
            outcomes = triage_findings(store, pool, camp, settings=settings, reduce=False, verify=False)
            assert not [o.error for o in outcomes if o.error]
            clusters = {c.signature.symptom: c for c in store.clusters()}
            assert sorted(c.signature.symptom for c in store.clusters()) == ["crash", "mismatch"]
            crash, wrong = clusters["crash"], clusters["mismatch"]
            assert crash.count == 2 and "llm" in {o.how for o in outcomes}
            assert crash.llm_title == "[faulty_crash] the planted lowering rejects trigonometric ops"
            assert crash.llm_model == "scripted-model"
            assert wrong.llm_title is None  # it brought a number of its own
            assert wrong.count == 1
    finally:
        server.close()
    # three new structural clusters were asked about; the wrong result was offered no crash cluster
    assert len(server.requests) == 3
    assert [len(r["existing_clusters"]) for r in server.requests if r["new_cluster"]["symptom"] == "mismatch"] == [0]
    report = (camp / "findings" / crash.cluster_id / "report.md").read_text()
    assert report.startswith("# [faulty_crash] the planted lowering rejects trigonometric ops")
    assert "Root-cause hypothesis (written by an LLM, not verified): Hypothesis: the faulty_crash" in report
    assert "the title and the root-cause hypothesis were written by an LLM (scripted-model)" in report
    assert (camp / "findings" / wrong.cluster_id / "report.md").read_text().rstrip().endswith(TEMPLATE_PROSE)


def _cluster(cid: str, symptom: str, rung: str) -> Any:
    return SimpleNamespace(cluster_id=cid, title="t", last_seen=0.0,
                           signature=Signature(symptom=symptom, target="inductor", rung=rung, key=cid))


def test_replies_are_checked_part_by_part() -> None:
    sig = Signature(symptom="mismatch", target="inductor", rung="inductor", key="k")
    same, other = _cluster("c1", "mismatch", "inductor"), _cluster("c2", "mismatch", "aot_autograd")
    advice = judge_advice({"title": "[inductor] wrong `amax` on int8", "hypothesis": "Lowering of `amax`.",
                           "duplicate_of": "c2"},
                          template_title="[inductor] silently wrong result on `amax` (int8)",
                          source="amax int8 `amax`", signature=sig, candidates=[same, other], model="m")
    assert advice.title == "[inductor] wrong `amax` on int8" and advice.hypothesis == "Lowering of `amax`."
    assert advice.duplicate_of is None and "duplicate_of differs in rung or symptom" in advice.refused
    assert judge_advice({"duplicate_of": "c1"}, template_title="", source="", signature=sig,
                        candidates=[same], model="m").duplicate_of == "c1"
    assert judge_advice({"title": "[inductor] wrong result in torch 2.14"}, template_title="[inductor] x", source="",
                        signature=sig, candidates=[], model="m").title is None
    with pytest.raises(ValueError):
        parse_advice("I think these are the same bug.")
