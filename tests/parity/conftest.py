"""The parity suite's helpers live beside it (tests/ is no package)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Every door of the parity suite runs through the mcp extra: on a bare install it is skipped.
pytest.importorskip("mcp")

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "store"))  # pg_schema
