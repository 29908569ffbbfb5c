"""Signed export bundles: verified offline with the bundle and the public key alone, and
refused when any byte changes, a file is swapped, or the key is not the one trusted."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from anfitrion._audit_bundle import _tar, build_bundle, verify_bundle
from anfitrion._audit_keys import Keyring, SigningKey, load_public_key

from .trail_helpers import fill, invoke

Key = tuple[SigningKey, Path, Path]


def members(data: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]


def test_a_bundle_verifies_offline_with_the_public_key_alone(trail_url: str, signing: Key,
                                                             tmp_path: Path) -> None:
    fill(trail_url, [3, "cp", 2, "cp", 1], signing[0])
    out = tmp_path / "out.tar"
    made = invoke("audit", "export", "--store", trail_url, "--bundle", str(out), "--key-file",
                  str(signing[1]))
    assert made.exit_code == 0, made.output
    assert [n for n, _ in members(out.read_bytes())] == [
        "records.jsonl", "checkpoints.jsonl", "policies.json",
        f"keys/{signing[0].key_id.replace(':', '_')}.pem", "manifest.json"]
    # offline: no store named, nothing but the file and the key
    checked = invoke("audit", "verify-bundle", str(out), "--key", str(signing[2]))
    assert checked.exit_code == 0, checked.output
    assert checked.output.startswith("bundle intact: 8 records, 2 signed checkpoints, head ")


def test_a_bundle_fails_when_any_byte_changes(tmp_path: Path, signing: Key) -> None:
    records = fill(f"sqlite:///{tmp_path / 's.db'}", [2, "cp", 1], signing[0])
    data = build_bundle(records, signing[0], at=1_800_000_000.0)
    ring = Keyring.of([load_public_key(signing[2])])
    assert verify_bundle(data, ring).ok
    passed = []
    for i in range(len(data)):
        changed = bytearray(data)
        changed[i] ^= 0x01
        if verify_bundle(bytes(changed), ring).ok:
            passed.append(i)
    assert passed == []
    assert not verify_bundle(data + b"\0", ring).ok
    assert not verify_bundle(data[:-1], ring).ok


def test_a_bundle_with_a_file_swapped_is_refused(tmp_path: Path, signing: Key) -> None:
    ring = Keyring.of([load_public_key(signing[2])])
    one = build_bundle(fill(f"sqlite:///{tmp_path / 'a.db'}", [3, "cp"], signing[0]),
                       signing[0], at=1.0)
    two = build_bundle(fill(f"sqlite:///{tmp_path / 'b.db'}", [3, "cp"], signing[0], start=9),
                       signing[0], at=1.0)
    files = members(one)
    files[0] = members(two)[0]  # records.jsonl of another log, itself a valid chain
    report = verify_bundle(_tar(files), ring)
    assert not report.ok
    assert [f.message for f in report.findings] == [
        "files differ from the signed manifest: records.jsonl"]
    manifest_swapped = members(one)
    manifest_swapped[-1] = members(two)[-1]
    assert not verify_bundle(_tar(manifest_swapped), ring).ok


def test_a_bundle_checked_with_another_key_or_none_is_refused(
        tmp_path: Path, signing: Key, other_signing: Key) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    fill(url, [2, "cp"], signing[0])
    out = tmp_path / "out.tar"
    invoke("audit", "export", "--store", url, "--bundle", str(out), "--key-file",
           str(signing[1]))
    wrong = invoke("audit", "verify-bundle", str(out), "--key", str(other_signing[2]))
    assert wrong.exit_code == 1
    assert "bundle BROKEN (signature): the manifest: it is signed with key" in wrong.output
    revoked = invoke("audit", "verify-bundle", str(out), "--key", str(signing[2]),
                     "--revoked", signing[0].key_id)
    assert revoked.exit_code == 1 and "which is revoked" in revoked.output
    assert not verify_bundle(out.read_bytes(), Keyring()).ok


def test_a_bundle_of_a_tampered_log_is_refused_even_when_freshly_signed(
        tmp_path: Path, signing: Key) -> None:
    """A bundle signed today of a log edited yesterday: the chain inside says so."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    records = fill(url, [3, "cp", 2], signing[0])
    import dataclasses
    records[1] = dataclasses.replace(records[1], data={"n": 42})
    report = verify_bundle(build_bundle(records, signing[0], at=1.0),
                           Keyring.of([load_public_key(signing[2])]))
    assert not report.ok and report.trail is not None
    # records 1–3 were appended together: one hash covers them, so the edit of record 2 is
    # reported at the first record of its batch, naming the batch
    assert (report.trail.chain.broken_at, report.trail.chain.kind) == (1, "edited")
    assert "records 1–3 (one batch, one hash)" in report.trail.chain.problem
