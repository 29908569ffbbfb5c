"""The audit hash chain: how one record's hash is derived from the record before it.

A leaf module (it imports only :mod:`anfitrion._canonical`): the stores chain the records they
append with it, and :mod:`anfitrion._audit` verifies chains with it, so neither imports the
other. ``anfitrion._audit.chain_hash`` and ``anfitrion._audit.chain_texts`` are these functions.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import encode_basestring as _encode_utf8
from json.encoder import encode_basestring_ascii as _encode_ascii
from typing import Any

from ._canonical import float_free_bytes

__all__ = ["CHECKPOINT", "GENESIS", "PRUNED", "batch_body", "batch_hash", "chain_batch",
           "chain_hash", "chain_rows", "chain_texts", "head_free_parts", "legacy_batch_hash",
           "pack_batch"]

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


def chain_texts(seq: int, prev_hash: str,
                rows: Iterable[tuple[str, str, float, str | bytes]]) -> list[tuple[int, str, str]]:
    """Chain *rows* (type, session id, at, canonical data text or its UTF-8 bytes), appended
    together, after the record *seq* whose hash is *prev_hash*: each record's ``(seq,
    prev_hash, hash)`` — **format 2**, as anfitrion wrote batches before format 3
    (:func:`chain_batch`); kept to write and read logs of that format.

    **One hash per batch** (format 2): every record of the batch stores *prev_hash* and the
    batch's hash, the SHA-256 of each record's :func:`chain_hash` text (its header line, with
    *prev_hash*, and its data), joined by newlines. A batch of one record is hashed exactly
    as :func:`chain_hash` hashes it (format 1, one hash per record), so logs written before
    and records appended alone (checkpoints, prunes) are batches of one. A reader tells the
    batches apart by their links: the records of one share their previous hash and their
    hash, which two records chained one after the other never do.
    """
    out: list[tuple[int, str, str]] = []
    hasher = _sha256()
    prefixes: dict[tuple[str, str], bytes] = {}
    tail = b"|" + _encode_ascii(prev_hash).encode("ascii") + b"\n"
    for type, session_id, at, text in rows:
        seq += 1
        if out:
            hasher.update(b"\n")
        prefix = prefixes.get((type, session_id))
        if prefix is None:  # most records of a batch share the session, many the type
            prefix = prefixes[type, session_id] = _prefix(type, session_id)
        hasher.update(b"%d|%b|%b%b" % (seq, prefix, repr(float(at)).encode("ascii"), tail))
        hasher.update(text if isinstance(text, bytes) else
                      text.encode("utf-8", "surrogatepass"))
        out.append((seq, prev_hash, ""))
    digest = hasher.hexdigest()
    return [(n, prev, digest) for n, prev, _ in out]


def legacy_batch_hash(records: Sequence[tuple[int, str, str, float, Mapping[str, Any]]],
                      prev_hash: str) -> str:
    """The hash :func:`chain_texts` (format 2) gives the batch *records* — ``(seq, type,
    session_id, at, data)``, consecutive — appended after *prev_hash* (the verifier's side)."""
    if not records:
        return ""
    rows = [(type, session_id, at, float_free_bytes(data))
            for _, type, session_id, at, data in records]
    return chain_texts(records[0][0] - 1, prev_hash, rows)[-1][2]


def _prefix(type: str, session_id: str) -> bytes:
    """``"type"|"session_id"`` of a header, JSON-quoted (ASCII only)."""
    if type.__class__ is str and session_id.__class__ is str:
        return f"{_encode_ascii(type)}|{_encode_ascii(session_id)}".encode("ascii")
    return f"{_quoted(type)}|{_quoted(session_id)}".encode("ascii")


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


# -- format 3: a batch hashed as one unit -------------------------------------------------------

_BATCH = b"batch|%d|%b\n"


def _batch_header(first_seq: int, prev_hash: str) -> bytes:
    """``batch|first seq|"prev_hash"`` and a newline: no format 1 or 2 text starts so."""
    quoted = _encode_ascii(prev_hash) if prev_hash.__class__ is str else _quoted(prev_hash)
    return _BATCH % (int(first_seq), quoted.encode("ascii"))


def _text(value: str) -> bytes:
    """A string as canonical JSON writes it (UTF-8 kept, unpaired surrogates kept)."""
    if value.__class__ is str:
        return _encode_utf8(value).encode("utf-8", "surrogatepass")
    return float_free_bytes(value)  # not a string: a record read back from an edited export


def batch_body(rows: Iterable[tuple[str, str, float, str | bytes]]) -> bytes:
    """The hashed body of a format 3 batch from each record's canonical data text: the
    canonical JSON of ``[[type, session_id, at, data], ...]`` (``at`` a float).

    :func:`pack_batch` serialises the same list in one pass; the two agree byte for byte."""
    out = []
    for type, session_id, at, text in rows:
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        out.append(b"[%b,%b,%b,%b]" % (_text(type), _text(session_id), _float(at), data))
    return b"[" + b",".join(out) + b"]"


def _float(at: float) -> bytes:
    """A float as the standard encoder writes it (``NaN``/``Infinity`` for the others, which
    canonical JSON refuses and a record's time never is)."""
    at = float(at)
    if math.isfinite(at):
        return repr(at).encode("ascii")
    return json.dumps(at).encode("ascii")


def pack_batch(entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> bytes:
    """:func:`batch_body` of *entries* (type, session id, at, data) in one serialisation."""
    times = [float(at) for _, _, at, _ in entries]
    if all(math.isfinite(at) for at in times):
        # records hold no floats but their times (anfitrion._audit.event_record_data)
        return float_free_bytes([[type, session_id, at, data] for (type, session_id, _, data),
                                 at in zip(entries, times, strict=True)])
    return batch_body([(type, session_id, at, float_free_bytes(data))
                       for (type, session_id, _, data), at in zip(entries, times, strict=True)])


def chain_batch(seq: int, prev_hash: str, body: bytes) -> str:
    """The hash of a format 3 batch (two records or more) whose :func:`batch_body` is
    *body*, appended after the record *seq* whose hash is *prev_hash*.

    **One hash per batch, over one text** (format 3): ``batch|<first seq>|"<prev_hash>"``, a
    newline, and the body — one header for the batch instead of one per record. Every record
    of the batch stores *prev_hash* and this hash, as in format 2; a batch of one record is
    hashed as :func:`chain_hash` hashes it (format 1)."""
    return _sha256(_batch_header(seq + 1, prev_hash) + body).hexdigest()


def chain_rows(seq: int, prev_hash: str, rows: Sequence[tuple[str, str, float, str | bytes]]
               ) -> list[tuple[int, str, str]]:
    """Chain *rows* (type, session id, at, canonical data text or its UTF-8 bytes) appended
    together after the record *seq* whose hash is *prev_hash*, as the stores write them now:
    each record's ``(seq, prev_hash, hash)`` — format 3 for two records or more, format 1
    for one."""
    before, between, after = head_free_parts(rows)
    digest = _sha256(before + b"%d" % (seq + 1) + between + _quoted(prev_hash).encode("ascii")
                     + after).hexdigest()
    return [(seq + i, prev_hash, digest) for i in range(1, len(rows) + 1)]


def head_free_parts(rows: Sequence[tuple[str, str, float, str | bytes]]
                    ) -> tuple[bytes, bytes, bytes]:
    """The hashed text of *rows* appended together (:func:`chain_rows`) without the two
    things only the chain's head decides: *before*, *between* and *after* such that the text
    is ``before + str(first seq) + between + JSON-quoted prev_hash + after``.

    A store that chains the rows where the head is (PostgreSQL: in the statement that locks
    it, one round trip, whichever process wrote last) finishes the text and hashes it there;
    this is the one definition of formats 1 and 3 both sides use."""
    if len(rows) == 1:  # format 1: seq|"type"|"session_id"|at|"prev_hash"\n + data
        type, session_id, at, text = rows[0]
        body = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        return b"", b"|" + _prefix(type, session_id) + b"|%b|" % repr(float(at)).encode(
            "ascii"), b"\n" + body
    # format 3: batch|first seq|"prev_hash"\n + the batch's body
    return b"batch|", b"|", b"\n" + batch_body(rows)


def batch_hash(records: Sequence[tuple[int, str, str, float, Mapping[str, Any]]],
               prev_hash: str) -> str:
    """The hash :func:`chain_rows` gives the batch *records* — ``(seq, type, session_id,
    at, data)``, consecutive — appended after *prev_hash* (the verifier's side, format 3;
    :func:`legacy_batch_hash` is format 2's)."""
    if not records:
        return ""
    rows = [(type, session_id, at, float_free_bytes(data))
            for _, type, session_id, at, data in records]
    return chain_rows(records[0][0] - 1, prev_hash, rows)[-1][2]
