"""Settings from the environment and `.env` (every key is listed in `.env.example`)."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NNFORGE_", env_file=".env", extra="ignore")

    # LLM: "none" (offline rules and template drafts, the default) or "openai" (any
    # OpenAI-compatible server through base_url: OpenAI, vLLM, Ollama, llama.cpp server).
    llm_provider: str = "none"
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_temperature: float = 0.7
    llm_timeout_s: float = 60.0
    llm_max_retries: int = 3
    llm_token_budget: int = 2_000_000
    llm_cache_dir: str = "~/.cache/nnforge/llm"
    llm_backoff_s: float = 1.0  # first retry delay; doubles per retry (429/5xx/timeouts)
    llm_cooldown_s: float = 300.0  # after the endpoint proves unusable, stay offline this long
    llm_max_repairs: int = 2  # times a failing mutant goes back to the model with its error

    # Sandboxed workers.
    worker_timeout_s: float = 60.0  # per test
    worker_memory_mb: int = 6000  # RSS over this kills the worker: `oom`
    worker_tests_before_recycle: int = 200
    # "strong": each worker in its own network namespace, capabilities dropped, the parent
    # non-dumpable (whatever of that the machine allows; oracle/confine.py); "basic": a scrubbed
    # environment and a temp working directory only.
    worker_sandbox: str = "strong"
    inductor_cache_dir: str = "~/.cache/nnforge/inductor"

    # Value search.
    value_search_budget_ms: float = VALUE_SEARCH_BUDGET_MS

    # Triage: findings of one provisional root-cause key that are reduced (the rest attach to
    # their cluster unreduced); seconds of a campaign's end kept for finishing the triage of
    # every key's first findings (at most this share of the budget: triage_reserve_share).
    triage_per_key: int = 2
    triage_reserve_s: float = 300.0
    triage_reserve_share: float = 0.25

    # Campaigns: refuse to start with less free disk space than this (MB) in the campaign folder.
    campaign_min_free_mb: int = 200


def load_settings(**overrides) -> Settings:
    return Settings(**overrides)
