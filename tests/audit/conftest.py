"""Backends and keys for the audit-trail tests: a SQLite file and PostgreSQL (a fresh schema
each, dropped afterwards), as the store contract selects them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from anfitrion._audit_keys import SigningKey, generate_key

sys.path.insert(0, str(Path(__file__).parents[1] / "store"))  # pg_schema
from pg_schema import pg_schema_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def trail_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        yield from pg_schema_url()


@pytest.fixture
def signing(tmp_path: Path) -> tuple[SigningKey, Path, Path]:
    """A fresh key: (key, private key file, public key file)."""
    pytest.importorskip("cryptography", reason="the audit extra: pip install 'anfitrion[audit]'")
    key, public = generate_key(tmp_path / "audit.key")
    return key, tmp_path / "audit.key", public


@pytest.fixture
def other_signing(tmp_path: Path) -> tuple[SigningKey, Path, Path]:
    pytest.importorskip("cryptography", reason="the audit extra: pip install 'anfitrion[audit]'")
    key, public = generate_key(tmp_path / "other.key")
    return key, tmp_path / "other.key", public
