"""The audit log: a redacted, hash-chained record of every gate stage.

:class:`AuditRecorder` listens to host events and appends one record per event to the store.
Records hold *digests and redacted previews* of arguments and results, never the raw values:
secrets (API keys, bearer tokens, private keys, passwords in URLs and in prose), card numbers
(Luhn-checked), IBANs (mod-97-checked), e-mail addresses and phone numbers are masked, arguments
a tool declares sensitive are dropped, control characters escaped. ``docs/security.md`` has the
table of what is and is not masked.

Records appended together share one hash (format 3: ``SHA-256(batch|first seq|prev_hash,
newline, canonical JSON of [[type, session_id, at, data], ...])``, :mod:`anfitrion._chain`);
a record appended alone has its own. :func:`verify_chain` re-derives the chain and names the
first broken link, in logs of every format.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ._approvals import make_visible
from ._canonical import canonical_json, digest
from ._chain import CHECKPOINT, PRUNED, batch_hash, chain_hash, legacy_batch_hash
from ._chain import GENESIS as GENESIS
from ._events import EventType, HostEvent
from ._logging import install as _install_log_redaction
from ._media import record as record_media
from ._redaction import ARGUMENT_PREVIEW_CHARS as ARGUMENT_PREVIEW_CHARS
from ._redaction import MAX_PREVIEW_ARGUMENTS as MAX_PREVIEW_ARGUMENTS
from ._redaction import PREVIEW_CHARS as PREVIEW_CHARS
from ._redaction import SCAN_MARGIN as SCAN_MARGIN
from ._redaction import _redact_arguments as _redact_arguments  # resolutions use it too
from ._redaction import redact
from .store import AuditRecord, AuditStore

if TYPE_CHECKING:
    from ._tools import Tool

__all__ = [
    "CALL_IDENTITY",
    "AuditRecorder",
    "CallIdentity",
    "ChainReport",
    "export_jsonl",
    "record_to_dict",
    "records_from_jsonl",
    "verify_chain",
]

log = logging.getLogger("anfitrion.audit")


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """Who a call runs for, beyond the principal id, as an authorization server said it (the
    OAuth gateway sets :data:`CALL_IDENTITY` around each call): issuer, subject, client id,
    and the (server, scopes) of the upstream tokens the call used — never a token."""

    principal: str
    issuer: str
    subject: str
    client_id: str
    upstream: list[tuple[str, tuple[str, ...]]]

    def record(self) -> dict[str, Any]:
        found: dict[str, Any] = {"issuer": self.issuer, "subject": self.subject,
                                 "client_id": self.client_id}
        if self.upstream:
            found["upstream_tokens"] = [{"server": server, "scopes": list(scopes)}
                                        for server, scopes in self.upstream]
        return found


CALL_IDENTITY: ContextVar[CallIdentity | None] = ContextVar("anfitrion_call_identity",
                                                            default=None)
"""The identity every stage record of the call being run carries (``identity``), when its
principal is the record's."""


def event_record_data(event: HostEvent, sensitive: Iterable[str] = ()) -> dict[str, Any]:
    """What the audit log keeps of one event: identities, digests, redacted previews.

    Enum members are written as ``str(member)`` (their value: they are ``StrEnum``s), not
    ``member.value``, a Python-level property, on the hot path."""
    data: dict[str, Any] = {} if event.turn is None else {"turn": event.turn}
    # written by the model: may carry anything
    if event.call_id is not None:
        call_id = event.call_id
        data["call_id"] = redact(call_id, 80) if isinstance(call_id, str) else call_id
    if event.tool is not None:
        tool = event.tool
        data["tool"] = redact(tool, 80) if isinstance(tool, str) else tool
    if event.principal_id is not None:
        data["principal"] = event.principal_id
        identity = CALL_IDENTITY.get()
        if identity is not None and identity.principal == event.principal_id:
            data["identity"] = identity.record()
    if event.call is not None:
        data["raw_arguments_sha256"] = _text_digest(event.call.raw_arguments)
        data["raw_arguments_chars"] = len(event.call.raw_arguments)
    # the decided record holds the arguments; the validated one only says validation passed
    if event.arguments is not None and event.type is not EventType.CALL_VALIDATED:
        data["arguments_sha256"] = event.arguments_sha256 or digest(dict(event.arguments))
        data["arguments_preview"] = _redact_arguments(event.arguments, sensitive)
    if event.decision is not None:
        decision = event.decision
        data["decision"] = {"verdict": str(decision.verdict),
                            "reason": redact(decision.reason),
                            "rule_id": decision.rule_id,
                            "warnings": [redact(w) for w in decision.warnings]}
    if event.policy_sha256 is not None:
        data["policy_sha256"] = event.policy_sha256
    if event.enforced is not None:  # a shadow decision: what was enforced beside it
        data["enforced"] = {"verdict": event.enforced.verdict.value,
                            "rule_id": event.enforced.rule_id}
    if event.request is not None:
        data["approval_request"] = {
            "id": event.request.id, "digest": event.request.digest,
            "expires_at": event.request.expires_at.isoformat(),
            # which definition of the tool the person was asked about (the digest binds it)
            "tool_definition_hash": event.request.tool_definition_hash}
    if event.answer is not None:
        data["approval_answer"] = {"approved": event.answer.approved,
                                   "approver": redact(event.answer.approver, 80),
                                   "note": redact(event.answer.note),
                                   "digest": event.answer.digest}
    if event.result is not None:
        result = event.result
        data["result"] = {"is_error": result.is_error,
                          "error_kind": result.error_kind,
                          "chars": len(result.content),
                          "truncated": result.truncated,
                          "provenance": str(result.provenance),
                          "sha256": _text_digest(result.content),
                          "preview": redact(result.content)}
        if result.media:  # what was attached, never the bytes
            data["result"]["media"] = record_media(result.media)
    if event.reply is not None:
        reply = event.reply
        data["reply"] = {"stop_reason": str(reply.stop_reason),
                         "tool_calls": [redact(c.name, 80) for c in reply.tool_calls],
                         "text_chars": len(reply.text),
                         "usage": {"input_tokens": reply.usage.input_tokens,
                                   "output_tokens": reply.usage.output_tokens}}
    if event.status is not None:
        data["status"] = event.status
    if event.effect_key is not None:
        data["effect_key"] = event.effect_key
    if event.detail is not None:
        data["detail"] = redact(event.detail)
    if event.reviewer is not None:  # issuer and subject as the provider said: ids, not prose
        data["reviewer_identity"] = {k: redact(str(v), 200) if k == "name"
                                     else make_visible(str(v))[:200]
                                     for k, v in event.reviewer.items()}
    return data


def _text_digest(text: str) -> str:
    """SHA-256 of a text's UTF-8 bytes (unpaired surrogates kept, never an error)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainReport:
    """The outcome of :func:`verify_chain`.

    Attributes:
        ok: every record fits the chain (and it ends at *expect_head*, when given).
        records: how many records were read.
        broken_at: the sequence number of the first record that does not fit.
        kind: ``edited``, ``deleted``, ``reordered``, ``inserted`` or ``truncated``.
        problem: what is wrong, in a sentence.
        head: the hash of the last record (keep it elsewhere to detect a rewritten tail).
    """

    ok: bool
    records: int
    broken_at: int | None = None
    problem: str = ""
    kind: str = ""
    head: str = GENESIS

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "records": self.records, "broken_at": self.broken_at,
                "kind": self.kind or None, "problem": self.problem or None, "head": self.head}


def _batch_end(recs: list[AuditRecord], i: int) -> int:
    """Where the batch starting at record *i* ends (exclusive): the records after it that
    share its previous hash and its hash (one hash per batch); one record in format 1."""
    first, j = recs[i], i + 1
    while j < len(recs) and recs[j].hash == first.hash and recs[j].prev_hash == first.prev_hash:
        j += 1
    return j


def _hash_ok(batch: list[AuditRecord]) -> bool:
    """Whether *batch* (consecutive records sharing their links) matches its hash."""
    first = batch[0]
    if len(batch) == 1:
        return chain_hash(first.seq, first.type, first.session_id, first.at, first.data,
                          first.prev_hash) == first.hash
    records = [(r.seq, r.type, r.session_id, r.at, r.data) for r in batch]
    # format 3 (one text per batch), else format 2 (one text per record, one hash)
    return batch_hash(records, first.prev_hash) == first.hash or \
        legacy_batch_hash(records, first.prev_hash) == first.hash


def _span(batch: list[AuditRecord]) -> str:
    return f"record {batch[0].seq}" if len(batch) == 1 else \
        f"records {batch[0].seq}–{batch[-1].seq} (one batch, one hash)"


def verify_chain(records: Iterable[AuditRecord], *,
                 expect_head: str | None = None) -> ChainReport:
    """Re-derive the hash chain; report the first record that does not fit, and how.

    *records* must be the whole log in sequence order. Every format is read: one hash per
    record (format 1), one hash per batch of records appended together over each record's
    text (format 2, :func:`anfitrion._chain.chain_texts`) and over one text for the batch
    (format 3, :func:`anfitrion._chain.chain_batch`); an edit inside a batch is reported at
    the batch's first record, naming the batch. A hash chain without a secret can be
    rewritten from the first edit onwards; pass *expect_head* (a head hash kept elsewhere,
    e.g. printed by an earlier ``anfitrion audit verify``) to detect that and a cut tail.
    """
    recs = list(records)
    position = {r.hash: i for i, r in enumerate(recs)}
    prev, expected = _base(recs)
    i = 0
    while i < len(recs):
        end = _batch_end(recs, i)
        batch = recs[i:end]
        broken = _sequence_problem(recs, i, end, expected) or \
            _link_problem(recs, i, batch, prev, position)
        if broken is None and not _hash_ok(batch):
            # a batch that lost its last records: the next one starts after a gap (deleted)
            if end < len(recs) and recs[end].seq > batch[-1].seq + 1:
                return _sequence_problem(recs, end, end + 1, batch[-1].seq + 1) or \
                    _broken(recs, batch[0].seq, "edited", f"{_span(batch)}: edited", i + 1)
            broken = _broken(recs, batch[0].seq, "edited", f"{_span(batch)}: its content does "
                             "not match its hash (edited)", i + 1)
        if broken is not None:
            return broken
        prev, expected, i = batch[-1].hash, batch[-1].seq + 1, end
    return _head_report(recs, prev, expect_head, position)


def _broken(recs: list[AuditRecord], at: int, kind: str, problem: str,
            read: int) -> ChainReport:
    return ChainReport(False, read, at, problem, kind, recs[read - 1].hash if read else GENESIS)


def _sequence_problem(recs: list[AuditRecord], start: int, end: int,
                      expected: int) -> ChainReport | None:
    """A record missing or out of order among records *start*…*end* (one batch)."""
    for i in range(start, end):
        seq = recs[i].seq
        if seq > expected:
            gap = f"{expected}" if seq == expected + 1 else f"{expected}–{seq - 1}"
            return _broken(recs, expected, "deleted", f"record {gap} is missing (deleted)",
                           i + 1)
        if seq < expected:
            return _broken(recs, seq, "reordered", f"record {seq} appears again after record "
                           f"{expected - 1} (reordered or inserted)", i + 1)
        expected += 1
    return None


def _link_problem(recs: list[AuditRecord], i: int, batch: list[AuditRecord], prev: str,
                  position: Mapping[str, int]) -> ChainReport | None:
    """The batch starting at record *i* does not link to what comes before it: how."""
    record = recs[i]
    if record.prev_hash == prev:
        return None
    j = position.get(record.prev_hash, -2 if record.prev_hash != GENESIS else -1)
    if j > i:
        return _broken(recs, record.seq, "reordered", f"record {record.seq} links to record "
                       f"{recs[j].seq}, which comes after it (reordered)", i + 1)
    if -1 <= j < i - 1:
        first = recs[j + 1].seq
        return _broken(recs, first, "inserted", f"records {first}–{recs[i - 1].seq} are not "
                       f"in the chain: record {record.seq} links past them (inserted)", i + 1)
    if _hash_ok(batch) and i > 0:
        return _broken(recs, recs[i - 1].seq, "edited", f"record {recs[i - 1].seq} was edited "
                       f"and re-hashed: record {record.seq} no longer links to it", i + 1)
    return _broken(recs, record.seq, "edited",
                   f"record {record.seq}: its previous-hash link was edited", i + 1)


def _head_report(recs: list[AuditRecord], prev: str, expect_head: str | None,
                 position: Mapping[str, int]) -> ChainReport:
    if expect_head is not None and prev != expect_head:
        where = position.get(expect_head)
        if where is not None:
            return ChainReport(False, len(recs), recs[where].seq + 1 if where + 1 < len(recs)
                               else None, "records after the expected head were appended",
                               "inserted", prev)
        return ChainReport(False, len(recs), None, "the chain does not end at the expected head "
                           "(records removed from the end, or the log rewritten)", "truncated",
                           prev)
    return ChainReport(True, len(recs), head=prev)


def _base(recs: list[AuditRecord]) -> tuple[str, int]:
    """Where the kept chain starts: record 1 after the genesis hash, or — after a prune — the
    checkpoint a later ``audit.pruned`` record names as the first record kept, after the hash
    that record names (its signature is checked by :func:`anfitrion._audit_trail.verify_trail`).
    """
    if recs and recs[0].seq > 1 and recs[0].type == CHECKPOINT:
        first = recs[0]
        for record in recs:
            data = record.data
            if record.type == PRUNED and data.get("first_kept") == first.seq and \
                    data.get("base_hash") == first.prev_hash:
                return first.prev_hash, first.seq
    return GENESIS, 1


def record_to_dict(record: AuditRecord) -> dict[str, Any]:
    """One audit record as plain JSON data (already redacted when it was recorded)."""
    return {"seq": record.seq, "type": record.type, "session_id": record.session_id,
            "at": record.at, "data": dict(record.data), "prev_hash": record.prev_hash,
            "hash": record.hash}


def export_jsonl(records: Iterable[AuditRecord]) -> Iterator[str]:
    """One canonical JSON line per record: what ``anfitrion audit export`` writes.

    The lines carry every hashed field, so the export can be verified on its own.
    """
    for record in records:
        yield canonical_json(record_to_dict(record)) + "\n"


def records_from_jsonl(lines: Iterable[str]) -> Iterator[AuditRecord]:
    """Inverse of :func:`export_jsonl`."""
    for line in lines:
        if line.strip():
            d = json.loads(line)
            yield AuditRecord(int(d["seq"]), d["type"], d["session_id"], float(d["at"]),
                              d["data"], d["prev_hash"], d["hash"])


# Events after which the buffered records must be in the store before the host goes on: a
# model request (the end of a turn), a side effect about to run, a person about to be asked,
# the end of a run.
FLUSH_ON = frozenset({EventType.MODEL_REQUESTED, EventType.EXECUTION_CLAIMED,
                      EventType.APPROVAL_REQUESTED, EventType.APPROVAL_ANSWERED,
                      EventType.RUN_ENDED, EventType.RUN_RESUMED})
MAX_BUFFERED = 64


class Checkpoints(Protocol):
    """What the recorder needs of :class:`anfitrion._audit_trail.Checkpointer`."""

    def written(self, count: int) -> None: ...

    def due(self) -> bool: ...

    async def maybe(self) -> None: ...


class AuditRecorder:
    """A host listener recording one redacted, hash-chained record per event.

    Records are built when their event happens and written in batches — one store transaction
    per turn — and always before a side effect runs, before a person is asked, and when a run
    ends. A crash can lose at most the records of the read-only calls of the turn in progress;
    everything that preceded an action is stored before the action.
    """

    def __init__(self, store: AuditStore, *, sensitive_by_tool: Mapping[str, Iterable[str]]
                 | None = None, skip: Iterable[EventType] = (),
                 checkpoints: Checkpoints | None = None) -> None:
        self._store = store
        self.checkpoints = checkpoints
        """Signs the chain's head every so many records (:mod:`anfitrion._audit_trail`)."""
        self._sensitive: dict[str, frozenset[str]] = {
            name: frozenset(names) for name, names in (sensitive_by_tool or {}).items()}
        self._skip = frozenset(skip)
        self._buffer: list[tuple[str, str, float, dict[str, Any]]] = []
        # one recorder may serve event loops in several threads (a framework's sync runs): a
        # record appended while another thread takes the buffer must not fall between them
        self._lock = threading.Lock()

    def learn(self, tools: Iterable[Tool]) -> None:
        """Note the sensitive argument names of *tools* (the host calls this each turn)."""
        for tool in tools:
            if tool.sensitive:
                self._sensitive[tool.name] = frozenset(tool.sensitive)

    async def __call__(self, event: HostEvent) -> None:
        if self._add(event):
            await self.flush()

    def record(self, event: HostEvent) -> Awaitable[None] | None:
        """:meth:`__call__` as the runtime's listener: buffer *event*'s record, and return the
        flush to await when it ends a batch, else ``None`` (no coroutine for most events).
        Like any listener's, a failure is logged and never ends the run."""
        try:
            flush = self._add(event)
        # BLE001 - the recorder is a listener: as for every listener, logged, never ends the run
        except Exception:
            log.exception("the audit recorder failed on %s", event.type)
            return None
        return self._flush_logged() if flush else None

    def add_unflushed(self, event: HostEvent) -> None:
        """Buffer *event*'s record without writing the buffer: the caller's next write takes
        it (:meth:`take`), or :meth:`forget` removes it. A failure is logged, as in
        :meth:`record`."""
        try:
            self._add(event)
        # BLE001 - the recorder is a listener: as for every listener, logged, never ends the run
        except Exception:
            log.exception("the audit recorder failed on %s", event.type)

    def entry(self, event: HostEvent) -> tuple[str, str, float, dict[str, Any]] | None:
        """The record of *event*, not buffered (``None`` for a kind it skips): for a caller
        that writes it in a transaction of its own (the gate's claim), then calls
        :meth:`written`."""
        if event.type in self._skip:
            return None
        return (str(event.type), event.session_id, event.at, event_record_data(
            event, self._sensitive.get(event.tool or "", ())))

    def forget(self, event: HostEvent) -> None:
        """Drop the record of *event* if it is still buffered (what it reported did not
        happen: the save it went with failed)."""
        key = (str(event.type), event.session_id, event.at)
        with self._lock:
            for i in range(len(self._buffer) - 1, -1, -1):
                if self._buffer[i][:3] == key:
                    del self._buffer[i]
                    break

    def _add(self, event: HostEvent) -> bool:
        """Buffer *event*'s record; whether the buffer must be written now."""
        kind = event.type
        if kind not in self._skip:
            record = (str(kind), event.session_id, event.at, event_record_data(
                event, self._sensitive.get(event.tool or "", ())))
            with self._lock:
                self._buffer.append(record)
        if kind is EventType.MODEL_REQUESTED and event.turn == 0:
            # a new session's first model request ends no turn: its start is written with
            # the records of its first turn (nothing of the session is stored before either)
            return len(self._buffer) >= MAX_BUFFERED
        return bool(self._buffer) and (kind in FLUSH_ON or len(self._buffer) >= MAX_BUFFERED)

    async def _flush_logged(self) -> None:
        try:
            await self.flush()
        # BLE001 - the recorder is a listener: as for every listener, logged, never ends the run
        except Exception:
            log.exception("the audit recorder could not store its records")

    async def flush(self) -> None:
        """Write the buffered records (one transaction)."""
        batch = self.take()
        if batch:
            await self._store.append_audit_many(batch)
            await self.written(len(batch))

    async def written(self, count: int) -> None:
        """*count* records were stored (by :meth:`flush`, or by a caller that took them):
        write a signed checkpoint if one is due."""
        checkpoints = self.checkpoints
        if checkpoints is not None:
            checkpoints.written(count)
            if checkpoints.due():
                await checkpoints.maybe()

    def take(self) -> list[tuple[str, str, float, dict[str, Any]]]:
        """The buffered records, leaving the buffer empty: the caller writes them (in the
        transaction that saves the session) or hands them back with :meth:`give_back`."""
        with self._lock:
            batch, self._buffer = self._buffer, []
        return batch

    def give_back(self, batch: list[tuple[str, str, float, dict[str, Any]]]) -> None:
        """Records :meth:`take` returned that were not written: first in the buffer again."""
        with self._lock:
            self._buffer[:0] = batch


# Logs get the audit log's redaction: every ``anfitrion.*`` record, whatever the handler.
_install_log_redaction()
