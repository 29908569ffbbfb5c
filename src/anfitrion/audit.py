"""The audit log: a redacted, hash-chained record of every gate stage.

:class:`AuditRecorder` listens to host events and appends one record per event to the store.
Records hold *digests and redacted previews* of arguments and results, never the raw values:
secrets (API keys, bearer tokens, private keys, passwords in URLs and in prose), card numbers
(Luhn-checked), IBANs (mod-97-checked), e-mail addresses and phone numbers are masked, arguments
a tool declares sensitive are dropped, control characters escaped. ``docs/security.md`` has the
table of what is and is not masked.

Each record stores ``hash = SHA-256(canonical JSON of {seq, type, session_id, at, data,
prev_hash})``; :func:`verify_chain` re-derives the chain and names the first broken link.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import threading
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _encode_ascii
from typing import TYPE_CHECKING, Any

from ._canonical import canonical_json, digest, float_free_bytes
from .events import EventType, HostEvent
from .media import record as record_media
from .store._base import AuditRecord, Store

if TYPE_CHECKING:
    from .tools import Tool

__all__ = ["AuditRecorder", "ChainReport", "RedactingFilter", "chain_hash", "chain_texts",
           "export_jsonl", "iban_valid", "luhn_valid", "record_to_dict", "records_from_jsonl",
           "redact", "redact_lines", "verify_chain"]

PREVIEW_CHARS = 200
SCAN_MARGIN = 8192
ARGUMENT_PREVIEW_CHARS = 120
MAX_PREVIEW_ARGUMENTS = 20
GENESIS = "0" * 64
log = logging.getLogger("anfitrion.audit")
_sha256 = hashlib.sha256

_SECRET_NAME = (r"[\w-]*(?:password|passwd|passcode|passphrase|pwd|secret|api[_-]?key"
                r"|access[_-]?key|token|auth|credential|private[_-]?key|session[_-]?key|cookie)[\w-]*")
# "my password is hunter2", "the passcode: 1234", "mi contraseña es …", "mein Passwort lautet …":
# the word after a password word and a verb or colon. Every repetition is possessive or
# bounded, so a hostile run of "is is is …" costs one pass.
_PROSE_SECRET = re.compile(
    r"(?i)(\b(?:password|passwd|passcode|passphrase|pass word|pin(?: code| number)?|pwd"
    r"|contraseña|contrasena|clave|senha|palavra-passe|mot de passe|passwort|kennwort"
    r"|wachtwoord|hasło|haslo|parola d'ordine)\b"
    r"(?: (?:for|of|to|für|de|do|da|del|della|du|van|voor|pour|para)(?: [\w.@-]{1,40}){1,2})?"
    r"[^\S\r\n]*+(?:(?:(?:is|was|es|era|é|est|était|ist|lautet|war|è)\b|:|=)[^\S\r\n]*+){1,3}"
    r"[\"'«“‘]?)[^\s\"'»”’,;]{2,}")
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)",
                re.S), "[private key]"),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{10,}"), "[secret]"),
    (re.compile(r"\b(?:sk|pk|rk)[-_][A-Za-z0-9_-]{16,}"), "[secret]"),
    (re.compile(r"\b(ghp|gho|ghu|ghs|ghr|github_pat|xox[abpr]|glpat|hf)[-_][A-Za-z0-9_-]{10,}"),
     "[secret]"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "[secret]"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "[secret]"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "[token]"),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 [secret]"),
    (re.compile(r"(?i)(\b" + _SECRET_NAME + r"[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;}]{3,}"),
     r"\1[secret]"),
    (_PROSE_SECRET, r"\1[secret]"),
    # Each run of candidate characters is scanned once (lookbehind + possessive): linear time
    # on hostile input such as "a.a.a.…", where a plain pattern backtracks quadratically.
    (re.compile(r"(?i)((?<![a-z0-9+.-])[a-z][a-z0-9+.-]*+://[^/\s:@]*+:)[^@\s/]++@"),
     r"\1[secret]@"),
    (re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]++@[A-Za-z0-9-]+"
                r"(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
     "[email]"),
)
_SECRET_ARGUMENT = re.compile(r"(?i)^" + _SECRET_NAME + "$")
_PHONE = re.compile(r"(?<![\w.+-])\+?\(?\d[\d ().-]{6,}\d(?![\w-]|\.\d)")
_NOT_PHONE = re.compile(r"\d{4}-\d{2}-\d{2}|\d+\.\d+$")
_DIGIT_RUN = re.compile(r"\d+(?:[ -]\d+)*")
_DIGIT_GROUP = re.compile(r"\d+")
_IBAN = re.compile(r"(?i)(?<![a-z0-9])[a-z]{2}\d{2}(?: ?[a-z0-9]{4}){2,7}(?: ?[a-z0-9]{1,4})?"
                   r"(?![a-z0-9])")
CARD_FIRST_DIGITS = "23456"
"""Card numbers start with 2–6 (Mastercard, Amex/Diners/JCB, Visa, Mastercard/Maestro,
Discover/UnionPay); a 13-digit millisecond timestamp starts with 1 and is not masked."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0080-\u009f\u200b-\u200f\u2028\u2029\u202a-\u202e"
                      r"\u2060\u2066-\u2069\ufeff]")


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum every payment card number carries."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = ord(ch) - 48
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """ISO 13616 check: 15–34 characters whose mod-97 remainder, rearranged, is 1."""
    compact = text.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def _mask_iban(match: re.Match[str]) -> str:
    return "[iban]" if iban_valid(match.group()) else match.group()


def _mask_cards(text: str) -> str | None:
    """*text* with every Luhn-valid card number (13–19 digits in groups split by single
    spaces or dashes) masked, or ``None`` when it holds none. Work is bounded: a card is
    written in at most five groups (4-4-4-4-3), so at most eight are joined from each group."""
    pieces: list[str] = []
    last = 0
    for run in _DIGIT_RUN.finditer(text):
        groups = [(m.start() + run.start(), m.end() + run.start(), m.group())
                  for m in _DIGIT_GROUP.finditer(run.group())]
        i = 0
        while i < len(groups):
            best, digits = -1, ""
            if groups[i][2][0] not in CARD_FIRST_DIGITS:
                i += 1
                continue
            for j in range(i, min(len(groups), i + 8)):
                digits += groups[j][2]
                if len(digits) > 19:
                    break
                if len(digits) >= 13 and digits[0] in CARD_FIRST_DIGITS and luhn_valid(digits):
                    best = j
            if best < 0:
                i += 1
                continue
            pieces += [text[last:groups[i][0]], "[card]"]
            last = groups[best][1]
            i = best + 1
    if not pieces:
        return None
    return "".join(pieces) + text[last:]


def _mask_phone(match: re.Match[str]) -> str:
    text = match.group()
    carded = _mask_cards(text)
    if carded is not None:
        return carded
    digits = sum(ch.isdigit() for ch in text)
    if 9 <= digits <= 15 and not _NOT_PHONE.match(text):
        return "[phone]"
    return text


# A value matches no secret pattern unless it contains one of these: most values skip the
# thirteen patterns with a single scan.
_TRIGGER = re.compile(r"(?i)-----BEGIN|\b(?:sk|pk|rk|gh[pousr]|github_pat|xox[abpr]|glpat|hf)"
                      r"[-_]|AKIA|ASIA|AIza|eyJ|bearer|basic|token|pass|pwd|secret|key|auth"
                      r"|credential|cookie|://|@|\bpin\b|contrase|clave|senha|kennwort"
                      r"|wachtwoord|has[łl]o|parola")
_DIGITS = re.compile(r"\d[\d ().-]{6,}\d")


def redact(text: str, limit: int = PREVIEW_CHARS) -> str:
    """Mask secrets and personal data, escape control characters, cut to *limit*.

    Example:
        >>> redact("mail bob@example.com, key sk-abcdefghijklmnopqrstuv\\x1b[31m")
        'mail [email], key [secret]\\\\u001b[31m'
    """
    if len(text) <= 512:  # names, ids, reasons and short values repeat across a call's events
        return _redact_short(text, limit)
    return _redact(text, limit)


@functools.lru_cache(maxsize=4096)
def _redact_short(text: str, limit: int) -> str:
    return _redact(text, limit)


def _redact(text: str, limit: int) -> str:
    full = len(text)
    # Only a bounded prefix is scanned: a hostile 256 KiB value must not cost the event loop
    # seconds of regex work. The margin keeps any secret that starts inside the preview (a
    # PEM private key is under 4 KiB) whole while it is matched.
    text = text[:limit + SCAN_MARGIN]
    if _TRIGGER.search(text):
        for pattern, replacement in _SECRET_PATTERNS:
            text = pattern.sub(replacement, text)
    if _DIGITS.search(text):
        text = _IBAN.sub(_mask_iban, text)
        text = _PHONE.sub(_mask_phone, text)
    text = _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if len(text) <= limit and full <= limit + SCAN_MARGIN:
        return text
    return text[:limit] + f"… [{full} chars]"


def redact_lines(text: str, line_limit: int = 1000, max_lines: int = 200) -> str:
    """:func:`redact` for multi-line text (a traceback): newlines are kept, every line is
    redacted and cut to *line_limit*, a private-key block spanning lines is masked whole, and
    at most *max_lines* lines are kept (the last ones: a traceback ends with what happened).
    """
    lines = text.rstrip("\n").split("\n")
    if len(lines) > max_lines:
        lines = [f"… [{len(lines) - max_lines} lines]", *lines[-max_lines:]]
    joined = "\n".join(lines)
    if "-----BEGIN" in joined:
        joined = _SECRET_PATTERNS[0][0].sub(_SECRET_PATTERNS[0][1], joined)
    return "\n".join(redact(line, line_limit) for line in joined.split("\n"))


def _redact_arguments(arguments: Mapping[str, Any], sensitive: Iterable[str]) -> dict[str, Any]:
    """Previews of argument values: declared-sensitive and secret-named ones dropped."""
    hidden = sensitive if isinstance(sensitive, (set, frozenset)) else set(sensitive)
    preview: dict[str, Any] = {}
    for key in list(arguments)[:MAX_PREVIEW_ARGUMENTS]:
        value = arguments[key]
        if key in hidden or _secret_argument(key):
            preview[redact(key, 64)] = "[sensitive]"
        else:
            text = value if isinstance(value, str) else canonical_json(value)
            preview[redact(key, 64)] = redact(text, ARGUMENT_PREVIEW_CHARS)
    if len(arguments) > MAX_PREVIEW_ARGUMENTS:
        preview["…"] = f"{len(arguments) - MAX_PREVIEW_ARGUMENTS} more arguments"
    return preview


def _secret_argument(name: str) -> bool:
    """Whether an argument's name says it holds a secret (``api_key``, ``password``, …)."""
    if len(name) <= 64:  # tool schemas repeat the same few names
        return _secret_argument_short(name)
    return _SECRET_ARGUMENT.match(name) is not None


@functools.lru_cache(maxsize=1024)
def _secret_argument_short(name: str) -> bool:
    return _SECRET_ARGUMENT.match(name) is not None


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
    return data


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


def _own_hash_ok(record: AuditRecord) -> bool:
    return chain_hash(record.seq, record.type, record.session_id, record.at, record.data,
                      record.prev_hash) == record.hash


def verify_chain(records: Iterable[AuditRecord], *,
                 expect_head: str | None = None) -> ChainReport:
    """Re-derive the hash chain; report the first record that does not fit, and how.

    *records* must be the whole log in sequence order. A hash chain without a secret can be
    rewritten from the first edit onwards; pass *expect_head* (a head hash kept elsewhere,
    e.g. printed by an earlier ``anfitrion audit verify``) to detect that and a cut tail.
    """
    recs = list(records)
    position = {r.hash: i for i, r in enumerate(recs)}

    def broken(at: int, kind: str, problem: str, read: int) -> ChainReport:
        return ChainReport(False, read, at, problem, kind, recs[read - 1].hash if read else GENESIS)

    prev, expected = GENESIS, 1
    for i, record in enumerate(recs):
        if record.seq > expected:
            gap = f"{expected}" if record.seq == expected + 1 else f"{expected}–{record.seq - 1}"
            return broken(expected, "deleted", f"record {gap} is missing (deleted)", i + 1)
        if record.seq < expected:
            return broken(record.seq, "reordered",
                          f"record {record.seq} appears again after record {expected - 1} "
                          "(reordered or inserted)", i + 1)
        if record.prev_hash != prev:
            j = position.get(record.prev_hash, -2 if record.prev_hash != GENESIS else -1)
            if j > i:
                return broken(record.seq, "reordered", f"record {record.seq} links to record "
                              f"{recs[j].seq}, which comes after it (reordered)", i + 1)
            if -1 <= j < i - 1:
                first = recs[j + 1].seq
                return broken(first, "inserted", f"records {first}–{recs[i - 1].seq} are not "
                              f"in the chain: record {record.seq} links past them (inserted)",
                              i + 1)
            if _own_hash_ok(record) and i > 0:
                return broken(recs[i - 1].seq, "edited", f"record {recs[i - 1].seq} was edited "
                              f"and re-hashed: record {record.seq} no longer links to it", i + 1)
            return broken(record.seq, "edited",
                          f"record {record.seq}: its previous-hash link was edited", i + 1)
        if not _own_hash_ok(record):
            return broken(record.seq, "edited",
                          f"record {record.seq}: its content does not match its hash (edited)",
                          i + 1)
        prev, expected = record.hash, expected + 1
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


class AuditRecorder:
    """A host listener recording one redacted, hash-chained record per event.

    Records are built when their event happens and written in batches — one store transaction
    per turn — and always before a side effect runs, before a person is asked, and when a run
    ends. A crash can lose at most the records of the read-only calls of the turn in progress;
    everything that preceded an action is stored before the action.
    """

    def __init__(self, store: Store, *, sensitive_by_tool: Mapping[str, Iterable[str]]
                 | None = None, skip: Iterable[EventType] = ()) -> None:
        self._store = store
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
        except Exception:
            log.exception("the audit recorder failed on %s", event.type)

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
        except Exception:
            log.exception("the audit recorder could not store its records")

    async def flush(self) -> None:
        """Write the buffered records (one transaction)."""
        batch = self.take()
        if batch:
            await self._store.append_audit_many(batch)

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


# Logs get the audit log's redaction: every ``anfitrion.*`` record, whatever the handler
# (installed here, at the end, because the redaction it uses is defined above).
from ._logging import RedactingFilter  # noqa: E402
from ._logging import install as _install_log_redaction  # noqa: E402

_install_log_redaction()
