"""What the audit-trail tests share: filling a store, raw SQL on either backend, the CLI."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import anyio
from click.testing import CliRunner, Result

from anfitrion._audit_keys import SigningKey
from anfitrion._audit_trail import Checkpointer
from anfitrion._chain import GENESIS
from anfitrion._cli.main import cli
from anfitrion.store import AuditRecord, AuditTrailStore, open_store


def records(url: str) -> list[AuditRecord]:
    async def read() -> list[AuditRecord]:
        store = open_store(url)
        try:
            return list(await store.audit_records())
        finally:
            await store.close()
    return anyio.run(read)


def fill(url: str, plan: Sequence[int | str], key: SigningKey | None = None, *,
         anchors: Sequence[Any] = (), start: int = 0) -> list[AuditRecord]:
    """Append records: an int *n* appends n plain records, ``"cp"`` a signed checkpoint."""
    async def work() -> list[AuditRecord]:
        store = open_store(url)
        try:
            assert isinstance(store, AuditTrailStore)
            signer = Checkpointer(store, key, anchors=anchors, retry_delays=(0.01,)) \
                if key is not None else None
            n = start
            for step in plan:
                if step == "cp":
                    assert signer is not None
                    await signer.checkpoint()
                    continue
                assert isinstance(step, int)
                await store.append_audit_many([
                    ("call.proposed", f"s{(n + i) % 3}", 1000.0 + n + i,
                     {"n": n + i, "call_id": f"c{n + i}"}) for i in range(step)])
                n += step
            if signer is not None:
                assert signer.queue.drain(10.0)
            return list(await store.audit_records())
        finally:
            await store.close()
    return anyio.run(work)


def sql(url: str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Run statements on the store's database directly (as whoever controls it would)."""
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for statement, args in statements:
                conn.execute(statement, args)
        return
    import psycopg

    with psycopg.connect(url, autocommit=False) as conn:
        for statement, args in statements:
            conn.execute(statement.replace("?", "%s"), args)  # type: ignore[arg-type]
        conn.commit()


def wipe(url: str, from_seq: int = 1) -> None:
    """Remove records from *from_seq* on and put the head back on the record before."""
    sql(url, ("DELETE FROM anfitrion_audit WHERE seq >= ?", (from_seq,)))
    before = [r for r in records(url) if r.seq < from_seq]
    head = (before[-1].seq, before[-1].hash) if before else (0, GENESIS)
    sql(url, ("UPDATE anfitrion_audit_head SET seq = ?, hash = ? WHERE id = 1", head))


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)
