"""The LLM client and mutator against a real OpenAI-compatible HTTP server on 127.0.0.1.

The server (http.server in a thread) answers /v1/chat/completions from a script: valid code,
broken code, garbage, HTTP 429, a reply that hangs past the client's timeout. The real
`langchain_openai.ChatOpenAI` client talks to it; mutants run in eager in real sandbox workers.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from nnforge.core.llm import LLMClient, LLMUnavailable
from nnforge.core.settings import load_settings
from nnforge.core.testcase import TestCase
from nnforge.mutators.base import mutators_for
from nnforge.mutators.examples import ExampleBank
from nnforge.mutators.llm import LLMMutator, parse_reply, ReplyError
from nnforge.mutators.validate import check_case, eager_probe
from nnforge.oracle.sandbox import WorkerPool

SEED = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = self.lin(x)
        z = torch.relu(y)
        return (z,)


def make_inputs():
    return (torch.randn([2, 4]),)
'''

GOOD = SEED.replace('''        z = torch.relu(y)
''', '''        parts = [y, y * 2.0, y - 1.0]
        parts.reverse()
        extra = {"a": 1.0}
        scale = extra.setdefault("b", 0.5) + extra.pop("c", 0.25)
        z = torch.relu(parts[-1]) * scale + parts[0][:, ::2].sum()
''')
BROKEN = SEED.replace("z = torch.relu(y)", "z = torch.relu(y).view(5)")
OFFLINE_B1 = {m.name for m in mutators_for("B1")}


def fenced(program: str) -> str:
    return f"Here is the rewrite.\n\n```python\n{program}```\n"


class ScriptedServer:
    """An OpenAI-compatible chat endpoint replying from a script; counts and keeps requests.

    Script entries: ("ok", content[, total_tokens]), ("status", code), ("hang", seconds, content).
    """

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server.lock:
                    server.requests.append({"path": self.path, "body": body})
                    action = server.script.pop(0) if server.script else ("status", 500)
                if action[0] == "hang":
                    time.sleep(action[1])
                    action = ("ok", action[2])
                if action[0] == "status":
                    self._send(action[1], {"error": {"message": f"scripted {action[1]}", "type": "scripted"}},
                               {"Retry-After": "0"} if action[1] == 429 else {})
                    return
                content, total = action[1], (action[2] if len(action) > 2 else 120)
                self._send(200, {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": total - 20, "completion_tokens": 20, "total_tokens": total},
                })

            def _send(self, code, payload, headers=None):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def user_prompts(self) -> list[str]:
        return [m["content"] for r in self.requests for m in r["body"]["messages"] if m["role"] == "user"]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory():
    made = []

    def make(script):
        s = ScriptedServer(script)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def client_for(base_url: str, cache_dir, **overrides) -> LLMClient:
    settings = load_settings(llm_provider="openai", llm_base_url=base_url, llm_api_key="sk-test-not-secret",
                             llm_model="scripted-model", llm_cache_dir=str(cache_dir), llm_backoff_s=0.01,
                             **{"llm_timeout_s": 5.0, "llm_max_retries": 2, **overrides})
    client = LLMClient.from_settings(settings)
    assert client is not None
    return client


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(size=1, timeout_s=60, inductor_cache_dir=os.environ.get("TORCHINDUCTOR_CACHE_DIR")) as p:
        p.warmup()
        yield p


@pytest.fixture
def seed_case():
    return TestCase(program=SEED)


def test_provider_none_means_no_client_and_an_unknown_provider_is_an_error():
    assert LLMClient.from_settings(load_settings(llm_provider="none")) is None
    with pytest.raises(ValueError, match="unknown LLM provider"):
        LLMClient.from_settings(load_settings(llm_provider="bard"))


def test_valid_reply_becomes_a_mutant_that_runs_in_eager(server_factory, tmp_path, pool, seed_case):
    server = server_factory([("ok", fenced(GOOD))])
    client = client_for(server.base_url, tmp_path / "cache")
    m = LLMMutator("B1", client, bank=ExampleBank(tmp_path / "bank"))
    mutant = m.mutate(seed_case, random.Random(0), eager_probe(pool.call))
    assert mutant is not None and mutant.program.strip() == GOOD.strip()
    assert mutant.meta["mutator"] == "llm_B1" and mutant.meta["category"] == "B1"
    assert mutant.meta["llm"]["model"] == "scripted-model" and len(mutant.meta["llm"]["prompt_hash"]) == 64
    assert check_case(pool.call, mutant).ok
    (prompt,) = server.user_prompts()
    assert SEED.strip() in prompt and "reverse" in prompt and "### Example 1" in prompt  # offline starter example
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert "sk-test-not-secret" not in json.dumps(mutant.meta)
    assert client.stats()["tokens"] == 120
    assert any(e.origin == "llm" and e.program == mutant.program for e in m.bank.examples("B1"))


def test_broken_reply_goes_back_with_its_error_and_the_repair_is_used(server_factory, tmp_path, pool, seed_case):
    server = server_factory([("ok", fenced(BROKEN)), ("ok", fenced(GOOD))])
    m = LLMMutator("B1", client_for(server.base_url, tmp_path / "cache"), bank=ExampleBank(tmp_path / "bank"))
    mutant = m.mutate(seed_case, random.Random(0), eager_probe(pool.call))
    assert mutant is not None and mutant.program.strip() == GOOD.strip()
    assert mutant.meta["llm"]["repairs"] == 1 and m.stats["repaired"] == 1
    first, repair = server.user_prompts()
    assert "view(5)" in repair and "call 0" in repair and "RuntimeError" in repair
    assert first in repair  # the repair prompt restates the task


def test_garbage_replies_are_repaired_then_given_up_for_an_offline_mutant(server_factory, tmp_path, pool, seed_case):
    server = server_factory([("ok", "I am sorry, I cannot do that.")] * 3)
    bank = ExampleBank(tmp_path / "bank")
    m = LLMMutator("B1", client_for(server.base_url, tmp_path / "cache"), bank=bank, max_repairs=2)
    mutant = m.mutate(seed_case, random.Random(0), eager_probe(pool.call))
    assert len(server.requests) == 3
    assert "no Python code block" in server.user_prompts()[1]
    assert mutant is not None and mutant.meta["mutator"] in OFFLINE_B1
    assert "failed its checks 3 times" in mutant.meta["llm_fallback"]
    assert check_case(pool.call, mutant).ok
    assert all(e.failures == 1 for e in bank.examples("B1"))  # the examples shown are debited


def test_http_429_is_retried_with_backoff(server_factory, tmp_path):
    server = server_factory([("status", 429), ("status", 503), ("ok", "fine")])
    client = client_for(server.base_url, tmp_path / "cache")
    assert client.complete("sys", "user") == "fine"
    assert len(server.requests) == 3 and client.stats()["retries"] == 2 and client.stats()["calls"] == 1


def test_a_hanging_reply_times_out_and_is_retried(server_factory, tmp_path):
    server = server_factory([("hang", 3.0, "late"), ("ok", "on time")])
    client = client_for(server.base_url, tmp_path / "cache", llm_timeout_s=0.5)
    start = time.perf_counter()
    assert client.complete("sys", "user") == "on time"
    assert time.perf_counter() - start < 2.5
    assert client.stats()["retries"] == 1


def test_replies_that_keep_hanging_make_the_mutator_fall_back(server_factory, tmp_path, seed_case, caplog):
    server = server_factory([("hang", 2.0, "late")] * 2)
    client = client_for(server.base_url, tmp_path / "cache", llm_timeout_s=0.3, llm_max_retries=1)
    m = LLMMutator("H1", client, bank=ExampleBank(tmp_path / "bank"))
    with caplog.at_level(logging.WARNING, logger="nnforge.mutators.llm"):
        mutant = m.mutate(seed_case, random.Random(0))  # no probe: static checks only
    assert mutant is not None and mutant.meta["mutator"] in {x.name for x in mutators_for("H1")}
    assert "timed out" in mutant.meta["llm_fallback"].lower()
    assert client.stats()["failures"] == 1 and len(caplog.records) == 1


def test_identical_calls_are_answered_from_the_disk_cache(server_factory, tmp_path):
    server = server_factory([("ok", "answer one"), ("ok", "answer two")])
    client = client_for(server.base_url, tmp_path / "cache")
    assert client.complete("sys", "same prompt") == "answer one"
    assert client.complete("sys", "same prompt") == "answer one"
    rerun = client_for(server.base_url, tmp_path / "cache")  # a rerun of the campaign: a new process
    assert rerun.complete("sys", "same prompt") == "answer one"
    assert len(server.requests) == 1
    assert client.stats()["cache_hits"] == 1 and rerun.stats() == {"calls": 0, "cache_hits": 1, "tokens": 0,
                                                                   "retries": 0, "failures": 0}
    assert client.complete("sys", "another prompt") == "answer two" and len(server.requests) == 2
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 2 and all("sk-test" not in f.read_text() for f in files)


def test_a_campaign_keeps_its_llm_cache_in_its_store_and_a_resumed_campaign_reuses_it(server_factory, tmp_path,
                                                                                        monkeypatch):
    from nnforge.agent.campaign import Campaign
    from nnforge.agent.campaign_config import CampaignConfig
    from nnforge.agent.store import CampaignStore

    server = server_factory([("ok", "answer one"), ("ok", "answer two")])
    disk = tmp_path / "disk-cache"
    for key, value in {"NNFORGE_LLM_BASE_URL": server.base_url, "NNFORGE_LLM_API_KEY": "sk-test-not-secret",
                       "NNFORGE_LLM_MODEL": "scripted-model", "NNFORGE_LLM_CACHE_DIR": str(disk)}.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "camp"

    def opened(campaign: Campaign) -> LLMClient:
        campaign._open()  # what run() does first: lock, store, seed sources, mutators (with their client)
        return campaign.llm_mutators["B1"].client

    first = Campaign(CampaignConfig(out=str(out), budget_s=60, targets=("aot_eager",), llm="openai", triage=False))
    client = opened(first)
    assert client.cache_dir is None  # not the disk cache: the store's table
    assert client.complete("sys", "same prompt") == "answer one"
    assert client.complete("sys", "same prompt") == "answer one"  # a cache hit: no second request
    assert len(server.requests) == 1 and client.stats()["cache_hits"] == 1
    first.store.close()
    first.lock.release()

    resumed = Campaign.resume(out, budget_s=120)
    again = opened(resumed)
    assert again.complete("sys", "same prompt") == "answer one" and len(server.requests) == 1  # from DIR
    assert again.complete("sys", "another prompt") == "answer two" and len(server.requests) == 2
    resumed.store.close()
    resumed.lock.release()
    with CampaignStore(out) as store:
        assert store.llm_cache_count() == 2
    assert not disk.exists()  # nothing went to the disk cache
    rows = sqlite3.connect(out / "store.sqlite").execute("SELECT model, reply FROM llm_cache ORDER BY created").fetchall()
    assert rows == [("scripted-model", "answer one"), ("scripted-model", "answer two")]
    assert "sk-test" not in (out / "store.sqlite").read_bytes().decode("latin-1")


def test_a_spent_budget_falls_back_to_offline_with_one_warning(server_factory, tmp_path, pool, seed_case, caplog):
    server = server_factory([("ok", fenced(GOOD), 999_990)] + [("ok", fenced(GOOD))] * 3)
    client = client_for(server.base_url, tmp_path / "cache", llm_token_budget=1_000_000)
    m = LLMMutator("B1", client, bank=ExampleBank(tmp_path / "bank"))
    probe = eager_probe(pool.call)
    with caplog.at_level(logging.WARNING, logger="nnforge.mutators.llm"):
        first = m.mutate(seed_case, random.Random(0), probe)
        later = [m.mutate(seed_case, random.Random(i), probe) for i in (1, 2, 3)]
    assert first.meta["mutator"] == "llm_B1"
    assert all(c is not None and c.meta["mutator"] in OFFLINE_B1 and "budget" in c.meta["llm_fallback"] for c in later)
    assert len(server.requests) == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "budget" in warnings[0].getMessage()
    with pytest.raises(LLMUnavailable, match="budget"):
        client.complete("sys", "a new prompt")


def test_an_unreachable_endpoint_falls_back_once_and_then_stops_calling(tmp_path, seed_case, caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    client = client_for(f"http://127.0.0.1:{port}/v1", tmp_path / "cache", llm_timeout_s=2.0)
    m = LLMMutator("A1", client, bank=ExampleBank(tmp_path / "bank"))
    with caplog.at_level(logging.WARNING, logger="nnforge.mutators.llm"):
        a = m.mutate(seed_case, random.Random(0))
        retries = client.stats()["retries"]
        b = m.mutate(seed_case, random.Random(1))
    assert a.meta["mutator"] in {x.name for x in mutators_for("A1")} and "connection" in a.meta["llm_fallback"].lower()
    assert b is not None and client.stats()["retries"] == retries == 2  # the second call did not try again
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_each_new_client_is_warned_once_even_at_a_freed_clients_address(tmp_path, caplog):
    """A client made after another was freed often lands at the same address; it must still be told."""
    from nnforge.mutators.llm import warn_once
    with caplog.at_level(logging.WARNING, logger="nnforge.mutators.llm"):
        for i in range(8):
            client = LLMClient(None, model="m", temperature=0.0, cache_dir=tmp_path / "cache", token_budget=1)
            warn_once(client, f"down {i}")
            warn_once(client, f"down {i} again")
            del client
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [f"down {i}" for i in range(8)]


def test_stateful_replies_carry_a_call_sequence():
    reply = fenced(GOOD) + '\n```json\n[{}, {"set_attrs": {"k": 2}}, {"mode": "eval"}]\n```\n'
    parsed = parse_reply(reply, want_calls=True)
    assert len(parsed.calls) == 3 and parsed.calls[1].set_attrs == {"k": 2} and parsed.calls[2].mode == "eval"
    with pytest.raises(ReplyError, match="json"):
        parse_reply(fenced(GOOD), want_calls=True)
    with pytest.raises(ReplyError, match="imports subprocess"):
        parse_reply(fenced("import subprocess\n" + GOOD))


def test_thompson_sampling_shows_the_better_example_more_often(tmp_path):
    bank = ExampleBank(tmp_path)
    good, bad, fresh = (bank.add("B1", f"# program {n}\n") for n in ("good", "bad", "fresh"))
    for _ in range(30):
        bank.record([good.example_id], True)
        bank.record([bad.example_id], False)
    for _ in range(2):
        bank.record([good.example_id], False)
        bank.record([bad.example_id], True)
    rng = random.Random(1234)
    picks = [bank.pick("B1", 1, rng)[0].example_id for _ in range(400)]
    assert picks.count(good.example_id) > 300
    assert picks.count(bad.example_id) < 10
    assert picks.count(fresh.example_id) > 5  # an untried example still gets shown
    again = ExampleBank(tmp_path)  # state survives a restart
    assert {e.example_id: (e.successes, e.failures) for e in again.examples("B1")}[good.example_id] == (30, 2)


def test_cli_mutate_with_llm_openai_writes_the_model_mutant(server_factory, tmp_path, monkeypatch):
    from nnforge.agent.cli import _register_commands, app

    server = server_factory([("ok", fenced(GOOD))])
    monkeypatch.setenv("NNFORGE_LLM_BASE_URL", server.base_url)
    monkeypatch.setenv("NNFORGE_LLM_MODEL", "scripted-model")
    monkeypatch.setenv("NNFORGE_LLM_CACHE_DIR", str(tmp_path / "cache"))
    _register_commands()
    src = TestCase(program=SEED).save(tmp_path / "seed")
    res = CliRunner().invoke(app, ["mutate", str(src), "--category", "B1", "--llm", "openai", "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    (folder,) = (tmp_path / "out").iterdir()
    case = TestCase.load(folder)
    assert case.meta["mutator"] == "llm_B1" and case.program.strip() == GOOD.strip()
    assert "1 calls" in res.output and len(server.requests) == 1


@pytest.mark.slow
def test_a_campaign_with_an_endpoint_that_never_answers_keeps_its_budget_and_its_status_lines(server_factory,
                                                                                                tmp_path):
    import subprocess
    import sys

    server = server_factory([("hang", 600, "never sent")] * 50)
    out = tmp_path / "camp"
    env = {**os.environ, "NNFORGE_LLM_BASE_URL": server.base_url, "NNFORGE_LLM_API_KEY": "sk-test-not-secret",
           "NNFORGE_LLM_MODEL": "scripted-model", "NNFORGE_LLM_TIMEOUT_S": "15", "NNFORGE_LLM_MAX_RETRIES": "0",
           "NNFORGE_LLM_CACHE_DIR": str(tmp_path / "llm")}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "nnforge.agent.cli", "campaign", "--budget", "40s", "--targets", "eager",
                        "--workers", "1", "--llm", "openai", "--mutant-share", "1.0", "--nodes", "4", "--no-triage",
                        "--plain", "-o", str(out)], capture_output=True, text=True, env=env, timeout=300)
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert wall < 40 + 60 + 45, wall  # the budget, one worker timeout, start-up and reports
    status = [ln for ln in p.stdout.splitlines() if "] tests " in ln and "/0m40s]" in ln]
    assert len(status) >= 3, p.stdout[-3000:]  # a line about every 10 s, the endpoint hanging all along
    assert all("| llm calls 0" in ln for ln in status)
    stamps = [sum(int(x) * m for x, m in zip(ln[:8].split(":"), (3600, 60, 1))) for ln in status]
    assert max(b - a for a, b in zip(stamps, stamps[1:])) <= 13, status  # never stalled by a 15 s LLM timeout
    tests = sqlite3.connect(out / "store.sqlite").execute("SELECT COUNT(*) FROM tests").fetchone()[0]
    assert tests >= 3  # offline mutants ran while the LLM call hung
    summary = (out / "summary.md").read_text()
    assert "**LLM**: 0 calls" in summary and "tests fell back to offline mutators" in summary
    assert server.requests  # the endpoint was asked, and never answered
