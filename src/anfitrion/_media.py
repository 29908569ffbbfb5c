"""Images and sounds in tool results: which are admitted, and what a model is shown instead.

Media from a tool is untrusted input like any result text — an MCP server, a web page, a file
may have written it — so it goes through one gate, :func:`admit`, before it becomes part of a
:class:`~anfitrion._conversation.ToolResult`:

- its declared type must be one of :attr:`MediaSettings.types` (images png/jpeg/gif/webp by
  default; audio wav/mp3 when the operator allows it);
- its first bytes must match the declared type (:func:`sniff`): a server that says
  ``image/png`` and sends a script, text or another format is summarised, never sent;
- and its whole structure must parse as that type
  (:func:`anfitrion._media_structure.structure_problem`): the end marker last, dimensions
  within a pixel cap, every chunk, segment or frame where its header says;
- at most :attr:`MediaSettings.max_bytes` each and :attr:`MediaSettings.max_per_result` per
  result;
- an error result carries none;
- with ``send = false`` nothing is admitted.

Whatever is not admitted is shown as a summary line — type, size, SHA-256, never the data —
(:func:`describe`), the way every result was shown before media. Admitted media keeps the
result's provenance: an image from an untrusted server taints the session exactly as its text
would. Each provider's profile says which types it accepts (``media_types`` in
:mod:`anfitrion.models._profiles`); the others are sent the same summary.

Example:
    >>> import base64
    >>> gif = base64.b64decode("R0lGODlhAQABAAAAACwAAAAAAQABAAACAkQBADs=")  # 1×1 pixel
    >>> tail = gif + b"<script>x()</script>"  # a polyglot: a GIF, then HTML
    >>> admitted, shown = admit([Media("image/gif", gif), Media("image/gif", tail)],
    ...                         MediaSettings())
    >>> [m.mime_type for m in admitted], shown[0].split(": ", 1)[1]
    (['image/gif'], 'not shown: not a well-formed image/gif (20 bytes after the trailer)]')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._conversation import Media, ToolResult
from ._media_structure import structure_problem
from .exceptions import UserError

__all__ = [
    "AUDIO_TYPES",
    "IMAGE_TYPES",
    "KNOWN_TYPES",
    "SUMMARY",
    "Admission",
    "MediaResult",
    "MediaSettings",
    "admit",
    "describe",
    "normal_type",
    "record",
    "sniff",
    "split",
]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
AUDIO_TYPES = frozenset({"audio/wav", "audio/mpeg"})
KNOWN_TYPES = IMAGE_TYPES | AUDIO_TYPES
"""Every type that can be admitted at all: the ones :func:`sniff` can confirm and a provider
accepts somewhere."""
_ALIASES = {"image/jpg": "image/jpeg", "audio/x-wav": "audio/wav", "audio/wave": "audio/wav",
            "audio/mp3": "audio/mpeg"}

_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"), (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"), (b"GIF89a", 0, "image/gif"), (b"WEBP", 8, "image/webp"),
    (b"WAVE", 8, "audio/wav"), (b"OggS", 0, "audio/ogg"), (b"fLaC", 0, "audio/flac"),
    (b"ID3", 0, "audio/mpeg"), (b"\xff\xfb", 0, "audio/mpeg"), (b"\xff\xf3", 0, "audio/mpeg"),
    (b"\xff\xf2", 0, "audio/mpeg"), (b"%PDF-", 0, "application/pdf"),
    (b"PK\x03\x04", 0, "application/zip"), (b"\x1f\x8b", 0, "application/gzip"),
)
_STRUCTURE: dict[str, tuple[int, bytes]] = {
    "image/png": (12, b"IHDR"), "image/webp": (0, b"RIFF"), "audio/wav": (0, b"RIFF")}
"""What else a file of the type has where: the first PNG chunk is its header, WebP and WAV are
RIFF containers."""


def sniff(data: bytes) -> str | None:
    """The media type *data* starts like, if a known one."""
    for magic, offset, mime in _SIGNATURES:
        if data[offset:offset + len(magic)] == magic:
            at, more = _STRUCTURE.get(mime, (0, b""))
            if data[at:at + len(more)] != more:
                continue
            return mime
    return None


def normal_type(mime: str) -> str:
    """*mime* lower-cased, parameters dropped, common aliases (``image/jpg``) named properly."""
    base = mime.split(";", 1)[0].strip().lower()
    return _ALIASES.get(base, base)


@dataclass(frozen=True, slots=True)
class MediaSettings:
    """What media a result may carry to a model (the ``[media]`` table of a policy file).

    Attributes:
        send: admit media at all; ``False`` summarises every image and sound.
        types: the types admitted (a subset of :data:`KNOWN_TYPES`); audio is off by default
            because most models refuse it.
        max_bytes: the largest item admitted (Anthropic refuses images over 5 MB).
        max_per_result: how many items one result may carry; the rest are summarised.
    """

    send: bool = True
    types: frozenset[str] = IMAGE_TYPES
    max_bytes: int = 4 * 1024 * 1024
    max_per_result: int = 4

    def __post_init__(self) -> None:
        unknown = sorted(set(self.types) - KNOWN_TYPES)
        if unknown:
            raise UserError(f"media types {unknown} cannot be admitted; known: "
                             f"{sorted(KNOWN_TYPES)}")
        if not 0 < self.max_bytes <= 20 * 1024 * 1024:
            raise UserError("max_bytes must be between 1 and 20 MiB")
        if not 0 <= self.max_per_result <= 20:
            raise UserError("max_per_result must be between 0 and 20")


SUMMARY = MediaSettings(send=False)
"""Every item summarised: the behaviour before media parts."""


@dataclass(frozen=True, slots=True)
class MediaResult:
    """What a handler returns to pass media on: its *value* (shaped like any result) and the
    *media* that goes with it, admitted or summarised by the gate."""

    value: Any
    media: tuple[Media, ...] = field(default=())


def describe(media: Media, why: str = "not shown") -> str:
    """``[image image/png, 67 bytes, sha256 1a2b…: not shown]``."""
    return (f"[{media.kind} {media.mime_type}, {media.size} bytes, "
            f"sha256 {media.sha256[:16]}: {why}]")


def _refusal(media: Media, mime: str, settings: MediaSettings, count: int) -> str:
    """Why *media* is not admitted, or ``""`` when it is."""
    if not settings.send:
        return "not shown: the media policy summarises media"
    if mime not in settings.types:
        return "not shown: type not admitted by the media policy"
    if media.size > settings.max_bytes:
        return f"not shown: larger than the media policy's {settings.max_bytes} bytes"
    if sniff(media.data) != mime:
        return "not shown: the data is not what its type says"
    if (problem := structure_problem(mime, media.data)) is not None:
        return f"not shown: not a well-formed {mime} ({problem})"
    if count >= settings.max_per_result:
        return f"not shown: more than {settings.max_per_result} in one result"
    return ""


class Admission:
    """Admits the media of one result one item at a time (so a summary keeps its place)."""

    def __init__(self, settings: MediaSettings, *, is_error: bool = False) -> None:
        self.settings = settings
        self.is_error = is_error
        self.admitted: list[Media] = []

    def take(self, media: Media) -> str | None:
        """``None`` when *media* is admitted (see :attr:`admitted`), else its summary line."""
        mime = normal_type(media.mime_type)
        why = "not shown: an error result carries no media" if self.is_error else \
            _refusal(media, mime, self.settings, len(self.admitted))
        if why:
            return describe(media, why)
        self.admitted.append(media if mime == media.mime_type else Media(mime, media.data))
        return None


def admit(candidates: Iterable[Media], settings: MediaSettings, *,
          is_error: bool = False) -> tuple[tuple[Media, ...], list[str]]:
    """The media of *candidates* admitted under *settings*, and a summary line for each of the
    others, in order."""
    admission = Admission(settings, is_error=is_error)
    shown = [line for m in candidates if (line := admission.take(m)) is not None]
    return tuple(admission.admitted), shown


def split(result: ToolResult, accepts: frozenset[str]) -> tuple[str, tuple[Media, ...]]:
    """What a provider accepting *accepts* is sent of *result*: its text — with a summary line
    for each item it cannot take — and the media it can (checked again against its bytes)."""
    if not result.media:
        return result.content, ()
    sent: list[Media] = []
    lines: list[str] = [result.content] if result.content else []
    for media in result.media:
        if not result.is_error and media.mime_type in accepts \
                and sniff(media.data) == media.mime_type \
                and structure_problem(media.mime_type, media.data) is None:
            sent.append(media)
        else:
            lines.append(describe(media, "not shown: this model is not sent this type"))
    return "\n".join(lines), tuple(sent)


def record(media: Sequence[Media]) -> list[dict[str, Any]]:
    """What the audit log keeps of *media*: type, size and hash, never the bytes."""
    return [{"mime_type": m.mime_type, "bytes": m.size, "sha256": m.sha256} for m in media]
