"""What a reviewer sees of one request, computed from the canonical arguments (no web framework).

Every function here takes the request's canonical arguments (or the session's stored
transcript) and returns plain data: the text with invisible characters made visible, as pieces
that say which parts are the host's markers (:func:`visible_pieces`), the findings a reviewer must
notice (bidi overrides, zero-width characters, non-ASCII domains shown in punycode), the warnings
de-duplicated and split into prose and quoted values (:func:`notices`), what the principal asked
for (:func:`intent_of`), a unified diff for a file write and the message as it will be sent for
an e-mail draft. The HTML layer only escapes and lays it out.
"""

from __future__ import annotations

import difflib
import email.policy
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from .._approvals import make_visible
from .._conversation import JsonValue
from .._json import as_written, json_strings
from ..policy._taint import TAINT_WARNING

__all__ = ["ArgumentView", "Intent", "Notice", "Piece", "SourceQuote", "argument_views",
           "email_preview", "file_diff", "finding_parts", "findings", "intent_of", "notices",
           "plural", "punycode", "source_quotes", "visible_pieces", "with_sources"]

MAX_DIFF_SOURCE_BYTES = 1_000_000

_BIDI = {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
         "\u2069", "\u200e", "\u200f", "\u061c"}
_ZERO_WIDTH = {"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"}
# a host name after "@" or "scheme://", up to a character that cannot be part of one
_DOTS = ".\u3002\uff0e\uff61"
_DOMAIN = re.compile(r"(?:@|://)([^\s/:?#@<>\"'\[\](),;]+)")


def plural(count: int, noun: str) -> str:
    """``1 character``, ``2 characters`` (nouns with a plain ``s`` plural)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of text as shown: plain text, or one marker the host put in for a hidden character.

    Attributes:
        text: what is displayed (for a marker: ``⟨U+202E RLO⟩``, ``⏎`` or ``⇥``).
        hidden: ``None`` for plain text; for a marker, what the character is
            (``RIGHT-TO-LEFT OVERRIDE``, ``line break``).
    """

    text: str
    hidden: str | None = None


_MARKER_NAMES = {"\n": "line break", "\t": "tab", "\x1b": "ESCAPE (starts a terminal sequence)"}
_CATEGORY_NAMES = {"Cc": "control character", "Cn": "unassigned code point",
                   "Co": "private-use character", "Cs": "lone surrogate"}


def visible_pieces(text: str, *, layout_newlines: bool = False) -> list[Piece]:
    """*text* as :func:`~anfitrion._approvals.make_visible` shows it, split into plain runs and
    the host's markers.

    Each character is made visible on its own, so a marker is known to be one from its origin,
    never by re-reading the output: text that merely looks like a marker (a literal
    ``⟨U+202E RLO⟩``) stays plain text. Joining the pieces' text gives exactly
    ``make_visible(text)``. With *layout_newlines* (JSON rendered for display), newlines are
    layout and not marked.

    Example:
        >>> [(p.text, p.hidden) for p in visible_pieces("a\u202eb")]
        [('a', None), ('⟨U+202E RLO⟩', 'RIGHT-TO-LEFT OVERRIDE'), ('b', None)]
    """
    pieces: list[Piece] = []
    plain: list[str] = []
    for ch in text:
        # every character make_visible changes is non-printable (Cc, Cf, Cn, …): a fast path
        if ch.isprintable() or (ch == "\n" and layout_newlines):
            plain.append(ch)
            continue
        shown = make_visible(ch)
        if shown == ch:  # not printable, yet shown as itself (a non-breaking space)
            plain.append(ch)
            continue
        if plain:
            pieces.append(Piece("".join(plain)))
            plain = []
        name = (_MARKER_NAMES.get(ch) or unicodedata.name(ch, "")
                or _CATEGORY_NAMES.get(unicodedata.category(ch), "hidden character"))
        pieces.append(Piece(shown.rstrip("\n"), name))
        if shown.endswith("\n"):  # ⏎ is followed by the line break it stands for
            plain.append("\n")
    if plain:
        pieces.append(Piece("".join(plain)))
    return pieces


Parts = tuple[tuple[str, bool], ...]
"""A sentence as ``(text, quoted)`` pairs: quoted parts are names or values from the call."""


@dataclass(frozen=True, slots=True)
class SourceQuote:
    """The untrusted text a flagged value came from, as its tool returned it: a window of
    the result around the value, for a reviewer to read the sentence that asked for it.

    Attributes:
        tool: the tool whose (untrusted) result holds it.
        turn: the turn the result arrived in, as the warning counts them.
        value: the flagged value, as the warning quotes it.
        before: up to :data:`QUOTE_CONTEXT` characters of the result before the value
            (``…`` first when cut).
        match: the value as the result writes it.
        after: up to :data:`QUOTE_CONTEXT` characters after it (``…`` last when cut).
    """

    tool: str
    turn: int
    value: str
    before: str
    match: str
    after: str


@dataclass(frozen=True, slots=True)
class Notice:
    """One warning as shown: prose written by the host and values quoted from the call.

    Attributes:
        kind: ``taint`` (the session read untrusted content), ``policy`` (the policy's warning)
            or ``finding`` (what the inbox found in the arguments).
        parts: ``(text, quoted)`` pairs; quoted parts are values (shown as code).
        sources: for a warning about values from untrusted results, the text of the result
            around each value (:func:`with_sources`).
    """

    kind: str
    parts: Parts
    sources: tuple[SourceQuote, ...] = ()

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.parts)


def _quoted_parts(text: str) -> Parts:
    """Split ``e-mail `x@y` appeared`` into prose and the backtick-quoted values.

    A value holding a backtick itself would make the pairs ambiguous: then (an odd count) the
    whole warning stays prose, with its backticks shown as they are.
    """
    chunks = text.split("`")
    if len(chunks) < 3 or len(chunks) % 2 == 0:
        return ((text, False),)
    return tuple((chunk, i % 2 == 1) for i, chunk in enumerate(chunks) if chunk)


def notices(policy_warnings: Iterable[str], found: Iterable[str | Parts],
            untrusted_sources: Iterable[object] | None) -> list[Notice]:
    """The warnings for one request, each said once.

    The session's taint comes first and names the tools whose results were untrusted, once:
    the policy's own taint warning (``this session read untrusted content from …``) says the
    same and is folded into it. Then the policy's other warnings, then the inbox's findings;
    a warning that repeats an earlier one is dropped.
    """
    sources = [str(s) for s in untrusted_sources or ()]
    out: list[Notice] = []
    seen: set[str] = set()
    rest: list[tuple[str, Parts]] = []
    for warning in policy_warnings:
        if warning.startswith(TAINT_WARNING):
            if not untrusted_sources:  # the session is gone: the policy's words name them
                sources += [s.strip() for s in warning[len(TAINT_WARNING):].split(",")]
            continue
        rest.append(("policy", _quoted_parts(warning)))
    rest += [("finding", _quoted_parts(f) if isinstance(f, str) else f) for f in found]
    sources = [s for s in dict.fromkeys(sources) if s]
    if sources:
        taint: list[tuple[str, bool]] = [("Untrusted content entered this session from ", False)]
        for i, source in enumerate(sources):
            taint += [(", ", False)] if i else []
            taint.append((source, True))
        out.append(Notice("taint", tuple(taint)))
    for kind, parts in rest:
        text = "".join(t for t, _ in parts)
        if text in seen:
            continue
        seen.add(text)
        out.append(Notice(kind, parts))
    return out


QUOTE_CONTEXT = 120
"""Characters of an untrusted result quoted on each side of a flagged value."""
MAX_QUOTES_PER_NOTICE = 3
_MAX_SEARCHED_CHARS = 1_000_000
# a value the policy quoted, then where it came from: "`x@y` appeared only in a result of
# read_inbox at turn 3", "`x@y` is not proven: it appeared in a result of …", "`…` copied
# from a result of …"; the value holds no backtick, the tool name is a tool name
_SOURCED = re.compile(r"`([^`]{1,200})`[^`]{0,200}? a result of ([A-Za-z0-9_.-]{1,64}) at turn "
                      r"(\d{1,9})\b")
_SEPARATORS = re.compile(r"[\s\-().]")


def _untrusted_results(messages: Sequence[Mapping[str, Any]]
                       ) -> Iterator[tuple[int, str, str]]:
    """``(turn, tool, content)`` of every untrusted tool result of a stored transcript, the
    turn counted as the host counts it (the replies before it)."""
    turn = 0
    for message in messages:
        kind = message.get("kind") if isinstance(message, Mapping) else None
        if kind == "reply":
            turn += 1
            continue
        for part in _parts(message):
            content = part.get("content")
            if part.get("kind") == "tool_result" and part.get("provenance") == "untrusted" \
                    and isinstance(content, str):
                yield turn, str(part.get("name", "")), content


def _locate(value: str, text: str) -> tuple[int, int] | None:
    """Where *value* stands in *text*: as written whatever its case, else with spaces,
    dashes, dots and brackets between its characters (an IBAN in groups of four, a phone
    number with dashes), else its words with any punctuation and spacing between them."""
    text = text[:_MAX_SEARCHED_CHARS]
    value = value.removesuffix("…").strip()  # the policy cuts a long value with "…"
    if not value:
        return None
    tries = [re.escape(value)]
    bare = _SEPARATORS.sub("", value)
    if len(bare) > 1:
        # no separator character is a literal here, so the pattern cannot backtrack far
        tries.append(r"[\s\-().]{0,3}".join(map(re.escape, bare)))
    # a copied run is quoted as words (normalised): any punctuation may stand between them
    tries.append(r"\W+".join(map(re.escape, value.split())))
    for pattern in tries:
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            return match.span()
    return None


def _window(text: str, start: int, end: int) -> tuple[str, str, str]:
    left = max(0, start - QUOTE_CONTEXT)
    right = min(len(text), end + QUOTE_CONTEXT)
    if left > 0:  # start at a word
        space = text.find(" ", left, start)
        left = space + 1 if space != -1 else left
    if right < len(text):
        space = text.rfind(" ", end, right)
        right = space if space != -1 else right
    return (("…" if left > 0 else "") + text[left:start], text[start:end],
            text[end:right] + ("…" if right < len(text) else ""))


def source_quotes(warning: str, messages: Sequence[Mapping[str, Any]]
                  ) -> tuple[SourceQuote, ...]:
    """The untrusted text each value of *warning* came from, found in the transcript
    *messages* (stored dicts): the warning names the value, the tool and the turn
    (``… `x@y` appeared only in a result of read_inbox at turn 3``). Only untrusted results
    are quoted, so whatever a crafted warning names, nothing else is shown as their text;
    a value not found (encoded in the result) is left out. At most
    :data:`MAX_QUOTES_PER_NOTICE`, each a bounded window."""
    out: list[SourceQuote] = []
    for found in _SOURCED.finditer(warning):
        value, tool, turn = found.group(1), found.group(2), int(found.group(3))
        for at, name, content in _untrusted_results(messages):
            if at != turn or name != tool:
                continue
            span = _locate(value, content)
            if span is not None:
                out.append(SourceQuote(tool, turn, value, *_window(content, *span)))
                break
        if len(out) >= MAX_QUOTES_PER_NOTICE:
            break
    return tuple(out)


def with_sources(found: Sequence[Notice], messages: Sequence[Mapping[str, Any]]
                 ) -> list[Notice]:
    """*found* with the policy's warnings about values from untrusted results given the text
    they came from (:func:`source_quotes`)."""
    return [Notice(n.kind, n.parts, source_quotes(
        "".join(f"`{text}`" if quoted else text for text, quoted in n.parts), messages))
        if n.kind == "policy" else n for n in found]


@dataclass(frozen=True, slots=True)
class Intent:
    """What the call is for, from the session's transcript.

    Attributes:
        request: the principal's last request (the text of the last user message with text)
            before the call; ``None`` when the transcript has none.
        model_text: what the model wrote in the reply that proposed the call.
        earlier_calls: the tools the model called since that request, in order, each with
            what came back: ``untrusted``, ``error`` or ``""``.
    """

    request: str | None = None
    model_text: str | None = None
    earlier_calls: tuple[tuple[str, str], ...] = ()
    written_numbers: Mapping[str, str] = field(default_factory=dict)
    """Top-level arguments the model wrote as a number with a fraction, as it wrote them
    (``{"amount": "4999.50"}``), from the call's raw arguments."""


def _parts(message: object) -> list[Mapping[str, Any]]:
    parts = message.get("parts") if isinstance(message, Mapping) else None
    return [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []


def _texts(message: object) -> list[str]:
    return [str(p.get("text", "")) for p in _parts(message) if p.get("kind") == "text"]


def intent_of(messages: Sequence[Mapping[str, Any]], call_id: str) -> Intent:
    """The principal's request and the turn around the call *call_id* (stored messages,
    as :func:`~anfitrion._conversation.message_to_dict` writes them). Never raises on
    malformed data: what cannot be read is left out."""
    kinds = [m.get("kind") if isinstance(m, Mapping) else None for m in messages]
    proposed = next((i for i in range(len(messages) - 1, -1, -1) if kinds[i] == "reply" and any(
        p.get("kind") == "tool_call" and p.get("id") == call_id
        for p in _parts(messages[i]))), len(messages))
    asked = next((i for i in range(proposed - 1, -1, -1)
                  if kinds[i] == "user" and any(t.strip() for t in _texts(messages[i]))), None)
    if asked is None:
        return Intent()
    model_text = "\n\n".join(t for t in _texts(messages[proposed]) if t.strip()) \
        if proposed < len(messages) else ""
    outcome: dict[str, str] = {}
    calls: list[tuple[str, str]] = []
    for message in messages[asked + 1:proposed]:
        for part in _parts(message):
            if part.get("kind") == "tool_call":
                calls.append((str(part.get("id")), str(part.get("name", "?"))))
            elif part.get("kind") == "tool_result":
                outcome[str(part.get("call_id"))] = (
                    "error" if part.get("is_error") else
                    "untrusted" if part.get("provenance") == "untrusted" else "")
    raw = next((p.get("raw_arguments") for p in _parts(messages[proposed])
                if p.get("kind") == "tool_call" and p.get("id") == call_id), None) \
        if proposed < len(messages) else None
    return Intent("\n\n".join(t for t in _texts(messages[asked]) if t.strip()),
                  model_text or None,
                  tuple((name, outcome.get(cid, "")) for cid, name in calls),
                  _written_numbers(raw))


_MAX_RAW_CHARS = 256 * 1024


def _written_numbers(raw: object) -> dict[str, str]:
    """The top-level numbers with a fraction in a call's raw arguments (JSON text), as
    written; nothing when the text is not a JSON object."""
    if not isinstance(raw, str) or len(raw) > _MAX_RAW_CHARS or "." not in raw:
        return {}
    try:
        parsed = json.loads(raw, parse_float=_Written)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {k: str(v) for k, v in parsed.items() if isinstance(k, str) and isinstance(v, _Written)}


class _Written(str):
    """A JSON number's text, kept as written."""


@dataclass(frozen=True, slots=True)
class ArgumentView:
    """One argument as shown: its name and text made visible, and its length in characters.

    *pieces* is *text* split into plain runs and hidden-character markers (:class:`Piece`).
    """

    name: str
    text: str
    length: int
    is_string: bool
    pieces: tuple[Piece, ...] = ()
    name_pieces: tuple[Piece, ...] = ()


def _as_text(value: JsonValue) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(as_written(value), indent=2, ensure_ascii=False, sort_keys=True)


def _number_as_written(value: float, written: str | None) -> str | None:
    """*written* (the model's text of the number) when it is exactly *value* with trailing
    zeros (``4999.50`` for ``4999.5``); a whole number is always shown as an integer."""
    if written is None or value.is_integer():
        return None
    try:
        same = Decimal(written) == Decimal(repr(value))
    except ArithmeticError:
        return None
    return written if same and len(written) <= 64 else None


def argument_views(arguments: Mapping[str, JsonValue],
                   written: Mapping[str, str] | None = None) -> list[ArgumentView]:
    """Each argument, sorted by name, rendered in full with invisible characters shown.

    Numbers are shown as written: a whole number without ``.0`` (:func:`as_written`), and a
    top-level number with a fraction as the model wrote it when *written* (from the call's raw
    arguments, :attr:`Intent.written_numbers`) holds exactly that number (``4999.50``); a
    written text that is not exactly the value (``4999.4999999999999999`` parsed as
    ``4999.5``) is never shown in its place."""
    views = []
    for name in sorted(arguments):
        value = arguments[name]
        literal = _number_as_written(value, (written or {}).get(name)) \
            if isinstance(value, float) else None
        text = literal if literal is not None else _as_text(value)
        # JSON escapes newlines in strings: in a rendered non-string value they are layout
        pieces = tuple(visible_pieces(text, layout_newlines=not isinstance(value, str)))
        views.append(ArgumentView(make_visible(name), "".join(p.text for p in pieces),
                                  len(text), isinstance(value, str), pieces,
                                  tuple(visible_pieces(name))))
    return views


def punycode(domain: str) -> str | None:
    """The ASCII (IDNA) form of a non-ASCII *domain*; None when it is ASCII or not encodable."""
    if domain.isascii():
        return None
    labels = []
    for label in domain.rstrip(".").split("."):
        if label.isascii():
            labels.append(label)
            continue
        try:
            labels.append(label.encode("idna").decode("ascii"))
        except UnicodeError:  # not a valid IDNA label (e.g. holds a bidi control): raw form
            labels.append("xn--" + label.encode("punycode").decode("ascii"))
    return ".".join(labels)


def finding_parts(arguments: Mapping[str, JsonValue]) -> list[Parts]:
    """:func:`findings` with the argument each one is about kept apart (quoted), unescaped:
    the page shows it as code, its own hidden characters marked."""
    found: list[Parts] = []
    for key in sorted(arguments):
        for path, text in json_strings(arguments[key], key, sort_keys=True):
            bidi = sorted({c for c in text if c in _BIDI})
            if bidi:
                names = ", ".join(make_visible(c).strip("⟨⟩") for c in bidi)
                found.append(((path, True), (f" contains a bidi control character ({names}): "
                                             "text may display reordered", False)))
            zero = sorted({c for c in text if c in _ZERO_WIDTH})
            if zero:
                names = ", ".join(make_visible(c).strip("⟨⟩") for c in zero)
                found.append(((path, True), (f" contains an invisible character ({names})",
                                             False)))
            controls = sorted({c for c in text if unicodedata.category(c) == "Cc"
                               and c not in "\n\t"})
            if controls:
                names = ", ".join(f"U+{ord(c):04X}" for c in controls)
                found.append(((path, True), (f" contains a control character ({names})",
                                             False)))
            for match in _DOMAIN.finditer(text):
                # a sentence's full stop is not part of the name; a name with no dot left is a
                # mention (``thanks @José.``), not an address's domain
                domain = match.group(1).rstrip("".join(_DOTS) + "!?…")
                if match.group(0).startswith("@") and not any(d in domain for d in _DOTS):
                    continue
                ascii_form = punycode(domain)
                if ascii_form is not None:
                    found.append(((path, True), (" names a non-ASCII domain ", False),
                                  (domain, False), (f" = {ascii_form}", False)))
    return found


def findings(arguments: Mapping[str, JsonValue]) -> list[str]:
    """What a reviewer must notice in the arguments, one sentence each (hidden characters in
    names and domains made visible).

    Example:
        >>> findings({"to": "bob\u202e@evil.com"})
        ['to contains a bidi control character (U+202E RLO): text may display reordered']
    """
    return ["".join(make_visible(text) for text, _ in parts)
            for parts in finding_parts(arguments)]


def _within(root: Path, relative: str) -> Path | None:
    candidate = (root / relative).resolve()
    try:
        candidate.relative_to(root.resolve())
    except ValueError:
        return None
    return candidate


def file_diff(arguments: Mapping[str, JsonValue], files_root: Path | None) -> str | None:
    """A unified diff of the file write the call proposes, against the current file.

    Applies when the arguments have string ``path`` and ``content`` and a files root is
    configured. Returns None when it does not apply; a sentence when the diff cannot be made.
    """
    path, content = arguments.get("path"), arguments.get("content")
    if files_root is None or not isinstance(path, str) or not isinstance(content, str):
        return None
    target = _within(files_root, path)
    if target is None:
        return f"The path {make_visible(path)!r} is outside the files root: no diff shown."
    if target.is_file():
        if target.stat().st_size > MAX_DIFF_SOURCE_BYTES:
            return f"The current file is over {MAX_DIFF_SOURCE_BYTES} bytes: no diff shown."
        current = target.read_text(encoding="utf-8", errors="replace")
        before = f"a/{path}"
    elif target.exists():
        return "The path exists and is not a regular file: no diff shown."
    else:
        current = ""
        before = "/dev/null (new file)"
    lines = difflib.unified_diff(current.splitlines(keepends=True),
                                 content.splitlines(keepends=True), before, f"b/{path}")
    diff = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)
    return diff or "No change: the content equals the current file."


_EMAIL_HEADERS = ("from", "to", "cc", "bcc", "reply_to", "subject")


def email_preview(arguments: Mapping[str, JsonValue]) -> str | None:
    """The e-mail the call would send, as its recipient's mail program shows it: the headers
    and the body decoded (LF-ended). For a tool that declares it sends e-mail
    (:data:`~anfitrion._approvals.PREVIEW_KINDS`); the caller checks the declaration.

    The message is built as the wire carries it (RFC 5322, a non-ASCII body in base64) and
    read back with a mail parser, so what is shown is what a mail program decodes: an
    encoded word the model wrote into the subject (``=?utf-8?b?…?=``) is shown decoded, as
    the recipient sees it. Applies when the arguments have ``to`` and a ``subject`` or
    ``body``; None otherwise.
    """
    if "to" not in arguments or not ({"subject", "body"} & set(arguments)):
        return None
    message = EmailMessage(policy=email.policy.SMTP)
    try:
        for header in _EMAIL_HEADERS:
            value = arguments.get(header)
            if value is None:
                continue
            text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            message[header.replace("_", "-").title()] = text
        message.set_content(str(arguments.get("body", "")))
        wire = message.as_bytes()
        received = email.message_from_bytes(wire, policy=email.policy.default)
        assert isinstance(received, EmailMessage)
        lines = [f"{name}: {received[name]}" for name in
                 (h.replace("_", "-").title() for h in _EMAIL_HEADERS) if name in received]
        body = received.get_content()
    except (ValueError, TypeError, LookupError) as exc:  # header injection, undecodable text
        return f"This message cannot be sent as it is: {exc}"
    return "\n".join(lines) + "\n\n" + str(body).replace("\r\n", "\n")
