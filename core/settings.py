"""Settings from the environment and `.env` files (every key is listed in `.env.example`).

Where a setting comes from, strongest first: the environment (`NNFORGE_*`), `./.env` (the
folder the command is started in), then the user's `~/.config/nnforge/.env`
(`$XDG_CONFIG_HOME/nnforge/.env` when that is set), so a campaign started from any folder
still finds the user's endpoint and keys.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError
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
    llm_temperature: float = Field(0.7, ge=0.0, le=2.0)
    llm_timeout_s: float = Field(60.0, gt=0)
    llm_max_retries: int = Field(3, ge=0)
    llm_token_budget: int = Field(2_000_000, ge=0)
    llm_cache_dir: str = "~/.cache/nnforge/llm"
    llm_backoff_s: float = Field(1.0, ge=0)  # first retry delay; doubles per retry (429/5xx/timeouts)
    llm_cooldown_s: float = Field(300.0, ge=0)  # after the endpoint proves unusable, stay offline this long
    llm_max_repairs: int = Field(2, ge=0)  # times a failing mutant goes back to the model with its error

    # Sandboxed workers.
    worker_timeout_s: float = Field(60.0, gt=0)  # per test
    worker_memory_mb: int = Field(6000, ge=256)  # RSS over this kills the worker: `oom`
    worker_tests_before_recycle: int = Field(200, ge=1)
    # "strong": each worker in its own network namespace, capabilities dropped, the parent
    # non-dumpable (whatever of that the machine allows; oracle/confine.py); "basic": a scrubbed
    # environment and a temp working directory only.
    worker_sandbox: Literal["strong", "basic"] = "strong"
    # "fork": every test in a fresh process forked from a warmed template, so nothing one test did
    # to its process reaches the next; "reuse": a worker serves many tests (measure against it only).
    worker_slate: Literal["fork", "reuse"] = "fork"
    # the uid each forked test runs as when NNForge runs as root (and the machine allows it)
    worker_uid: int = Field(65534, ge=1)
    # empty (the default): each campaign its own compile cache (<campaign>/inductor-cache), every
    # other command a fresh one; a path shares that cache on purpose (tests can write to it).
    inductor_cache_dir: str = ""
    # "one": the C++ kernels of one Inductor graph are built in one compiler run (oracle/kernel_unit.py,
    # same sources and flags, 1.6x less compile time); "each": one run per kernel, as Inductor does.
    inductor_kernel_unit: Literal["one", "each"] = "one"
    # what the installed ONNX path carries, probed once per set of versions (core/export_table.py)
    export_table_dir: str = "~/.cache/nnforge/export-table"

    # Value search.
    value_search_budget_ms: float = Field(VALUE_SEARCH_BUDGET_MS, ge=0)
    # Campaigns draw each test's values from a value bin (all positive, ties, constant, ...;
    # oracle/value_bins.py) picked by the scheduler; off: every test from the default draw.
    value_bins: bool = True
    # Share of torch.compile tests whose calls also run a backward, gradients compared like
    # outputs (core/backward.py); ONNX targets stay forward-only.
    backward_share: float = Field(0.2, ge=0.0, le=1.0)
    # Generator programs packed into one torch.compile test (generator/pack.py): fixed costs
    # (tracing, AOTAutograd, the wrapper's compile and its C++ compiler run, loading, the worker
    # round trip) paid once for this many programs. Seed-only campaigns on 2 workers judged 1.5x
    # the programs per minute of k = 1 at k = 4, 1.25-1.5x those of k = 2, no more at k = 8. In
    # the default mix k = 4 first lost to k = 2 (18.2 vs 24.3 programs/min, bench/results/stop31):
    # mutants beside a pack-4 compile took 1.2-1.6x longer each. That was Inductor's compile pool,
    # one compile process per core in every worker; with the cores shared out among the workers
    # (oracle/sandbox.py, TORCHINDUCTOR_COMPILE_THREADS) k = 4 judged 1.2-1.44x the programs per
    # minute of the old default, mutants not slower (bench/results/stop32, mix-*.txt). Once one
    # graph's kernels were built in one compiler run (oracle/kernel_unit.py) k = 8 judged 1.21x the
    # seed programs per minute of k = 4 (bench/results/stop38, pack-unit-one.txt), and in the default
    # mix (with --pack-mutants 8) 74.8 against 55.5 programs/min, 1.35x (bench/results/stop41).
    pack: int = Field(8, ge=1, le=16)
    # Single-call mutants packed into one torch.compile test (mutators/pack.py): members are renamed
    # apart and run side by side in one forward; a finding is unpacked to its member by the reducer.
    # Rewrites about graph breaks or random draws, and invocation sequences, always run alone.
    # 8 with `pack` 8 (bench/results/stop41): mutant tests 1.64 worker-s a program, against 2.48 at 4.
    pack_mutants: int = Field(8, ge=1, le=16)

    # Triage: findings of one provisional root-cause key that are reduced (the rest attach to
    # their cluster unreduced); seconds of a campaign's end kept for finishing the triage of
    # every key's first findings (at most this share of the budget: triage_reserve_share).
    triage_per_key: int = Field(2, ge=1)
    # triage threads in a campaign; each holds at most one of the shared workers at a time, so
    # triage's share of the workers is this many out of --workers (capped at --workers)
    triage_workers: int = Field(1, ge=1)
    # workers triage may take while findings wait for a reduction (testing slows until the queue
    # drains; agent/triage_thread.py); 0: all of --workers
    triage_max_workers: int = Field(0, ge=0)
    triage_reserve_s: float = Field(300.0, ge=0)
    triage_reserve_share: float = Field(0.25, ge=0, le=0.9)
    # seconds past the budget a campaign may triage findings recorded as it ended (None: the reserve,
    # so a campaign runs at most its triage reserve longer than its budget)
    triage_after_budget_s: float | None = Field(None, ge=0)

    # Campaigns: refuse to start with less free disk space than this (MB) in the campaign folder.
    campaign_min_free_mb: int = Field(200, ge=0)


class SettingsError(ValueError):
    """A setting (environment or `.env`) that is not what it must be; the message names each one."""


def user_env_file() -> Path:
    """The user's own `.env`: read whatever folder a command starts in, after `./.env`."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "nnforge" / ".env"


def env_files() -> list[Path]:
    """The `.env` files that exist, strongest first: `./.env`, then the user's (one file once)."""
    found: list[Path] = []
    for path in (Path.cwd() / ".env", user_env_file()):
        if path.is_file() and all(not path.samefile(f) for f in found):
            found.append(path)
    return found


def describe_sources(files: list[Path]) -> str:
    """One line saying where settings were read from, so a campaign that lost its .env says so."""
    if not files:
        return "settings: no .env file: environment and defaults"
    return "settings: environment, then " + ", then ".join(str(f) for f in files)


def load_settings(**overrides) -> Settings:
    """The settings; SettingsError (one line per bad key: name, value, what it must be) if any is wrong."""
    try:  # pydantic-settings lets a later file override an earlier one: weakest first
        return Settings(_env_file=tuple(reversed(env_files())) or None, **overrides)
    except ValidationError as e:
        raise SettingsError(describe_errors(e)) from None


def describe_errors(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        key = "NNFORGE_" + "_".join(str(p) for p in err.get("loc", ())).upper()
        value = err.get("input")
        lines.append(f"{key}={value!r}: {err.get('msg', 'invalid').replace('Input should be', 'must be')}")
    return "\n".join(lines)
