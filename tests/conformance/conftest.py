"""Fixtures for the conformance tests: the installed suite, or a skip (a failure in CI)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Their helpers need the mcp extra (httpx): on a bare install the folder is skipped.
pytest.importorskip("mcp")
# tests/conformance is not a package: its helper module is imported from this folder.
sys.path.insert(0, str(Path(__file__).parent))
from conformance_suite import INSTALL, REQUIRE, Suite


@pytest.fixture(scope="session")
def suite() -> Suite:
    return _installed("current")


@pytest.fixture(scope="session")
def next_suite() -> Suite:
    """The newest prerelease of the suite (its 2026-07-28 scenarios)."""
    return _installed("next")


def _installed(which: str) -> Suite:
    found = Suite.find(which=which)
    if found is None:
        why = (f"the MCP conformance suite is not installed: run {INSTALL} "
               "(make install-conformance)")
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 and {why}")
        pytest.skip(why)
    return found
