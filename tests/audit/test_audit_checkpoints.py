"""Signed checkpoints: every N records or T seconds, a record signing the head it follows;
verification names a wrong, revoked or missing key, a forged checkpoint and clock skew."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import anyio
import pytest

from anfitrion import Host, ScriptedModel, Toolbox
from anfitrion._audit import AuditRecorder
from anfitrion._audit_keys import (
    Keyring,
    SigningKey,
    format_time,
    generate_key,
    load_public_key,
    load_signing_key,
)
from anfitrion._audit_trail import Checkpointer, verify_trail
from anfitrion._chain import CHECKPOINT, chain_hash
from anfitrion._events import EventType, HostEvent
from anfitrion.exceptions import ConfigError
from anfitrion.store import AuditTrailStore, open_store

from .trail_helpers import fill, invoke, records, sql

Key = tuple[SigningKey, Path, Path]


def ring(*keys: Key, revoked: tuple[str, ...] = ()) -> Keyring:
    return Keyring.of([load_public_key(k[2]) for k in keys], revoked)


def test_a_checkpoint_signs_the_record_it_follows_and_verifies(trail_url: str,
                                                               signing: Key) -> None:
    recs = fill(trail_url, [5, "cp", 3], signing[0])
    [checkpoint] = [r for r in recs if r.type == CHECKPOINT]
    assert checkpoint.seq == 6
    assert checkpoint.data["chain_seq"] == 5 and checkpoint.data["chain_head"] == recs[4].hash
    assert checkpoint.data["key_id"] == signing[0].key_id
    report = verify_trail(recs, ring(signing))
    assert report.ok and report.checkpoints == 1 and report.unsigned_tail == 3
    verified = invoke("audit", "verify", "--store", trail_url, "--key", str(signing[2]))
    assert verified.exit_code == 0, verified.output
    assert "checkpoints: 1 (signatures checked with 1 key(s)); 3 record(s) after" in \
        verified.output


def test_a_checkpoint_signed_with_another_key_is_named(trail_url: str, signing: Key,
                                                       other_signing: Key) -> None:
    fill(trail_url, [3, "cp", 2], other_signing[0])
    verified = invoke("audit", "verify", "--store", trail_url, "--key", str(signing[2]))
    assert verified.exit_code == 1
    assert "BROKEN (signature) at record 4: checkpoint 4: it is signed with key " \
           f"'{other_signing[0].key_id}', which is not one of the keys given" in verified.output


def test_a_revoked_key_is_refused_and_a_rotation_verifies_with_both_keys(
        trail_url: str, signing: Key, other_signing: Key) -> None:
    fill(trail_url, [2, "cp"], signing[0])
    recs = fill(trail_url, [2, "cp"], other_signing[0], start=2)
    assert verify_trail(recs, ring(signing, other_signing)).ok
    only_new = verify_trail(recs, ring(other_signing))
    assert [(f.kind, f.seq) for f in only_new.findings] == [("signature", 3)]
    revoked = verify_trail(recs, ring(signing, other_signing, revoked=(signing[0].key_id,)))
    assert [(f.kind, f.seq) for f in revoked.findings] == [("revoked", 3)]
    assert "which is revoked" in revoked.findings[0].message
    # retired later than it signed: its signatures stand
    later = verify_trail(recs, ring(signing, other_signing,
                                    revoked=(f"{signing[0].key_id}@2999-01-01",)))
    assert later.ok
    cli = invoke("audit", "verify", "--store", trail_url, "--key", str(signing[2]), "--key",
                 str(other_signing[2]), "--revoked", signing[0].key_id)
    assert cli.exit_code == 1 and "BROKEN (revoked) at record 3" in cli.output


def test_a_forged_checkpoint_in_a_rechained_log_is_found(trail_url: str, signing: Key) -> None:
    """Whoever controls the database edits a record and re-chains everything after it: the
    chain verifies, the checkpoint's signature does not."""
    recs = fill(trail_url, [3, "cp", 2], signing[0])
    prev = "0" * 64
    for r in recs:
        data = dict(r.data)
        if r.seq == 2:
            data["n"] = 99
        if r.type == CHECKPOINT:
            data["chain_head"] = prev
        digest = chain_hash(r.seq, r.type, r.session_id, r.at, data, prev)
        from anfitrion._canonical import canonical_json
        sql(trail_url, ("UPDATE anfitrion_audit SET data = ?, prev_hash = ?, hash = ? "
                        "WHERE seq = ?", (canonical_json(data), prev, digest, r.seq)))
        prev = digest
    sql(trail_url, ("UPDATE anfitrion_audit_head SET hash = ? WHERE id = 1", (prev,)))
    report = verify_trail(records(trail_url), ring(signing))
    assert report.chain.ok  # the chain alone cannot tell
    assert [(f.kind, f.seq) for f in report.findings] == [("signature", 4)]
    assert "its signature does not verify" in report.findings[0].message


def test_a_checkpoint_moved_away_from_the_record_it_signs_is_found(signing: Key) -> None:
    recs = fill("memory://", [])  # an empty memory store: nothing
    assert recs == []
    store = open_store("memory://")

    async def work() -> None:
        assert isinstance(store, AuditTrailStore)
        await store.append_audit("x", "s", 1.0, {})
        await store.append_audit_at_head(CHECKPOINT, "", 2.0, lambda seq, head: signing[0].sign(
            {"kind": "checkpoint", "chain_seq": seq - 1, "chain_head": head,
             "signed_at": format_time(2.0)}))
    anyio.run(work)
    report = verify_trail(anyio.run(store.audit_records), ring(signing))
    assert [(f.kind, f.seq) for f in report.findings] == [("checkpoint", 2)]


def test_clock_skew_is_named(signing: Key) -> None:
    store = open_store("memory://")
    times = [10_000.0, 5_000.0, 4_000_000_000.0]  # then earlier, then in 2096

    async def work() -> None:
        assert isinstance(store, AuditTrailStore)
        for when in times:
            await store.append_audit("x", "s", when, {})
            await store.append_audit_at_head(
                CHECKPOINT, "", when, lambda seq, head, w=when: signing[0].sign(
                    {"kind": "checkpoint", "chain_seq": seq, "chain_head": head,
                     "signed_at": format_time(w)}))
    anyio.run(work)
    report = verify_trail(anyio.run(store.audit_records), ring(signing), now=20_000.0)
    assert [(f.kind, f.seq) for f in report.findings] == [("clock", 4), ("clock", 6)]
    assert "before the one earlier in the chain" in report.findings[0].message
    assert "in the future" in report.findings[1].message


def test_the_recorder_checkpoints_every_n_records_and_after_t_seconds(signing: Key) -> None:
    store = open_store("memory://")
    assert isinstance(store, AuditTrailStore)
    signer = Checkpointer(store, signing[0], every=4, seconds=3600)
    recorder = AuditRecorder(store, checkpoints=signer)

    async def work() -> None:
        for n in range(10):
            await recorder(HostEvent(EventType.RUN_ENDED, "s", n, detail=str(n)))
        signer._since -= 7200  # an hour went by (no sleeping in tests)
        await recorder(HostEvent(EventType.RUN_ENDED, "s", 99))
    anyio.run(work)
    recs = anyio.run(store.audit_records)
    assert [r.seq for r in recs if r.type == CHECKPOINT] == [5, 10, 14]
    assert verify_trail(recs, ring(signing)).ok


def test_a_host_signs_checkpoints_when_the_environment_names_a_key(
        tmp_path: Path, signing: Key, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANFITRION_AUDIT_KEY_FILE", str(signing[1]))
    monkeypatch.setenv("ANFITRION_AUDIT_CHECKPOINT_EVERY", "3")
    url = f"sqlite:///{tmp_path / 'host.db'}"
    for _ in range(3):
        Host(model=ScriptedModel(["Done."]), tools=Toolbox(), store=url).run_sync("hi")
    recs = records(url)
    assert any(r.type == CHECKPOINT for r in recs)
    assert verify_trail(recs, ring(signing)).ok


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_overwrites(
        tmp_path: Path) -> None:
    pytest.importorskip("cryptography", reason="the audit extra: pip install 'anfitrion[audit]'")
    out = tmp_path / "k.pem"
    made = invoke("audit", "keygen", "-o", str(out))
    assert made.exit_code == 0 and "key ed25519:" in made.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert load_signing_key(out) is not None
    assert load_public_key(tmp_path / "k.pem.pub")
    again = invoke("audit", "keygen", "-o", str(out))
    assert again.exit_code == 1 and "a key is never overwritten" in again.output


def test_a_signing_key_others_can_read_or_not_ed25519_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("cryptography", reason="the audit extra: pip install 'anfitrion[audit]'")
    _, _ = generate_key(tmp_path / "k.pem")
    os.chmod(tmp_path / "k.pem", 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        load_signing_key(tmp_path / "k.pem")
    (tmp_path / "junk.pem").write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n")
    os.chmod(tmp_path / "junk.pem", 0o600)
    with pytest.raises(ConfigError, match="not an unencrypted PEM private key"):
        load_signing_key(tmp_path / "junk.pem")
    with pytest.raises(ConfigError, match="not an unencrypted PEM private key"):
        load_signing_key(environ={"ANFITRION_AUDIT_KEY": "nonsense"})
    assert load_signing_key(environ={}) is None


def test_checkpoint_command_without_a_key_says_how_to_make_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    fill(url, [1])
    done = invoke("audit", "checkpoint", "--store", url)
    assert done.exit_code == 1 and "anfitrion audit keygen" in done.output
