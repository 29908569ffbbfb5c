"""Fixtures for the authorization tests: the real authorization server (oidc-provider)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Their helpers need the mcp extra (httpx): on a bare install the folder is skipped.
pytest.importorskip("mcp")
# tests/auth is not a package: its helper module is imported from this folder.
sys.path.insert(0, str(Path(__file__).parent))
from idp import idp_fixture

idp = idp_fixture("module")
