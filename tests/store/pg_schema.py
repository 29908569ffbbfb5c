"""A fresh PostgreSQL schema per test, dropped afterwards (``search_path`` in the URL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


def pg_schema_url() -> Iterator[str]:
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 is not reachable: {exc}")
    schema = f"anfitrion_test_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_ADMIN}?options=-csearch_path%3D{schema}"
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()
