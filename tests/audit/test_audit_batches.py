"""One hash per batch over one text (format 3, what the stores write now) beside one hash
per batch over each record's text (format 2) and one hash per record (format 1): all verify,
alone and mixed in one log, and every way of tampering with a batch is found in both batch
formats.

Format 1 and format 2 rows are written here as anfitrion wrote them before format 3: each
record chained to the one before with :func:`chain_hash`, or each batch with
:func:`chain_texts`, straight into the SQLite file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sqlite3
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion._audit import verify_chain
from anfitrion._canonical import canonical_json, standard_json
from anfitrion._chain import (
    GENESIS,
    batch_body,
    batch_hash,
    chain_batch,
    chain_hash,
    chain_rows,
    chain_texts,
    head_free_parts,
    legacy_batch_hash,
    pack_batch,
)
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


def _format_two(path: Path, sizes: list[int]) -> None:
    """Append batches of *sizes* records as format 2 did: one hash per batch, over each
    record's header line and data (:func:`chain_texts`)."""
    with sqlite3.connect(path) as db:
        seq, prev = db.execute("SELECT seq, hash FROM anfitrion_audit_head").fetchone()
        for size in sizes:
            rows = [("call.proposed", f"s{(seq + i) % 2}", 1000.0 + seq + i,
                     canonical_json({"n": seq + i})) for i in range(size)]
            chained = chain_texts(seq, prev, rows)
            db.executemany("INSERT INTO anfitrion_audit (seq, type, session_id, at, data, "
                           "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(n, t, s, at, text, before, digest) for (t, s, at, text),
                            (n, before, digest) in zip(rows, chained, strict=True)])
            seq, prev = chained[-1][0], chained[-1][2]
        db.execute("UPDATE anfitrion_audit_head SET seq = ?, hash = ? WHERE id = 1", (seq, prev))


def _write(url: str, path: Path, fmt: int, sizes: list[int]) -> list[AuditRecord]:
    """Batches of *sizes* records in format *fmt* (2: as written before, 3: by the store)."""
    if fmt == 2:
        _batches(url, [])  # an empty, migrated store
        _format_two(path, sizes)
        return _batches(url, [])
    return _batches(url, sizes)


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
    # format 3: one header for the batch and one canonical text of its records
    text = canonical_json([[r.type, r.session_id, r.at, dict(r.data)] for r in first])
    assert first[0].hash == hashlib.sha256(
        f'batch|1|"{GENESIS}"\n{text}'.encode()).hexdigest()
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


def test_formats_one_two_and_three_mixed_in_one_log_verify(url: str, tmp_path: Path) -> None:
    _batches(url, [])
    _format_one(tmp_path / "audit.db", 2)   # records 1–2
    _format_two(tmp_path / "audit.db", [3, 2])  # 3–5, 6–7
    records = _batches(url, [4, 1, 2])  # 8–11, 12, 13–14: format 3 (and 1 for one alone)
    _format_two(tmp_path / "audit.db", [2])  # 15–16
    records = _batches(url, [3])  # 17–19
    assert len(records) == 19 and verify_chain(records).ok
    by_seq = {r.seq: r for r in records}
    old = [(r.seq, r.type, r.session_id, r.at, r.data) for r in records if 3 <= r.seq <= 5]
    assert by_seq[3].hash == legacy_batch_hash(old, by_seq[3].prev_hash) != \
        batch_hash(old, by_seq[3].prev_hash)
    new = [(r.seq, r.type, r.session_id, r.at, r.data) for r in records if 8 <= r.seq <= 11]
    assert by_seq[8].hash == batch_hash(new, by_seq[8].prev_hash)
    code, output = _verify_cli(url)
    assert code == 0 and "audit chain intact: 19 records" in output


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_batch_removed_from_the_end_is_found_against_the_head(
        url: str, tmp_path: Path, fmt: int) -> None:
    records = _write(url, tmp_path / "audit.db", fmt, [3, 4])
    head = records[-1].hash
    assert verify_chain(records, expect_head=head).ok
    with sqlite3.connect(tmp_path / "audit.db") as db:
        db.execute("DELETE FROM anfitrion_audit WHERE seq >= 4")
    cut = _batches(url, [])
    assert verify_chain(cut).ok  # what is left is a chain: only the kept head tells
    report = verify_chain(cut, expect_head=head)
    assert not report.ok and report.kind == "truncated"


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize(("tamper", "kind", "at"), [
    ("reorder", "edited", 4), ("retype", "edited", 4), ("move", "edited", 4)])
def test_records_reordered_or_changed_inside_a_batch_are_found(
        url: str, tmp_path: Path, fmt: int, tamper: str, kind: str, at: int) -> None:
    _write(url, tmp_path / "audit.db", fmt, [3, 4, 2])  # records 1–3, 4–7, 8–9
    with sqlite3.connect(tmp_path / "audit.db") as db:
        if tamper == "reorder":  # two whole records of a batch trade places (and numbers)
            db.execute("UPDATE anfitrion_audit SET seq = -seq WHERE seq IN (5, 6)")
            db.execute("UPDATE anfitrion_audit SET seq = CASE seq WHEN -5 THEN 6 ELSE 5 END "
                       "WHERE seq IN (-5, -6)")
        elif tamper == "retype":  # what a record says happened
            db.execute("UPDATE anfitrion_audit SET type = 'call.denied' WHERE seq = 5")
        else:  # when and where: a record's time and session
            db.execute("UPDATE anfitrion_audit SET at = at + 1, session_id = 'x' "
                       "WHERE seq = 6")
    report = verify_chain(_batches(url, []))
    assert not report.ok
    assert (report.kind, report.broken_at) == (kind, at), report.problem


@pytest.mark.parametrize("value", ["plain", "é ü 中文", "a\"b\\c\n\t\x01\x1f\x7f", "\u2028",
                                   "\ud800 lone surrogate", "🙂"])
def test_one_serialisation_of_a_batch_matches_its_records_texts(value: str) -> None:
    entries = [(value, value, 1764688962.123456, {"k": value, "n": [1, None, True]}),
               ("t", "s", 1.0, {value: {"deep": value}})]
    texts = [(t, s, at, standard_json(dict(d)).encode("utf-8", "surrogatepass"))
             for t, s, at, d in entries]
    assert pack_batch(entries) == batch_body(texts)
    if "\ud800" not in value:  # canonical JSON of the list, as the format says
        assert pack_batch(entries) == canonical_json(
            [[t, s, at, d] for t, s, at, d in entries]).encode()


def test_a_time_that_is_not_a_number_is_hashed_as_the_verifier_reads_it() -> None:
    entries = [("t", "s", math.nan, {}), ("t", "s", math.inf, {"a": 1})]
    assert pack_batch(entries) == batch_body([("t", "s", at, canonical_json(d).encode())
                                              for t, s, at, d in entries])


@pytest.mark.parametrize("fmt", [2, 3])
def test_records_handed_over_out_of_order_are_found(url: str, tmp_path: Path,
                                                    fmt: int) -> None:
    records = _write(url, tmp_path / "audit.db", fmt, [3, 4, 2])
    records[4], records[5] = records[5], records[4]  # inside the batch of records 4–7
    report = verify_chain(records)
    assert not report.ok and report.broken_at == 5, report


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize(("tamper", "kind", "at"), [
    ("edit", "edited", 4), ("delete", "deleted", 5), ("swap", "edited", 4),
    ("split", "edited", 4), ("cut", "edited", 4), ("delete-last", "deleted", 7)])
def test_tampering_inside_a_batch_is_found(url: str, tmp_path: Path, tamper: str, kind: str,
                                           at: int, fmt: int) -> None:
    _write(url, tmp_path / "audit.db", fmt, [3, 4, 2])  # records 1–3, 4–7, 8–9
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


_NAMES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_NAMES, _NAMES, st.floats(allow_nan=False, allow_infinity=False),
                          st.dictionaries(_NAMES, _NAMES, max_size=3)), min_size=1, max_size=4),
       st.integers(0, 10**12), st.sampled_from([GENESIS, "ab" * 32, "f" * 64]))
def test_the_head_free_parts_finish_into_each_format_s_own_hash(
        records: list[tuple[str, str, float, dict[str, str]]], seq: int, prev: str) -> None:
    """What a store that hashes where the head is locked gets (:func:`head_free_parts`,
    finished with the head's seq and hash) is the hash each format defines on its own: the
    one record's header (format 1), the batch's (format 3)."""
    rows = [(type, sid, at, canonical_json(data)) for type, sid, at, data in records]
    before, between, after = head_free_parts(rows)
    finished = hashlib.sha256(before + str(seq + 1).encode() + between
                              + json.dumps(prev).encode() + after).hexdigest()
    if len(rows) == 1:
        type, sid, at, data = records[0]
        assert finished == chain_hash(seq + 1, type, sid, at, data, prev)
    else:
        assert finished == chain_batch(seq, prev, batch_body(rows))
    assert [(s, p, finished) for s, p, _ in chain_rows(seq, prev, rows)] == chain_rows(
        seq, prev, rows)
