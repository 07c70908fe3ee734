import os
import tempfile

import pytest

# One warm inductor cache for the whole suite (cold compiles cost ~30 s each).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "nnforge-test-inductor-cache"))
# Campaigns and commands the suite starts share it on purpose (by default each would get a fresh
# one of its own: oracle/compile_cache.py); the tests that check the default unset it.
os.environ.setdefault("NNFORGE_INDUCTOR_CACHE_DIR", os.environ["TORCHINDUCTOR_CACHE_DIR"])
# Settings also read ~/.config/nnforge/.env (core/settings.py): the suite must not depend on the user
# who runs it, so it sees an empty config folder of its own (tests that need one make their own).
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="nnforge-test-config-")


@pytest.fixture
def tmp_case_dir(tmp_path):
    d = tmp_path / "case"
    d.mkdir()
    return d


@pytest.fixture(autouse=True)
def _run_in_a_temp_cwd(tmp_path, monkeypatch):
    """Trusted programs loaded in-process (oracle unit tests) are written to the cwd: keep the
    repository clean by giving every test its own."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def pool():
    """Two warm sandbox workers per test module (modules that need other settings define their own)."""
    from nnforge.oracle.sandbox import WorkerPool

    with WorkerPool(size=2, timeout_s=60, inductor_cache_dir=os.environ.get("TORCHINDUCTOR_CACHE_DIR")) as p:
        p.warmup()
        yield p


@pytest.fixture(scope="module")
def settings():
    """Settings for triage with real workers: a short value search, no LLM, the suite's warm cache."""
    from nnforge.core.settings import load_settings

    return load_settings(worker_timeout_s=60.0, value_search_budget_ms=100.0, llm_provider="none",
                         inductor_cache_dir=os.environ["TORCHINDUCTOR_CACHE_DIR"])


@pytest.fixture
def make_pool(tmp_path):
    """Pools made to order (size, limits, slate, sandbox), closed after the test; their workers
    import nothing ahead unless asked, and share a compile cache of the test's own."""
    from nnforge.oracle.sandbox import WorkerPool

    pools = []

    def make(**kw) -> WorkerPool:
        kw.setdefault("preload", ())
        kw.setdefault("inductor_cache_dir", str(tmp_path / "inductor"))
        pool = WorkerPool(**kw)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()
