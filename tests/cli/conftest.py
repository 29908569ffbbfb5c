"""CLI tests never touch the real data folder: ANFITRION_HOME is a temporary one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(autouse=True)
def anfitrion_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("ANFITRION_HOME", str(home))
    monkeypatch.delenv("ANFITRION_STORE", raising=False)
    return home


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema for one test, dropped afterwards."""
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 is not reachable: {exc}")
    schema = f"anfitrion_cli_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_ADMIN}?options=-csearch_path%3D{schema}"
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()
