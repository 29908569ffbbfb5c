# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test lint typecheck unit bench install install-test clean

$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(PY)
	$(PIP) install -e .

install-test: $(PY)
	$(PIP) install -e '.[test]'

demo: install
	$(VENV)/bin/anfitrion demo

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

# Benchmarks: peers are benchmark-only dependencies, in their own environment.
BENCH_VENV ?= .venv-bench
bench:
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip --disable-pip-version-check -q install -e '.[all,bench]'
	cd benchmarks && ../$(BENCH_VENV)/bin/python run.py $(BENCH_ARGS)
