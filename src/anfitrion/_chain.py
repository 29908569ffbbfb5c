"""The audit hash chain: how one record's hash is derived from the record before it.

A leaf module (it imports only :mod:`anfitrion._canonical`): the stores chain the records they
append with it, and :mod:`anfitrion._audit` verifies chains with it, so neither imports the
other. ``anfitrion._audit.chain_hash`` and ``anfitrion._audit.chain_texts`` are these functions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring_ascii as _encode_ascii
from typing import Any

from ._canonical import float_free_bytes

__all__ = ["CHECKPOINT", "GENESIS", "PRUNED", "chain_hash", "chain_texts"]

GENESIS = "0" * 64
"""The previous hash of the first record."""
CHECKPOINT = "audit.checkpoint"
"""The type of a signed checkpoint record (:mod:`anfitrion._audit_trail`)."""
PRUNED = "audit.pruned"
"""The type of the signed record a prune writes: after it, the chain starts at a checkpoint."""
_sha256 = hashlib.sha256


def chain_hash(seq: int, type: str, session_id: str, at: float, data: Mapping[str, Any],
               prev_hash: str, *, data_text: str | None = None) -> str:
    """The hash of one record, chained to the previous one.

    SHA-256 over ``seq|"type"|"session_id"|at|prev_hash``, a newline, and the canonical JSON of
    *data* (*data_text*, when the caller serialised it already). Strings are JSON-quoted, so no
    two different records share the hashed text.
    """
    body = float_free_bytes(data) if data_text is None else \
        data_text.encode("utf-8", "surrogatepass")
    return _sha256(_header(seq, type, session_id, at, prev_hash) + body).hexdigest()


def chain_texts(seq: int, prev_hash: str, rows: Iterable[tuple[str, str, float, str]]
                ) -> list[tuple[int, str, str]]:
    """Chain *rows* (type, session id, at, canonical data text) after the record *seq* whose
    hash is *prev_hash*, in one pass: each record's ``(seq, prev_hash, hash)``, the hashes
    being exactly :func:`chain_hash`'s (a store verifies them one record at a time)."""
    out: list[tuple[int, str, str]] = []
    for type, session_id, at, text in rows:
        seq += 1
        digest = _sha256(_header(seq, type, session_id, at, prev_hash)
                         + text.encode("utf-8", "surrogatepass")).hexdigest()
        out.append((seq, prev_hash, digest))
        prev_hash = digest
    return out


def _header(seq: int, type: str, session_id: str, at: float, prev_hash: str) -> bytes:
    # ASCII only: a quoted string has every non-ASCII character escaped
    if type.__class__ is str and session_id.__class__ is str and prev_hash.__class__ is str:
        return (f"{int(seq)}|{_encode_ascii(type)}|{_encode_ascii(session_id)}|{float(at)!r}|"
                f"{_encode_ascii(prev_hash)}\n").encode("ascii")
    return (f"{int(seq)}|{_quoted(type)}|{_quoted(session_id)}|{float(at)!r}|"
            f"{_quoted(prev_hash)}\n").encode("ascii")


def _quoted(value: Any) -> str:
    """``json.dumps(value)``; a string (always, in a well-formed record) takes the short way:
    that is the function ``json.dumps`` itself calls for one."""
    if isinstance(value, str):
        return _encode_ascii(value)
    return json.dumps(value)
