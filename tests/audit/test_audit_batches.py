"""One hash per batch (format 2) beside one hash per record (format 1): both verify, alone
and mixed in one log, and every way of tampering with a batch is found.

Format 1 rows are written here as anfitrion wrote them before format 2: each record chained
to the one before with :func:`chain_hash`, straight into the SQLite file.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from anfitrion._audit import verify_chain
from anfitrion._canonical import canonical_json
from anfitrion._chain import GENESIS, batch_hash, chain_hash
from anfitrion._cli.main import cli
from anfitrion.store import AuditRecord, open_store


def _batches(url: str, sizes: list[int]) -> list[AuditRecord]:
    """Append batches of *sizes* records through the store (format 2)."""
    async def work() -> list[AuditRecord]:
        store = open_store(url)
        try:
            n = 0
            for size in sizes:
                await store.append_audit_many([
                    ("call.proposed", f"s{(n + i) % 2}", 1000.0 + n + i, {"n": n + i})
                    for i in range(size)])
                n += size
            return list(await store.audit_records())
        finally:
            await store.close()
    return anyio.run(work)


def _format_one(path: Path, count: int) -> None:
    """Append *count* records as format 1 did: one hash per record, chained one by one."""
    with sqlite3.connect(path) as db:
        seq, prev = db.execute("SELECT seq, hash FROM anfitrion_audit_head").fetchone()
        for _ in range(count):
            seq += 1
            data = {"old": seq}
            digest = chain_hash(seq, "call.decided", "old", 500.0 + seq, data, prev)
            db.execute("INSERT INTO anfitrion_audit (seq, type, session_id, at, data, "
                       "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (seq, "call.decided", "old", 500.0 + seq, canonical_json(data), prev,
                        digest))
            prev = digest
        db.execute("UPDATE anfitrion_audit_head SET seq = ?, hash = ? WHERE id = 1", (seq, prev))


def _verify_cli(url: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["audit", "verify", "--store", url],
                                catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'audit.db'}"


def test_records_appended_together_share_one_hash(url: str) -> None:
    records = _batches(url, [4, 1])
    first, single = records[:4], records[4]
    assert {(r.prev_hash, r.hash) for r in first} == {(GENESIS, first[0].hash)}
    assert first[0].hash == batch_hash([(r.seq, r.type, r.session_id, r.at, r.data)
                                        for r in first], GENESIS)
    # a batch of one is format 1: its hash is chain_hash's
    assert single.prev_hash == first[-1].hash
    assert single.hash == chain_hash(single.seq, single.type, single.session_id, single.at,
                                     single.data, single.prev_hash)
    assert verify_chain(records).ok


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_every_store_chains_a_batch_the_same_way(tmp_path: Path, store: str) -> None:
    async def work() -> list[AuditRecord]:
        target = open_store("memory://" if store == "memory" else
                            f"sqlite:///{tmp_path / 'a.db'}")
        try:
            await target.append_audit_many([("a", "s", 1.5, {"k": "é"}), ("b", "s", 2.0, {})])
            return list(await target.audit_records())
        finally:
            await target.close()
    records = anyio.run(work)
    assert records[0].hash == records[1].hash == batch_hash(
        [(1, "a", "s", 1.5, {"k": "é"}), (2, "b", "s", 2.0, {})], GENESIS)


def test_a_log_in_the_old_format_and_one_continued_in_the_new_both_verify(
        url: str, tmp_path: Path) -> None:
    _batches(url, [])  # an empty, migrated store
    _format_one(tmp_path / "audit.db", 5)
    code, output = _verify_cli(url)
    assert code == 0 and "audit chain intact: 5 records" in output
    records = _batches(url, [3, 2])  # the same log, continued by this version
    assert records[5].prev_hash == records[4].hash
    code, output = _verify_cli(url)
    assert code == 0 and "audit chain intact: 10 records" in output
    _format_one(tmp_path / "audit.db", 2)  # and an older writer after it again
    assert verify_chain(_batches(url, [])).ok


@pytest.mark.parametrize(("tamper", "kind", "at"), [
    ("edit", "edited", 4), ("delete", "deleted", 5), ("swap", "edited", 4),
    ("split", "edited", 4), ("cut", "edited", 4), ("delete-last", "deleted", 7)])
def test_tampering_inside_a_batch_is_found(url: str, tmp_path: Path, tamper: str, kind: str,
                                           at: int) -> None:
    _batches(url, [3, 4, 2])  # records 1–3, 4–7, 8–9
    with sqlite3.connect(tmp_path / "audit.db") as db:
        if tamper == "edit":
            db.execute("UPDATE anfitrion_audit SET data = ? WHERE seq = 6", ('{"n":99}',))
        elif tamper == "delete":  # a record from the middle, the seqs closed up again
            db.execute("DELETE FROM anfitrion_audit WHERE seq = 5")
        elif tamper == "swap":  # two records of one batch trade places
            db.execute("UPDATE anfitrion_audit SET data = CASE seq WHEN 5 THEN '{\"n\":5}' "
                       "ELSE '{\"n\":4}' END WHERE seq IN (4, 5)")
        elif tamper == "split":  # a record given a hash of its own to leave its batch
            db.execute("UPDATE anfitrion_audit SET hash = ? WHERE seq = 7",
                       (chain_hash(7, "call.proposed", "s0", 1006.0, {"n": 6},
                                   db.execute("SELECT prev_hash FROM anfitrion_audit "
                                              "WHERE seq = 7").fetchone()[0]),))
        elif tamper == "delete-last":  # the last record of a batch; the next batch kept
            db.execute("DELETE FROM anfitrion_audit WHERE seq = 7")
        else:  # the end of a batch removed, the batches after it too
            db.execute("DELETE FROM anfitrion_audit WHERE seq >= 6")
    records = _batches(url, [])
    report = verify_chain(records)
    assert not report.ok
    assert (report.kind, report.broken_at) == (kind, at), report.problem


def test_an_edit_in_a_batch_names_the_batch(url: str) -> None:
    records = _batches(url, [2, 3])
    records[3] = dataclasses.replace(records[3], data={"n": "forged"})
    report = verify_chain(records)
    assert (report.kind, report.broken_at) == ("edited", 3)
    assert report.problem == ("records 3–5 (one batch, one hash): its content does not match "
                              "its hash (edited)")
