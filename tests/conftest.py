import os
import tempfile

import pytest

# One warm inductor cache for the whole suite (cold compiles cost ~30 s each).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "nnforge-test-inductor-cache"))


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
