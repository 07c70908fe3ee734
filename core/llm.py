"""LLMClient: the one way any stage talks to a chat model (mutators now, triage prose later).

Provider "openai" is any OpenAI-compatible server reached through `base_url` (OpenAI, vLLM, Ollama,
llama.cpp server), through LangChain's `ChatOpenAI`; provider "none" means no client at all.

What a campaign needs from it, beyond a reply:
- every call is cached by a hash of (model, temperature, system, user), so a rerun of a
  campaign costs no tokens and no time. The cache is pluggable (`LLMCache`: get/put): on disk
  under `settings.llm_cache_dir` by default (CLI use), in the campaign's SQLite store during a
  campaign (`agent.store.StoreLLMCache`), so the campaign folder holds its replies;
- tokens are counted against a budget (usage metadata of the reply, or an estimate from the text);
- 429, 5xx, timeouts and dropped connections are retried with exponential backoff (our own loop:
  the LangChain client is built with `max_retries=0` so the two do not multiply);
- anything that makes the endpoint unusable (unreachable, refused key, budget spent, repeated
  failures) raises `LLMUnavailable`, whose message says why. Callers fall back to offline work.
  After such a failure the client stops calling the endpoint for `cooldown_s` (budget: for good),
  so a dead server costs one round of timeouts, not one per test case.

The API key is held here only; it is never written to the cache, to logs or to payloads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from nnforge.core.settings import Settings

log = logging.getLogger(__name__)

PROVIDERS = ("none", "openai")
CACHE_VERSION = 1
FAILURES_BEFORE_COOLDOWN = 2  # calls in a row that used up all their retries
MAX_BACKOFF_S = 30.0


class LLMUnavailable(RuntimeError):
    """The model cannot answer now (unreachable, key refused, budget spent, keeps failing); see the message."""


def cache_key(model: str, temperature: float, system: str, user: str) -> str:
    """sha256 over everything that determines the reply (the prompt hash recorded in a mutant's meta)."""
    blob = json.dumps([CACHE_VERSION, model, float(temperature), system, user], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class LLMCache(Protocol):
    """Where replies are kept, by `cache_key`. `record` holds key, model, temperature, purpose,
    tokens, created and reply (never the API key). A miss is None; `put` may raise (logged)."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, record: dict[str, Any]) -> None: ...


class DiskLLMCache:
    """One JSON file per reply: `cache_dir/<key[:2]>/<key>.json`, written atomically."""

    def __init__(self, cache_dir: str | os.PathLike):
        self.cache_dir = Path(os.path.expanduser(str(cache_dir)))

    def path(self, key: str) -> Path:
        return self.cache_dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        try:
            data = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        reply = data.get("reply") if isinstance(data, dict) else None
        return reply if isinstance(reply, str) else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, ensure_ascii=False)
        os.replace(tmp, path)


def estimate_tokens(text: str) -> int:
    """~4 characters a token: used when a server sends no usage metadata."""
    return max(1, len(text) // 4)


class LLMClient:
    """A cached, budgeted, retrying chat client. Thread-safe; one per campaign process."""

    def __init__(self, chat: Any, *, model: str, temperature: float, cache_dir: str | os.PathLike | None = None,
                 token_budget: int, max_retries: int = 3, backoff_s: float = 1.0, cooldown_s: float = 300.0,
                 sleep: Callable[[float], None] = time.sleep, cache: LLMCache | None = None) -> None:
        """`cache`: where replies are kept; default a `DiskLLMCache(cache_dir)`."""
        if cache is None and cache_dir is None:
            raise ValueError("LLMClient needs a cache or a cache_dir")
        self.chat = chat
        self.model = model
        self.temperature = float(temperature)
        self.cache: LLMCache = cache if cache is not None else DiskLLMCache(cache_dir)  # type: ignore[arg-type]
        self.token_budget = int(token_budget)
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = float(backoff_s)
        self.cooldown_s = float(cooldown_s)
        self._sleep = sleep
        self._lock = threading.Lock()
        self._stats = {"calls": 0, "cache_hits": 0, "tokens": 0, "retries": 0, "failures": 0}
        self._down_until = 0.0
        self._down_reason = ""
        self._failures_in_a_row = 0

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def from_settings(cls, settings: Settings, *, cache: LLMCache | None = None) -> "LLMClient | None":
        """The client the settings describe, or None for provider "none" (offline).

        `cache`: where replies are kept (a campaign passes its store's); default the disk cache
        in `settings.llm_cache_dir`."""
        provider = (settings.llm_provider or "none").strip().lower()
        if provider not in PROVIDERS:
            raise ValueError(f"unknown LLM provider {settings.llm_provider!r}; known: {', '.join(PROVIDERS)}")
        if provider == "none":
            return None
        from langchain_openai import ChatOpenAI

        chat = ChatOpenAI(
            base_url=settings.llm_base_url or None,
            # Local servers (vLLM, Ollama, llama.cpp) accept any key; the OpenAI client insists on one.
            api_key=settings.llm_api_key or "not-needed",
            model=settings.llm_model,
            temperature=settings.llm_temperature,
            timeout=settings.llm_timeout_s,
            max_retries=0,
        )
        return cls(chat, model=settings.llm_model, temperature=settings.llm_temperature,
                   cache_dir=settings.llm_cache_dir, token_budget=settings.llm_token_budget,
                   max_retries=settings.llm_max_retries, backoff_s=settings.llm_backoff_s,
                   cooldown_s=settings.llm_cooldown_s, cache=cache)

    # -- the call ----------------------------------------------------------------------------------
    def complete(self, system: str, user: str, *, purpose: str = "") -> str:
        """The model's reply to one system + user prompt (from the cache when it has it).

        Raises LLMUnavailable when no reply can be had; the message says why.
        """
        key = cache_key(self.model, self.temperature, system, user)
        cached = self._read_cache(key)
        if cached is not None:
            with self._lock:
                self._stats["cache_hits"] += 1
            return cached
        with self._lock:
            if time.monotonic() < self._down_until:
                raise LLMUnavailable(self._down_reason)
            spent = self._stats["tokens"]
        if spent + estimate_tokens(system + user) > self.token_budget:
            self._trip(f"LLM token budget spent ({spent} of {self.token_budget} tokens used)", forever=True)
        reply, tokens = self._call_with_retries(system, user, purpose)
        with self._lock:
            self._stats["calls"] += 1
            self._stats["tokens"] += tokens
            self._failures_in_a_row = 0
        self._write_cache(key, purpose, reply, tokens)
        return reply

    def stats(self) -> dict[str, int]:
        """calls (answered by the server), cache_hits, tokens, retries, failures (calls that gave up)."""
        with self._lock:
            return dict(self._stats)

    @property
    def unavailable_reason(self) -> str:
        """Why the client is refusing calls now ("" when it is not)."""
        with self._lock:
            return self._down_reason if time.monotonic() < self._down_until else ""

    def _call_with_retries(self, system: str, user: str, purpose: str) -> tuple[str, int]:
        from langchain_core.messages import HumanMessage, SystemMessage

        messages = [SystemMessage(content=system), HumanMessage(content=user)]
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                with self._lock:
                    self._stats["retries"] += 1
            try:
                msg = self.chat.invoke(messages)
            except Exception as e:  # classified below; anything unknown is not retried
                kind, why, retry_after = classify_error(e)
                last = why
                if kind == "fatal":
                    self._count_failure()
                    self._trip(f"LLM endpoint refused the request: {why}", forever=False)
                if kind == "bad_request":
                    self._count_failure()
                    raise LLMUnavailable(f"LLM endpoint rejected this prompt ({purpose or 'no purpose'}): {why}") from e
                if attempt < self.max_retries:
                    delay = retry_after if retry_after is not None else self.backoff_s * (2 ** attempt)
                    self._sleep(min(MAX_BACKOFF_S, delay * (1.0 + 0.25 * random.random())))
                continue
            text = _text_of(msg)
            return text, _tokens_of(msg, system + user, text)
        self._count_failure()
        with self._lock:
            self._failures_in_a_row += 1
            repeated = self._failures_in_a_row >= FAILURES_BEFORE_COOLDOWN
        reason = f"LLM endpoint failed {self.max_retries + 1} times in a row: {last}"
        if repeated or "connect" in last.lower() or "timeout" in last.lower() or "timed out" in last.lower():
            self._trip(reason, forever=False)  # an endpoint that hangs is as unusable as one that is down
        raise LLMUnavailable(reason)

    def _count_failure(self) -> None:
        with self._lock:
            self._stats["failures"] += 1

    def _trip(self, reason: str, *, forever: bool) -> None:
        """Stop calling the endpoint for `cooldown_s` (or for good) and raise."""
        with self._lock:
            self._down_reason = reason
            self._down_until = float("inf") if forever else time.monotonic() + self.cooldown_s
        raise LLMUnavailable(reason)

    # -- the cache ---------------------------------------------------------------------------------
    @property
    def cache_dir(self) -> Path | None:
        """The disk cache's folder (None when replies are kept elsewhere, e.g. a campaign store)."""
        return getattr(self.cache, "cache_dir", None)

    def _read_cache(self, key: str) -> str | None:
        try:
            return self.cache.get(key)
        except Exception as e:  # an unreadable cache is a miss
            log.warning("cannot read the LLM cache entry %s: %s", key, e)
            return None

    def _write_cache(self, key: str, purpose: str, reply: str, tokens: int) -> None:
        record = {"key": key, "model": self.model, "temperature": self.temperature, "purpose": purpose,
                  "tokens": tokens, "created": time.time(), "reply": reply}
        try:
            self.cache.put(key, record)
        except Exception as e:  # a cache that cannot be written costs money on rerun, nothing else
            log.warning("cannot write the LLM cache entry %s: %s", key, e)


def classify_error(e: BaseException) -> tuple[str, str, float | None]:
    """("retry" | "fatal" | "bad_request", a one-line reason, the server's Retry-After in s or None)."""
    import openai

    why = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}".strip()
    if isinstance(e, (openai.APITimeoutError, openai.APIConnectionError)):
        return "retry", why, None
    if isinstance(e, openai.APIStatusError):
        status = e.status_code
        retry_after = _retry_after(e)
        if status in (408, 409, 429) or status >= 500:
            return "retry", f"HTTP {status}: {why}", retry_after
        if status in (401, 403, 404):
            return "fatal", f"HTTP {status}: {why}", None
        return "bad_request", f"HTTP {status}: {why}", None
    if isinstance(e, (TimeoutError, ConnectionError)):
        return "retry", why, None
    return "retry", why, None


def _retry_after(e: Any) -> float | None:
    try:
        value = e.response.headers.get("retry-after")
        return max(0.0, float(value)) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def _text_of(msg: Any) -> str:
    content = getattr(msg, "content", msg)
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)
    return str(content)


def _tokens_of(msg: Any, prompt: str, reply: str) -> int:
    usage = getattr(msg, "usage_metadata", None) or {}
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    if isinstance(total, int) and total > 0:
        return total
    return estimate_tokens(prompt) + estimate_tokens(reply)
