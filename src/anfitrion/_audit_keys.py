"""Ed25519 keys for the audit trail: signing checkpoints, prunes and export bundles.

The signing key is a PKCS#8 PEM file (``anfitrion audit keygen``) named by
``$ANFITRION_AUDIT_KEY_FILE``, or the PEM text itself in ``$ANFITRION_AUDIT_KEY``. A key file
that others can read is refused. A key's id is ``ed25519:`` and the first 16 hex digits of the
SHA-256 of its raw public key; every signed statement carries it, so a verifier holding several
public keys (a rotation) knows which one to use.

A signed statement is a JSON object; the signature (``sig``, base64) covers the canonical JSON
of every other field, prefixed with :data:`DOMAIN`, so a signature made for something else
cannot be passed off as one of these.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._canonical import canonical_json
from ._home import environment
from .exceptions import ConfigError, MissingDependencyError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "DOMAIN",
    "KEY_ENV",
    "KEY_FILE_ENV",
    "Keyring",
    "SigningKey",
    "format_time",
    "generate_key",
    "key_id",
    "load_public_key",
    "load_signing_key",
    "parse_time",
    "sign",
]

DOMAIN = b"anfitrion-audit-v1\n"
KEY_FILE_ENV = "ANFITRION_AUDIT_KEY_FILE"
KEY_ENV = "ANFITRION_AUDIT_KEY"


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # pragma: no cover - the audit extra installs it
        raise MissingDependencyError("audit", "cryptography") from None
    return ed25519


def _serialization() -> Any:
    from cryptography.hazmat.primitives import serialization
    return serialization


def key_id(public: Ed25519PublicKey) -> str:
    """``ed25519:`` and 16 hex digits of the SHA-256 of the raw public key."""
    s = _serialization()
    raw = public.public_bytes(s.Encoding.Raw, s.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> bytes:
    s = _serialization()
    pem: bytes = public.public_bytes(s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo)
    return pem


@dataclass(frozen=True)
class SigningKey:
    """A private key and its id."""

    private: Ed25519PrivateKey
    key_id: str

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    def sign(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """*fields* with ``key_id`` and ``sig`` added."""
        return sign(self, fields)


def _signed_bytes(statement: Mapping[str, Any]) -> bytes:
    return DOMAIN + canonical_json({k: v for k, v in statement.items()
                                    if k != "sig"}).encode("utf-8")


def sign(key: SigningKey, fields: Mapping[str, Any]) -> dict[str, Any]:
    """*fields* with ``key_id`` and ``sig`` (base64 Ed25519 over the rest) added."""
    statement = {**fields, "key_id": key.key_id}
    statement["sig"] = base64.b64encode(key.private.sign(_signed_bytes(statement))).decode()
    return statement


def _private_from_pem(pem: bytes, where: str) -> SigningKey:
    ed = _ed25519()
    try:
        private = _serialization().load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"not an unencrypted PEM private key: {exc}", path=where) from None
    if not isinstance(private, ed.Ed25519PrivateKey):
        raise ConfigError("the audit key must be an Ed25519 key (anfitrion audit keygen)",
                          path=where)
    return SigningKey(private, key_id(private.public_key()))


def load_signing_key(path: str | Path | None = None,
                     environ: Mapping[str, str] | None = None) -> SigningKey | None:
    """The signing key from *path*, else ``$ANFITRION_AUDIT_KEY_FILE``, else the PEM text in
    ``$ANFITRION_AUDIT_KEY``; ``None`` when none is configured.

    Raises:
        ConfigError: the file is missing, readable by others, or not an Ed25519 private key.
    """
    env = environment() if environ is None else environ
    name = str(path) if path is not None else env.get(KEY_FILE_ENV)
    if name:
        file = Path(name)
        try:
            mode = file.stat().st_mode
            pem = file.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the audit signing key: {exc.strerror}",
                              path=name) from None
        if os.name == "posix" and mode & 0o077:
            raise ConfigError(f"the audit signing key is readable by others (mode "
                              f"{mode & 0o777:o}): chmod 600 it", path=name)
        return _private_from_pem(pem, name)
    text = env.get(KEY_ENV)
    if text:
        return _private_from_pem(text.encode("utf-8"), f"${KEY_ENV}")
    return None


def generate_key(path: str | Path) -> tuple[SigningKey, Path]:
    """A new key written to *path* (mode 600, never over an existing file) and its public key
    to ``<path>.pub``; the key and the public key's path.

    Raises:
        ConfigError: *path* exists.
    """
    ed, s = _ed25519(), _serialization()
    private = ed.Ed25519PrivateKey.generate()
    pem = private.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption())
    target = Path(path)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError("exists already: a key is never overwritten", path=str(target)) from None
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    public_path = target.with_name(target.name + ".pub")
    public_path.write_bytes(public_pem(private.public_key()))
    return SigningKey(private, key_id(private.public_key())), public_path


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """A public key from a PEM file (a private key's file gives its public key).

    Raises:
        ConfigError: not an Ed25519 key in PEM.
    """
    ed, s = _ed25519(), _serialization()
    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the public key: {exc.strerror}", path=str(path)) from None
    try:
        key = s.load_pem_public_key(pem) if b"PUBLIC KEY" in pem else \
            s.load_pem_private_key(pem, password=None).public_key()
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"not a PEM key: {exc}", path=str(path)) from None
    if not isinstance(key, ed.Ed25519PublicKey):
        raise ConfigError("not an Ed25519 key", path=str(path))
    public: Ed25519PublicKey = key
    return public


def format_time(at: float) -> str:
    """Epoch seconds as ISO 8601 in UTC, to the microsecond."""
    from datetime import UTC
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="microseconds")


def parse_time(text: str) -> float:
    """An ISO 8601 date or time (UTC when no zone is given) as epoch seconds.

    Raises:
        ConfigError: not a date.
    """
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"not an ISO 8601 date or time: {text!r}") from None
    if when.tzinfo is None:
        from datetime import UTC
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


@dataclass
class Keyring:
    """The public keys a verifier trusts, and the keys it no longer trusts.

    ``revoked`` maps a key id to the time from which its signatures are refused (``0``: all
    of them; a date: a key retired or compromised then — signatures dated before it stand).
    """

    keys: dict[str, Ed25519PublicKey] = field(default_factory=dict)
    revoked: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, public_keys: Iterable[Ed25519PublicKey],
           revoked: Iterable[str] = ()) -> Keyring:
        """Keys, and revocations written ``KEY_ID`` or ``KEY_ID@DATE``."""
        ring = cls({key_id(k): k for k in public_keys})
        for item in revoked:
            kid, _, when = item.partition("@")
            ring.revoked[kid.strip()] = parse_time(when) if when else 0.0
        return ring

    def __bool__(self) -> bool:
        return bool(self.keys)

    def problem(self, statement: Mapping[str, Any]) -> str | None:
        """Why *statement*'s signature is not accepted, or ``None`` when it is."""
        from cryptography.exceptions import InvalidSignature

        kid, sig = statement.get("key_id"), statement.get("sig")
        if not isinstance(kid, str) or not isinstance(sig, str):
            return "it is not signed"
        key = self.keys.get(kid)
        if key is None:
            return f"it is signed with key {kid!r}, which is not one of the keys given"
        try:
            key.verify(base64.b64decode(sig, validate=True), _signed_bytes(statement))
        except (InvalidSignature, ValueError):
            return f"its signature does not verify with key {kid}"
        if kid in self.revoked:
            since = self.revoked[kid]
            signed_at = statement.get("signed_at")
            when = parse_time(signed_at) if isinstance(signed_at, str) else None
            if since == 0.0 or when is None or when >= since:
                return f"it is signed with key {kid}, which is revoked"
        return None
