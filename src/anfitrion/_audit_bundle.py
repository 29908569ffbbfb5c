"""Signed export bundles: the audit log in one file an auditor checks offline.

``anfitrion audit export --bundle out.tar`` writes a tar of:

- ``records.jsonl`` — every record, every hashed field (``anfitrion audit export``'s lines);
- ``checkpoints.jsonl`` — the signed checkpoint and prune records among them;
- ``policies.json`` — the policy hashes the decisions name, with the first and last record of each;
- ``keys/<key id>.pem`` — the public keys the signatures name (for reference: the verifier
  brings its own);
- ``manifest.json`` — counts, the first and last record, the head, the SHA-256 of every other
  file, signed with the audit key.

The tar is written deterministically (fixed order, times, owners and modes), so
:func:`verify_bundle` rebuilds it from what it read and compares every byte: a change anywhere
— in a record, a header, the padding — fails, as does a file swapped, added or removed. It needs
nothing but the bundle and the public key.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._audit import export_jsonl, records_from_jsonl
from ._audit_keys import Keyring, SigningKey, format_time, public_pem
from ._audit_trail import Finding, TrailReport, verify_trail
from ._canonical import canonical_json
from ._chain import CHECKPOINT, PRUNED
from .store import AuditRecord

__all__ = ["BundleReport", "build_bundle", "verify_bundle"]

FORMAT = "anfitrion-audit-bundle/1"
MAX_BUNDLE = 2 * 1024 ** 3
FIXED = ("records.jsonl", "checkpoints.jsonl", "policies.json")


def _tar(files: Sequence[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _policies(records: Sequence[AuditRecord]) -> bytes:
    seen: dict[str, dict[str, int]] = {}
    for record in records:
        sha = record.data.get("policy_sha256")
        if isinstance(sha, str):
            entry = seen.setdefault(sha, {"first": record.seq, "last": record.seq})
            entry["last"] = record.seq
    return (json.dumps(seen, sort_keys=True, indent=1) + "\n").encode()


def build_bundle(records: Sequence[AuditRecord], key: SigningKey, *,
                 public_keys: Mapping[str, bytes] | None = None, at: float) -> bytes:
    """The bundle's bytes. *public_keys* (key id → PEM) adds the keys of a rotation."""
    files: list[tuple[str, bytes]] = [
        ("records.jsonl", "".join(export_jsonl(records)).encode()),
        ("checkpoints.jsonl", "".join(export_jsonl(
            r for r in records if r.type in (CHECKPOINT, PRUNED))).encode()),
        ("policies.json", _policies(records))]
    keys = {key.key_id: public_pem(key.public), **(public_keys or {})}
    for kid in sorted(keys):
        files.append((f"keys/{kid.replace(':', '_')}.pem", keys[kid]))
    manifest = key.sign({
        "format": FORMAT, "created_at": format_time(at), "records": len(records),
        "first_seq": records[0].seq if records else None,
        "last_seq": records[-1].seq if records else None,
        "head": records[-1].hash if records else None,
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in files}})
    files.append(("manifest.json", (canonical_json(manifest) + "\n").encode()))
    return _tar(files)


@dataclass
class BundleReport:
    """What :func:`verify_bundle` found: ``ok`` when nothing."""

    findings: list[Finding] = field(default_factory=list)
    trail: TrailReport | None = None
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.findings and self.trail is not None and self.trail.ok


def _read(data: bytes) -> tuple[list[tuple[str, bytes]], str | None]:
    """The bundle's files in order, or why it is not one."""
    files: list[tuple[str, bytes]] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if not member.isreg() or member.name.startswith("/") or ".." in member.name:
                    return [], f"{member.name!r} is not a plain file of a bundle"
                extracted = tar.extractfile(member)
                if extracted is None:
                    return [], f"{member.name!r} cannot be read"
                files.append((member.name, extracted.read()))
    except (tarfile.TarError, OSError, UnicodeDecodeError) as exc:
        return [], f"not a tar file: {exc}"
    return files, None


def verify_bundle(data: bytes, keyring: Keyring) -> BundleReport:
    """Check a bundle with the public keys of *keyring* alone."""
    report = BundleReport()

    def fail(kind: str, message: str, seq: int | None = None) -> BundleReport:
        report.findings.append(Finding(kind, seq, message))
        return report

    if not keyring:
        return fail("key", "no public key given: a bundle is checked with a key you trust")
    if len(data) > MAX_BUNDLE:
        return fail("bundle", "the bundle is larger than 2 GiB")
    files, problem = _read(data)
    if problem is not None:
        return fail("bundle", problem)
    names = [name for name, _ in files]
    if names[:3] != list(FIXED) or names[-1:] != ["manifest.json"] or \
            not all(n.startswith("keys/") for n in names[3:-1]) or len(set(names)) != len(names):
        return fail("bundle", f"unexpected files: {names}")
    if _tar(files) != data:
        return fail("bundle", "the bundle's bytes differ from the bundle its files make "
                    "(a header, the padding or a trailing byte was changed)")
    content = dict(files)
    try:
        manifest = json.loads(content["manifest.json"])
    except (json.JSONDecodeError, UnicodeDecodeError):
        return fail("manifest", "manifest.json is not JSON")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return fail("manifest", f"manifest.json is not a {FORMAT} manifest")
    report.manifest = manifest
    problem = keyring.problem(manifest)
    if problem is not None:
        return fail("signature", f"the manifest: {problem}")
    hashes = manifest.get("files")
    expected = {name: hashlib.sha256(body).hexdigest() for name, body in files[:-1]}
    if hashes != expected:
        differ = sorted(n for n in set(expected) | set(hashes if isinstance(hashes, dict) else {})
                        if not isinstance(hashes, dict) or hashes.get(n) != expected.get(n))
        return fail("bundle", f"files differ from the signed manifest: {', '.join(differ)}")
    return _check_records(report, content, manifest, keyring)


def _check_records(report: BundleReport, content: Mapping[str, bytes],
                   manifest: Mapping[str, Any], keyring: Keyring) -> BundleReport:
    try:
        records = list(records_from_jsonl(content["records.jsonl"].decode().splitlines()))
        signed = list(records_from_jsonl(content["checkpoints.jsonl"].decode().splitlines()))
    except (ValueError, KeyError, TypeError) as exc:
        report.findings.append(Finding("records", None, f"records.jsonl cannot be read: {exc}"))
        return report
    report.trail = verify_trail(records, keyring)
    last = records[-1] if records else None
    if (manifest.get("records"), manifest.get("last_seq"), manifest.get("head")) != (
            len(records), last.seq if last else None, last.hash if last else None):
        report.findings.append(Finding("manifest", None, "the manifest's counts or head do not "
                                       "match records.jsonl"))
    if signed != [r for r in records if r.type in (CHECKPOINT, PRUNED)]:
        report.findings.append(Finding("manifest", None, "checkpoints.jsonl differs from the "
                                       "checkpoints in records.jsonl"))
    return report
