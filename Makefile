# NNForge: `make demo` runs a short demonstration, `make test` runs the suite.
# Both create the virtualenv (.venv) on first use.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.nnforge-installed
DEMO_DIR ?= demo-out
PYTEST_ARGS ?=

.PHONY: setup test test-fast demo bench clean

setup: $(STAMP)

# torch first, so that no other package pulls a multi-GB CUDA build; TORCH_SPEC overrides it.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

# A short campaign; the folder is the demo's own, remade on every run.
demo: setup
	rm -rf $(DEMO_DIR)
	$(VENV)/bin/nnforge campaign --budget 90s --targets inductor,ort,tvm --workers 2 --llm none -o $(DEMO_DIR)

bench: setup
	$(PY) bench/generation.py

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache
