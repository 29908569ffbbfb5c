"""Fixtures for the conformance tests: the installed suite, or a skip (a failure in CI)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# tests/conformance is not a package: its helper module is imported from this folder.
sys.path.insert(0, str(Path(__file__).parent))
from conformance_suite import INSTALL, REQUIRE, Suite


@pytest.fixture(scope="session")
def suite() -> Suite:
    found = Suite.find()
    if found is None:
        why = (f"the MCP conformance suite is not installed: run {INSTALL} "
               "(make install-conformance)")
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 and {why}")
        pytest.skip(why)
    return found
