"""The audit log: a redacted, hash-chained record of every gate stage.

:class:`AuditRecorder` listens to host events and appends one record per event to the store.
Records hold *digests and redacted previews* of arguments and results, never the raw values:
secrets (API keys, bearer tokens, private keys, passwords in URLs), e-mail addresses and phone
numbers are masked, arguments a tool declares sensitive are dropped, control characters escaped.

Each record stores ``hash = SHA-256(canonical JSON of {seq, type, session_id, at, data,
prev_hash})``; :func:`verify_chain` re-derives the chain and names the first broken link.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._canonical import canonical_json, digest
from .events import EventType, HostEvent, event_payload
from .store._base import AuditRecord, Store

__all__ = ["AuditRecorder", "ChainReport", "chain_hash", "redact", "verify_chain"]

PREVIEW_CHARS = 200
GENESIS = "0" * 64

_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)",
                re.S), "[private key]"),
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}"), "[secret]"),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{10,}"), "[secret]"),
    (re.compile(r"\b(ghp|gho|ghu|ghs|github_pat|xox[abpr]|glpat)[-_][A-Za-z0-9_-]{10,}"),
     "[secret]"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "[secret]"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "[token]"),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 [secret]"),
    (re.compile(r"(?i)((?:password|passwd|pwd|secret|api[_-]?key|token|auth)"
                r"[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;]{3,}"), r"\1[secret]"),
    (re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@"), r"\1[secret]@"),
    (re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"), "[email]"),
    (re.compile(r"(?<![\w.])\+?\d[\d ().-]{7,}\d(?![\w.])"), "[phone]"),
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0080-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def redact(text: str, limit: int = PREVIEW_CHARS) -> str:
    """Mask secrets and personal data, escape control characters, cut to *limit*."""
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    text = _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text if len(text) <= limit else text[:limit] + f"… [{len(text)} chars]"


def _redact_arguments(arguments: Mapping[str, Any], sensitive: Iterable[str]) -> dict[str, Any]:
    hidden = set(sensitive)
    return {k: ("[sensitive]" if k in hidden else redact(
        v if isinstance(v, str) else canonical_json(v), 120)) for k, v in arguments.items()}


def event_record_data(event: HostEvent, sensitive: Iterable[str] = ()) -> dict[str, Any]:
    """What the audit log keeps of one event: identities, digests, redacted previews."""
    data: dict[str, Any] = {k: v for k, v in event_payload(event).items()
                            if k not in ("type", "session_id", "at") and v is not None}
    if event.principal_id is not None:
        data["principal"] = event.principal_id
    if event.call is not None:
        data["raw_arguments_sha256"] = digest(event.call.raw_arguments)
        data["raw_arguments_chars"] = len(event.call.raw_arguments)
    if event.arguments is not None:
        data["arguments_sha256"] = digest(dict(event.arguments))
        data["arguments_preview"] = _redact_arguments(event.arguments, sensitive)
    if event.decision is not None:
        data["decision"] = {"verdict": event.decision.verdict.value,
                            "reason": redact(event.decision.reason),
                            "rule_id": event.decision.rule_id,
                            "warnings": [redact(w) for w in event.decision.warnings]}
    if event.request is not None:
        data["approval_request"] = {"id": event.request.id, "digest": event.request.digest,
                                    "expires_at": event.request.expires_at.isoformat()}
    if event.answer is not None:
        data["approval_answer"] = {"approved": event.answer.approved,
                                   "approver": redact(event.answer.approver, 80),
                                   "note": redact(event.answer.note),
                                   "digest": event.answer.digest}
    if event.result is not None:
        data["result"] = {"is_error": event.result.is_error,
                          "error_kind": event.result.error_kind,
                          "chars": len(event.result.content),
                          "truncated": event.result.truncated,
                          "provenance": event.result.provenance.value,
                          "sha256": digest(event.result.content),
                          "preview": redact(event.result.content)}
    if event.reply is not None:
        data["reply"] = {"stop_reason": event.reply.stop_reason.value,
                         "tool_calls": [c.name for c in event.reply.tool_calls],
                         "text_chars": len(event.reply.text),
                         "usage": {"input_tokens": event.reply.usage.input_tokens,
                                   "output_tokens": event.reply.usage.output_tokens}}
    if event.status is not None:
        data["status"] = event.status
    if event.detail is not None:
        data["detail"] = redact(event.detail)
    return data


def chain_hash(seq: int, type: str, session_id: str, at: float, data: Mapping[str, Any],
               prev_hash: str) -> str:
    """The hash of one record, chained to the previous one."""
    return digest({"seq": seq, "type": type, "session_id": session_id, "at": at,
                   "data": data, "prev_hash": prev_hash})


@dataclass(frozen=True, slots=True)
class ChainReport:
    ok: bool
    records: int
    broken_at: int | None = None
    problem: str = ""


def verify_chain(records: Iterable[AuditRecord]) -> ChainReport:
    """Re-derive the hash chain; report the first record that does not fit."""
    prev = GENESIS
    expected_seq = 1
    count = 0
    for record in records:
        count += 1
        if record.seq != expected_seq:
            return ChainReport(False, count, record.seq,
                               f"expected record {expected_seq}, found {record.seq} "
                               "(deleted, inserted or reordered)")
        if record.prev_hash != prev:
            return ChainReport(False, count, record.seq, "previous-hash link is broken")
        if chain_hash(record.seq, record.type, record.session_id, record.at, record.data,
                      record.prev_hash) != record.hash:
            return ChainReport(False, count, record.seq, "record content was edited")
        prev = record.hash
        expected_seq += 1
    return ChainReport(True, count)


class AuditRecorder:
    """A host listener appending one redacted record per event to the store."""

    def __init__(self, store: Store, *, sensitive_by_tool: Mapping[str, Iterable[str]]
                 | None = None, skip: Iterable[EventType] = ()) -> None:
        self._store = store
        self._sensitive = sensitive_by_tool or {}
        self._skip = frozenset(skip)

    def sensitive_for(self, tool: str | None) -> Iterable[str]:
        return self._sensitive.get(tool or "", ())

    async def __call__(self, event: HostEvent) -> None:
        if event.type in self._skip:
            return
        await self._store.append_audit(event.type.value, event.session_id, event.at,
                                       event_record_data(event, self.sensitive_for(event.tool)))
