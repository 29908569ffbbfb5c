"""The parity suite's helpers live beside it (tests/ is no package)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Every door of the parity suite runs through the mcp extra: on a bare install it is skipped.
pytest.importorskip("mcp")

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "store"))  # pg_schema

from collections.abc import Iterator

import _processes


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    """A test's gateways and haproxy end with it, even when it failed before its cleanup."""
    yield
    _processes.end_all()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _processes.end_all()  # Ctrl-C included (and PR_SET_PDEATHSIG if pytest is killed)
