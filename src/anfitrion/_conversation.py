"""The canonical conversation: the neutral data model every adapter translates to and from.

Messages are frozen dataclasses with a ``kind`` discriminator and round-trip through JSON
losslessly (:func:`dump_messages` / :func:`load_messages`). Provider-only data travels in
``provider_details``; adapters never drop what they cannot represent, they raise.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal, TypeAlias

from .exceptions import InputError, StoreError

__all__ = [
    "Media",
    "Message",
    "Provenance",
    "Reply",
    "StopReason",
    "Text",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "Usage",
    "UserMessage",
    "dump_messages",
    "load_messages",
]

JsonValue: TypeAlias = Any
"""A value made of dict, list, str, int, float, bool and None only."""


class StopReason(StrEnum):
    """Why the model stopped producing a reply."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    REFUSAL = "refusal"
    PAUSE_TURN = "pause_turn"
    CONTENT_FILTER = "content_filter"


class Provenance(StrEnum):
    """Who could have written a tool result's content."""

    TRUSTED = "trusted"
    """The host's own state or a source the operator controls."""
    UNTRUSTED = "untrusted"
    """Anything a third party can write: web pages, e-mail, shared files, MCP servers."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens consumed by one model request."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens)


@dataclass(frozen=True, slots=True)
class Text:
    """A block of text, from the user or the model."""

    text: str
    kind: ClassVar[Literal["text"]] = "text"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model proposed. Nothing has been checked yet.

    Attributes:
        id: the call id the provider assigned; results are paired to it.
        name: the tool name exactly as the model sent it.
        raw_arguments: the argument text exactly as the model sent it (the single source of
            truth: the gate parses this, strictly).
        arguments: the same, parsed leniently for display; ``None`` when it does not parse.
        provider_details: provider-only data (e.g. OpenAI's item ``id``) kept for round trips.
    """

    id: str
    name: str
    raw_arguments: str
    arguments: JsonValue = None
    provider_details: Mapping[str, JsonValue] | None = None
    kind: ClassVar[Literal["tool_call"]] = "tool_call"

    @classmethod
    def from_raw(cls, id: str, name: str, raw_arguments: str,
                 provider_details: Mapping[str, JsonValue] | None = None) -> ToolCall:
        """A call whose arguments arrived as JSON text (OpenAI formats)."""
        try:
            parsed = json.loads(raw_arguments)
        except (ValueError, RecursionError):
            parsed = None
        return cls(id, name, raw_arguments, parsed, provider_details)

    @classmethod
    def from_object(cls, id: str, name: str, arguments: JsonValue,
                    provider_details: Mapping[str, JsonValue] | None = None) -> ToolCall:
        """A call whose arguments arrived as a JSON object (Anthropic format, scripts)."""
        try:
            raw = json.dumps(arguments, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InputError(f"tool call arguments are not JSON: {exc}") from None
        return cls(id, name, raw, arguments, provider_details)


@dataclass(frozen=True, slots=True)
class Media:
    """An image or a sound a tool returned, as bytes: what a provider that accepts it is sent.

    A value, not a verdict: whoever built it (a tool, an MCP server) may have lied about
    :attr:`mime_type`. The gate admits media into a result only after
    :func:`anfitrion._media.admit` checked type, size, count and magic bytes; the adapters check
    the magic bytes again before anything goes on the wire.

    Attributes:
        mime_type: the declared type (``image/png``, ``audio/wav``, ...).
        data: the bytes.
        size: ``len(data)``.
        sha256: the hex SHA-256 of ``data``: what the audit log records instead of the bytes.
    """

    mime_type: str
    data: bytes
    size: int = field(init=False)
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.mime_type, str) or not isinstance(self.data, bytes):
            raise TypeError("Media takes a mime type (str) and data (bytes)")
        object.__setattr__(self, "size", len(self.data))
        object.__setattr__(self, "sha256", hashlib.sha256(self.data).hexdigest())

    def __repr__(self) -> str:  # never thousands of bytes in a log line or a test failure
        return f"Media({self.mime_type!r}, {self.size} bytes, sha256 {self.sha256[:16]})"

    @property
    def kind(self) -> str:
        """``image``, ``audio``, or ``media`` for anything else."""
        major = self.mime_type.split("/", 1)[0]
        return major if major in ("image", "audio") else "media"

    def to_base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The host's answer to one tool call, paired to its id. Always data, never instructions.

    Attributes:
        call_id: the id of the call this answers.
        name: the tool name the call used.
        content: the result as text (JSON for structured results), already capped.
        is_error: the call did not succeed; ``content`` says why.
        error_kind: a stable code for errors (``unknown_tool``, ``invalid_arguments``,
            ``denied``, ``tool_error``, ``timeout``, ``outcome_unknown``, ...).
        truncated: the content was cut to the size cap.
        provenance: who could have written the content (and the media).
        media: images and sounds that go with the content, admitted by the gate; a provider
            that cannot take one is sent its summary (:func:`anfitrion._media.describe`).
    """

    call_id: str
    name: str
    content: str
    is_error: bool = False
    error_kind: str | None = None
    truncated: bool = False
    provenance: Provenance = Provenance.TRUSTED
    media: tuple[Media, ...] = ()
    kind: ClassVar[Literal["tool_result"]] = "tool_result"


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A user turn: the person's text, or the host's tool results (or both)."""

    parts: tuple[Text | ToolResult, ...]
    kind: ClassVar[Literal["user"]] = "user"

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, Text))


@dataclass(frozen=True, slots=True)
class Reply:
    """One model reply: text and tool calls in the order the model produced them."""

    parts: tuple[Text | ToolCall, ...]
    stop_reason: StopReason = StopReason.END_TURN
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    provider_details: Mapping[str, JsonValue] | None = None
    _tool_calls: tuple[ToolCall, ...] = field(init=False, repr=False, compare=False)
    kind: ClassVar[Literal["reply"]] = "reply"

    def __post_init__(self) -> None:
        # the host, the gate, the session and the audit log each ask for the calls: found once
        object.__setattr__(self, "_tool_calls",
                           tuple(p for p in self.parts if isinstance(p, ToolCall)))

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, Text))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self._tool_calls


Message: TypeAlias = UserMessage | Reply


# -- JSON round trip ---------------------------------------------------------------------------

def _part_to_dict(part: Text | ToolCall | ToolResult) -> dict[str, JsonValue]:
    if isinstance(part, Text):
        return {"kind": "text", "text": part.text}
    if isinstance(part, ToolCall):
        d: dict[str, JsonValue] = {"kind": "tool_call", "id": part.id, "name": part.name,
                                   "raw_arguments": part.raw_arguments,
                                   "arguments": part.arguments}
        if part.provider_details is not None:
            d["provider_details"] = dict(part.provider_details)
        return d
    d = {"kind": "tool_result", "call_id": part.call_id, "name": part.name,
         "content": part.content, "is_error": part.is_error, "error_kind": part.error_kind,
         "truncated": part.truncated, "provenance": str(part.provenance)}
    if part.media:  # absent when there is none: results stored before media read the same
        d["media"] = [{"mime_type": m.mime_type, "data": m.to_base64(), "sha256": m.sha256}
                      for m in part.media]
    return d


def _media_from_dict(d: Mapping[str, Any]) -> Media:
    try:
        data = base64.b64decode(d["data"], validate=True)
    except (binascii.Error, TypeError) as exc:
        raise InputError(f"stored media is not base64: {exc}") from None
    media = Media(str(d["mime_type"]), data)
    if media.sha256 != d.get("sha256"):
        raise InputError("stored media does not match its sha256")
    return media


def message_to_dict(message: Message) -> dict[str, JsonValue]:
    """One message as plain JSON data."""
    parts = [_part_to_dict(p) for p in message.parts]
    if isinstance(message, UserMessage):
        return {"kind": "user", "parts": parts}
    d: dict[str, JsonValue] = {
        "kind": "reply", "parts": parts, "stop_reason": str(message.stop_reason),
        "usage": {"input_tokens": message.usage.input_tokens,
                  "output_tokens": message.usage.output_tokens},
        "model": message.model,
    }
    if message.provider_details is not None:
        d["provider_details"] = dict(message.provider_details)
    return d


def _part_from_dict(d: Mapping[str, Any]) -> Text | ToolCall | ToolResult:
    kind = d["kind"]
    if kind == "text":
        return Text(str(d["text"]))
    if kind == "tool_call":
        return ToolCall(d["id"], d["name"], d["raw_arguments"], d.get("arguments"),
                        d.get("provider_details"))
    if kind == "tool_result":
        return ToolResult(d["call_id"], d["name"], d["content"], bool(d["is_error"]),
                          d.get("error_kind"), bool(d.get("truncated", False)),
                          Provenance(d.get("provenance", "trusted")),
                          tuple(_media_from_dict(m) for m in d.get("media", ())))
    raise InputError(f"unknown part kind {kind!r}")


def message_from_dict(d: Mapping[str, Any]) -> Message:
    """Inverse of :func:`message_to_dict`; raises :class:`StoreError` on malformed data."""
    try:
        parts = tuple(_part_from_dict(p) for p in d["parts"])
        if d["kind"] == "user":
            if any(isinstance(p, ToolCall) for p in parts):
                raise InputError("a user message cannot hold a tool call")
            return UserMessage(parts)  # type: ignore[arg-type]
        if d["kind"] == "reply":
            if any(isinstance(p, ToolResult) for p in parts):
                raise InputError("a reply cannot hold a tool result")
            usage = d.get("usage") or {}
            return Reply(parts, StopReason(d["stop_reason"]),  # type: ignore[arg-type]
                         Usage(int(usage.get("input_tokens", 0)),
                               int(usage.get("output_tokens", 0))),
                         d.get("model"), d.get("provider_details"))
        raise InputError(f"unknown message kind {d['kind']!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"malformed stored message: {exc!r}") from exc


def dump_messages(messages: Iterable[Message]) -> list[dict[str, JsonValue]]:
    """Messages as plain JSON data (lossless)."""
    return [message_to_dict(m) for m in messages]


def load_messages(data: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Inverse of :func:`dump_messages`."""
    return [message_from_dict(d) for d in data]


class Transcript(Sequence[Message]):
    """An append-only list of messages (appending is O(1); nothing is re-serialised)."""

    __slots__ = ("_messages",)

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._messages: list[Message] = list(messages)

    def append(self, message: Message) -> None:
        self._messages.append(message)

    def __getitem__(self, index: int) -> Message:  # type: ignore[override]
        return self._messages[index]

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Transcript):
            return self._messages == other._messages
        return NotImplemented

    def __repr__(self) -> str:
        return f"Transcript({self._messages!r})"

    @property
    def tool_results(self) -> list[ToolResult]:
        return [p for m in self._messages if isinstance(m, UserMessage) for p in m.parts
                if isinstance(p, ToolResult)]

    def to_json(self) -> str:
        return json.dumps(dump_messages(self._messages), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Transcript:
        return cls(load_messages(json.loads(text)))
