"""Retention: `audit prune --before DATE` keeps the chain checkable from a signed checkpoint,
never removes the records of a call not yet settled, is itself a signed record, and is safe
beside appends."""

from __future__ import annotations

import time
from pathlib import Path

import anyio

from anfitrion import ToolResult
from anfitrion._audit_keys import Keyring, SigningKey, format_time, load_public_key
from anfitrion._audit_trail import prune, verify_trail
from anfitrion._chain import CHECKPOINT, PRUNED
from anfitrion.store import AuditTrailStore, open_store

from .trail_helpers import fill, invoke, records, sql, wipe

Key = tuple[SigningKey, Path, Path]
# 1–3, checkpoint 4, 5–7, checkpoint 8, 9–10; record n+1 is call c{n} of session s{n % 3}
PLAN: list[int | str] = [3, "cp", 3, "cp", 2]


def soon() -> str:
    return format_time(time.time() + 1)


def ring(key: Key) -> Keyring:
    return Keyring.of([load_public_key(key[2])])


def test_prune_keeps_the_chain_checkable_from_a_signed_checkpoint(trail_url: str,
                                                                  signing: Key) -> None:
    fill(trail_url, PLAN, signing[0])
    pruned = invoke("audit", "prune", "--store", trail_url, "--before", soon(), "--key-file",
                    str(signing[1]))
    assert pruned.exit_code == 0, pruned.output
    assert pruned.output.startswith("pruned 7 record(s); the log now starts at checkpoint 8")
    recs = records(trail_url)
    assert [r.seq for r in recs] == [8, 9, 10, 11]
    assert recs[-1].type == PRUNED and recs[-1].data["first_kept"] == 8
    assert recs[-1].data["removed"] == 7 and recs[-1].data["by"].startswith("cli:")
    verified = invoke("audit", "verify", "--store", trail_url, "--key", str(signing[2]))
    assert verified.exit_code == 0, verified.output
    unkeyed = invoke("audit", "verify", "--store", trail_url)
    assert unkeyed.exit_code == 1
    assert "the log starts at record 8 (pruned): pass the public key" in unkeyed.output


def test_prune_never_removes_the_records_of_a_call_not_yet_settled(trail_url: str,
                                                                   signing: Key) -> None:
    fill(trail_url, PLAN, signing[0])

    async def work() -> None:
        store = open_store(trail_url)
        try:
            assert isinstance(store, AuditTrailStore)
            claim = await store.claim_execution("s1", "c4", "d")  # record 6: running
            first = await prune(store, signing[0], time.time() + 1, by="test")
            assert first is not None
            assert (first.first_kept, first.removed, first.held_by) == (4, 3, (6, "s1", "c4"))
            assert await prune(store, signing[0], time.time() + 1, by="test") is None
            assert claim.token is not None
            await store.settle_execution("s1", "c4", ToolResult("c4", "t", "ok"), claim.token)
            second = await prune(store, signing[0], time.time() + 1, by="test")
            assert second is not None and (second.first_kept, second.held_by) == (8, None)
        finally:
            await store.close()
    anyio.run(work)
    recs = records(trail_url)
    assert [r.type for r in recs if r.type in (CHECKPOINT, PRUNED)] == [
        CHECKPOINT, PRUNED, PRUNED]
    report = verify_trail(recs, ring(signing))
    assert report.ok, report.findings


def test_the_cli_names_the_call_that_held_a_prune_back(tmp_path: Path, signing: Key) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    fill(url, PLAN, signing[0])

    async def claim() -> None:
        store = open_store(url)
        try:
            await store.claim_execution("s1", "c4", "d")
        finally:
            await store.close()
    anyio.run(claim)
    pruned = invoke("audit", "prune", "--store", url, "--before", soon(), "--key-file",
                    str(signing[1]))
    assert "kept from record 6 on: call c4 of session s1 is not settled" in pruned.output


def test_prune_racing_appends_keeps_the_chain_intact(trail_url: str, signing: Key) -> None:
    fill(trail_url, PLAN, signing[0])

    async def work() -> None:
        pruner, writer = open_store(trail_url), open_store(trail_url)
        assert isinstance(pruner, AuditTrailStore)
        try:
            async def append() -> None:
                for n in range(40):
                    await writer.append_audit_many([("x", "s", 2000.0 + n, {"n": n})] * 2)

            async with anyio.create_task_group() as tg:
                tg.start_soon(append)
                for _ in range(3):
                    await prune(pruner, signing[0], time.time() + 1, by="race")
                    await anyio.sleep(0)
        finally:
            await pruner.close()
            await writer.close()
    anyio.run(work)
    recs = records(trail_url)
    assert recs[0].seq == 8 and sum(r.type == "x" for r in recs) == 80
    assert verify_trail(recs, ring(signing)).ok


def test_a_prune_dated_in_the_future_or_without_a_key_is_refused(tmp_path: Path,
                                                                 signing: Key) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    fill(url, PLAN, signing[0])
    future = invoke("audit", "prune", "--store", url, "--before", "2999-01-01",
                    "--key-file", str(signing[1]))
    assert future.exit_code == 1 and "that is in the future" in future.output
    keyless = invoke("audit", "prune", "--store", url, "--before", soon())
    assert keyless.exit_code == 1 and "no audit signing key" in keyless.output
    bad = invoke("audit", "prune", "--store", url, "--before", "yesterday", "--key-file",
                 str(signing[1]))
    assert bad.exit_code == 1 and "not an ISO 8601 date" in bad.output
    assert len(records(url)) == 10  # nothing changed


def test_a_prefix_deleted_by_hand_or_with_a_forged_prune_record_is_found(
        trail_url: str, signing: Key, other_signing: Key) -> None:
    fill(trail_url, PLAN, signing[0])
    sql(trail_url, ("DELETE FROM anfitrion_audit WHERE seq < 8", ()))
    bare = invoke("audit", "verify", "--store", trail_url, "--key", str(signing[2]))
    assert bare.exit_code == 1 and "BROKEN at record 1 (deleted)" in bare.output
    # the attacker writes the prune record themselves, signed with a key of their own

    async def forge() -> None:
        store = open_store(trail_url)
        try:
            assert isinstance(store, AuditTrailStore)
            recs = await store.audit_records()
            await store.append_audit_at_head(PRUNED, "", time.time(), lambda _s, _h: other_signing[
                0].sign({"kind": "prune", "first_kept": 8, "base_hash": recs[0].prev_hash,
                         "removed": 7, "before": soon(), "by": "x", "signed_at": soon()}))
        finally:
            await store.close()
    anyio.run(forge)
    forged = invoke("audit", "verify", "--store", trail_url, "--key", str(signing[2]))
    assert forged.exit_code == 1
    assert "BROKEN (signature) at record 11: prune record 11: it is signed with key" in \
        forged.output


def test_an_anchor_still_agrees_after_a_prune(trail_url: str, signing: Key,
                                              tmp_path: Path) -> None:
    from anfitrion._audit_anchor import FileAnchor
    anchor = FileAnchor(tmp_path / "anchor.jsonl")
    fill(trail_url, PLAN, signing[0], anchors=[anchor])
    invoke("audit", "prune", "--store", trail_url, "--before", soon(), "--key-file",
           str(signing[1]))
    verified = invoke("audit", "verify", "--store", trail_url, "--key", str(signing[2]),
                      "--anchor", anchor.url)
    assert verified.exit_code == 0, verified.output
    wipe(trail_url, from_seq=9)
    cut = invoke("audit", "verify", "--store", trail_url, "--key", str(signing[2]),
                 "--anchor", anchor.url)
    # the anchor's last checkpoint (8) is still there, but the prune record went with the
    # tail: nothing vouches any more for a log that starts at 8
    assert cut.exit_code == 1 and "BROKEN at record 1 (deleted)" in cut.output


def test_transcripts_of_ended_sessions_follow_the_retention_and_no_other(
        trail_url: str, signing: Key) -> None:
    from anfitrion import DeferredApprover, Effect, Host, ScriptedModel, Toolbox
    from anfitrion.testing import call

    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def send(to: str) -> str:
        """Send."""
        return f"sent to {to}"

    def host(steps: list[object]) -> Host:
        return Host(model=ScriptedModel(steps), tools=tools, store=trail_url,
                    approver=DeferredApprover())

    ended = host(["Done."]).run_sync("hi")
    held = host(["Done."]).run_sync("hi")
    waiting = host([call("send", {"to": "ana"}), "ok"]).run_sync("send it")
    assert (ended.status, waiting.status) == ("completed", "suspended")
    fill(trail_url, [1, "cp"], signing[0], start=100)

    async def claim() -> None:
        store = open_store(trail_url)
        try:
            await store.claim_execution(held.session_id, "c9", "d")  # a call still running
        finally:
            await store.close()
    anyio.run(claim)
    pruned = invoke("audit", "prune", "--store", trail_url, "--before", soon(), "--key-file",
                    str(signing[1]), "--sessions")
    assert pruned.exit_code == 0, pruned.output
    assert "removed 1 ended session(s) and their transcripts" in pruned.output

    async def left() -> list[str]:
        store = open_store(trail_url)
        try:
            return sorted(s.session_id for s in await store.list_sessions())
        finally:
            await store.close()
    assert anyio.run(left) == sorted([held.session_id, waiting.session_id])
    [record] = [r for r in records(trail_url) if r.type == "sessions.pruned"]
    assert record.data["sessions"] == [ended.session_id] and record.data["count"] == 1
    verified = invoke("audit", "verify", "--store", trail_url, "--key", str(signing[2]))
    assert verified.exit_code == 0, verified.output
