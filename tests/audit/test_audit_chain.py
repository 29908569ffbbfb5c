"""The hash chain: every way of tampering with the stored log is detected and located."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from anfitrion._audit import export_jsonl, records_from_jsonl, verify_chain
from anfitrion._canonical import canonical_json
from anfitrion._chain import GENESIS, chain_hash
from anfitrion._cli.main import cli
from anfitrion.store import AuditRecord, open_store


def make_log(tmp_path: Path, count: int = 6) -> tuple[str, Path, str]:
    """A SQLite store holding *count* chained records; returns (url, file, head hash)."""
    path = tmp_path / "audit.db"
    url = f"sqlite:///{path}"

    async def fill() -> str:
        store = open_store(url)
        try:
            record = None
            for n in range(1, count + 1):
                record = await store.append_audit("call.proposed", f"s{n % 2}", 1000.0 + n,
                                                  {"n": n})
            assert record is not None
            return record.hash
        finally:
            await store.close()

    return url, path, anyio.run(fill)


def verify(url: str, expect_head: str | None = None) -> tuple[bool, int | None, str]:
    async def read() -> list[AuditRecord]:
        store = open_store(url)
        try:
            return list(await store.audit_records())
        finally:
            await store.close()

    report = verify_chain(anyio.run(read), expect_head=expect_head)
    return report.ok, report.broken_at, report.kind


def sql(path: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    with sqlite3.connect(path) as conn:
        for statement, args in statements:
            conn.execute(statement, args)


def row(path: Path, seq: int) -> tuple[str, str, float, str, str]:
    with sqlite3.connect(path) as conn:
        found = conn.execute("SELECT type, session_id, at, data, prev_hash FROM anfitrion_audit "
                             "WHERE seq = ?", (seq,)).fetchone()
    return found  # type: ignore[no-any-return]


def test_an_untouched_log_verifies_and_reports_its_head(tmp_path: Path) -> None:
    url, _, head = make_log(tmp_path)
    assert verify(url, expect_head=head) == (True, None, "")


def test_an_edited_record_is_found(tmp_path: Path) -> None:
    url, path, _ = make_log(tmp_path)
    sql(path, ("UPDATE anfitrion_audit SET data = ? WHERE seq = 3", ('{"n":33}',)))
    assert verify(url) == (False, 3, "edited")


def test_an_edited_and_rehashed_record_is_found_by_the_next_link(tmp_path: Path) -> None:
    url, path, _ = make_log(tmp_path)
    type_, session, at, _, prev = row(path, 3)
    forged = chain_hash(3, type_, session, at, {"n": 33}, prev)
    sql(path, ("UPDATE anfitrion_audit SET data = ?, hash = ? WHERE seq = 3",
               ('{"n":33}', forged)))
    assert verify(url) == (False, 3, "edited")


def test_a_deleted_record_is_found(tmp_path: Path) -> None:
    url, path, _ = make_log(tmp_path)
    sql(path, ("DELETE FROM anfitrion_audit WHERE seq = 3", ()))
    assert verify(url) == (False, 3, "deleted")


def test_reordered_records_are_found(tmp_path: Path) -> None:
    url, path, _ = make_log(tmp_path)
    sql(path, ("UPDATE anfitrion_audit SET seq = -1 WHERE seq = 3", ()),
        ("UPDATE anfitrion_audit SET seq = 3 WHERE seq = 4", ()),
        ("UPDATE anfitrion_audit SET seq = 4 WHERE seq = -1", ()))
    assert verify(url) == (False, 3, "reordered")


def test_an_inserted_record_is_found_even_with_a_valid_hash_of_its_own(tmp_path: Path) -> None:
    url, path, _ = make_log(tmp_path)
    with sqlite3.connect(path) as conn:
        prev = conn.execute("SELECT hash FROM anfitrion_audit WHERE seq = 2").fetchone()[0]
        for seq in range(6, 2, -1):
            conn.execute("UPDATE anfitrion_audit SET seq = seq + 1 WHERE seq = ?", (seq,))
        forged = chain_hash(3, "approval.answered", "s1", 1002.5, {"approved": True}, prev)
        conn.execute("INSERT INTO anfitrion_audit VALUES (3, 'approval.answered', 's1', 1002.5, "
                     "?, ?, ?)", ('{"approved":true}', prev, forged))
    assert verify(url) == (False, 3, "inserted")


def test_a_cut_tail_is_found_against_the_head_noted_earlier(tmp_path: Path) -> None:
    url, path, head = make_log(tmp_path)
    sql(path, ("DELETE FROM anfitrion_audit WHERE seq >= 5", ()))
    assert verify(url)[0] is True  # a plain chain cannot know it lost its end
    assert verify(url, expect_head=head) == (False, None, "truncated")


def test_a_log_rewritten_from_the_start_is_found_against_the_noted_head(tmp_path: Path) -> None:
    url, path, head = make_log(tmp_path)
    prev = GENESIS
    with sqlite3.connect(path) as conn:
        for seq in range(1, 7):
            type_, session, at, _, _ = conn.execute(
                "SELECT type, session_id, at, data, prev_hash FROM anfitrion_audit "
                "WHERE seq = ?", (seq,)).fetchone()
            new = chain_hash(seq, type_, session, at, {"n": 0}, prev)
            conn.execute("UPDATE anfitrion_audit SET data = ?, prev_hash = ?, hash = ? "
                         "WHERE seq = ?", ('{"n":0}', prev, new, seq))
            prev = new
    assert verify(url)[0] is True
    assert verify(url, expect_head=head)[0] is False


def test_verify_command_exits_nonzero_and_names_the_broken_link(tmp_path: Path) -> None:
    url, path, head = make_log(tmp_path)
    runner = CliRunner()
    ok = runner.invoke(cli, ["audit", "verify", "--store", url])
    assert ok.exit_code == 0
    assert head in ok.output
    sql(path, ("DELETE FROM anfitrion_audit WHERE seq = 2", ()))
    broken = runner.invoke(cli, ["audit", "verify", "--store", url])
    assert broken.exit_code == 1
    assert "BROKEN at record 2 (deleted)" in broken.output


def test_an_export_verifies_on_its_own_and_tampering_with_it_is_found(tmp_path: Path) -> None:
    url, _, head = make_log(tmp_path)
    runner = CliRunner()
    exported = runner.invoke(cli, ["audit", "export", "--store", url])
    assert exported.exit_code == 0
    lines = exported.output.splitlines(keepends=True)
    assert len(lines) == 6
    assert verify_chain(records_from_jsonl(lines), expect_head=head).ok
    file = tmp_path / "audit.jsonl"
    file.write_text("".join(lines[:3] + lines[4:]), encoding="utf-8")
    result = runner.invoke(cli, ["audit", "verify", "--file", str(file), "--json"])
    assert result.exit_code == 1
    assert '"kind": "deleted"' in result.output


def test_export_lines_round_trip_exactly() -> None:
    record = AuditRecord(1, "run.started", "s", 1.5, {"é": [1, 0.1]}, GENESIS,
                         chain_hash(1, "run.started", "s", 1.5, {"é": [1, 0.1]}, GENESIS))
    assert list(records_from_jsonl(export_jsonl([record]))) == [record]


@pytest.mark.parametrize("swap", [(0, 1), (2, 4)])
def test_reordering_in_memory_records_is_reported_as_reordered(swap: tuple[int, int]) -> None:
    records: list[AuditRecord] = []
    prev = GENESIS
    for seq in range(1, 6):
        h = chain_hash(seq, "t", "s", float(seq), {}, prev)
        records.append(AuditRecord(seq, "t", "s", float(seq), {}, prev, h))
        prev = h
    i, j = swap
    records[i], records[j] = records[j], records[i]
    report = verify_chain(records)
    assert not report.ok
    assert report.broken_at == i + 1
    assert report.kind in ("reordered", "deleted")


@pytest.mark.parametrize(("record", "expected"), [
    ((1, "run.started", "s", 1.5, {"é": [1, 0.1]}, GENESIS),
     "3b56db040dac57f840247105ec4b2baa33bbdaf31ee8c7dbeb73cc2e6a9cd7a7"),
    ((7, "call.decided", 'sé"\\\u2028x', 1700000000.123456,
      {"turn": 3, "tool": "get_weather", "decision": {"verdict": "allow", "warnings": []},
       "n": None, "f": 1e-7, "big": 10**30}, "ab" * 32),
     "4ee08df84cb06508877e0889a5fe762d0128ce2ebed66143427b3b8e0f734afb"),
    ((2, "t\ud800", "s\x00", 0.0, {"k\udfff": "v"}, GENESIS),
     "0e9a7fd6d4d9baa1aeea3d8867c4577b167ac494dce7790a5bdb1458e75cbc29"),
])
def test_the_chain_hash_of_a_record_is_stable_across_versions(
        record: tuple[int, str, str, float, dict[str, object], str], expected: str) -> None:
    """Hashes computed by earlier versions (records already stored) must still verify."""
    assert chain_hash(*record) == expected
    assert chain_hash(*record[:4], {}, record[5], data_text=canonical_json(record[4])) == expected


def test_a_recorder_shared_by_event_loops_in_threads_loses_no_record() -> None:
    """A framework's sync runs may drive one runtime from several threads at once."""
    import threading

    import anyio

    from anfitrion._audit import AuditRecorder
    from anfitrion._events import EventType, HostEvent
    from anfitrion.store import MemoryStore

    store = MemoryStore()
    recorder = AuditRecorder(store)
    per_thread, threads = 400, 4

    def work(n: int) -> None:
        async def emit() -> None:
            for i in range(per_thread):
                kind = EventType.RUN_ENDED if i % 7 == 0 else EventType.CALL_PROPOSED
                await recorder(HostEvent(kind, f"s{n}", i))
            await recorder.flush()
        anyio.run(emit)

    started = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(timeout=60)
    records = anyio.run(store.audit_records)
    assert len(records) == per_thread * threads
    assert verify_chain(records).ok
