"""What the gateway forwards of an upstream server's words: content blocks, lists, messages.

Sans-I/O: MCP SDK objects in, MCP SDK objects out. Every content type travels as itself —
text, image, audio, embedded resource, resource link, with its ``annotations`` (``audience``,
``priority``) — but shaped the way the gate shapes a result, so that nothing reaches the client
unseen:

- hidden characters (tag characters, zero-width, bidi, controls, private-use) in any string a
  model or a person reads — text, embedded text resources, resource-link names, titles and
  descriptions, ``structuredContent`` keys and values, log data — are made visible
  (``⟨U+E0069⟩``), and the result begins with :data:`~anfitrion.mcp._toolset.HIDDEN_NOTICE`;
- an image or audio block whose ``mimeType`` is not ``image/…`` / ``audio/…``, or whose data is
  not base64, and a binary resource whose blob is not base64, become a text notice: a block
  cannot pass text off as a picture;
- a block's ``_meta`` (free-form, unseen by people) is dropped;
- the text of a result is capped at the server's ``maxResultChars``, and says so.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

import mcp.types as mt

from .._conversation import Provenance
from .._tools import Effect
from ._toolset import _hidden_notice, _reveal_in_value, reveal_hidden

__all__ = ["ANNOTATIONS_META", "Shaper", "as_text", "forward_result", "listed_tool",
           "shape_messages"]

ANNOTATIONS_META = "io.anfitrion/annotations"
"""The ``_meta`` key of a listed tool whose server is not trusted: what the server claimed,
next to the annotations the gateway determined."""

_MIME_PREFIX = {"image": "image/", "audio": "audio/"}


def _is_base64(data: str) -> bool:
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


class Shaper:
    """Shapes the blocks of one message; collects the hidden characters it made visible."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.found: list[str] = []
        self.cut = False
        self._left = limit

    def text(self, value: str) -> str:
        shown, hidden = reveal_hidden(value)
        self.found.extend(hidden)
        if len(shown) > self._left:
            shown, self.cut = shown[:max(self._left, 0)], True
        self._left -= len(shown)
        return shown

    def label(self, value: str | None) -> str | None:
        """A short string (a name, a title): made visible, never cut."""
        if value is None:
            return None
        shown, hidden = reveal_hidden(value)
        self.found.extend(hidden)
        return shown

    def value(self, value: Any) -> Any:
        return _reveal_in_value(value, self.found)

    def block(self, block: Any) -> Any:
        """One content block, as itself when it is what it says it is."""
        if isinstance(block, mt.TextContent):
            return mt.TextContent(type="text", text=self.text(block.text),
                                  annotations=block.annotations)
        if isinstance(block, (mt.ImageContent, mt.AudioContent)):
            kind = block.type
            if not block.mime_type.lower().startswith(_MIME_PREFIX[kind]) \
                    or not _is_base64(block.data):
                return self._notice(f"[anfitrion: {kind} content of type "
                                    f"{self.label(block.mime_type)!r} withheld: it is not "
                                    f"{_MIME_PREFIX[kind]}… base64 data]")
            return block.model_copy(update={"meta": None})
        if isinstance(block, mt.ResourceLink):
            return mt.ResourceLink(
                type="resource_link", uri=self._uri(block.uri), name=self.label(block.name) or "",
                title=self.label(block.title), description=self.label(block.description),
                mime_type=self.label(block.mime_type), size=block.size,
                annotations=block.annotations)
        if isinstance(block, mt.EmbeddedResource):
            resource = self.resource(block.resource)
            if isinstance(resource, mt.TextContent):
                return resource
            return mt.EmbeddedResource(type="resource", resource=resource,
                                       annotations=block.annotations)
        return self._notice(f"[anfitrion: {getattr(block, 'type', 'unknown')} content "
                            "withheld: the gateway does not know this content type]")

    def resource(self, contents: Any) -> Any:
        """Text or blob contents of a resource (an embedded block, a ``resources/read``)."""
        uri = self._uri(contents.uri)
        if isinstance(contents, mt.TextResourceContents):
            return mt.TextResourceContents(uri=uri, mime_type=self.label(contents.mime_type),
                                           text=self.text(contents.text))
        if not _is_base64(contents.blob):
            return self._notice(f"[anfitrion: resource {uri} withheld: its blob is not base64]")
        return mt.BlobResourceContents(uri=uri, mime_type=self.label(contents.mime_type),
                                       blob=contents.blob)

    def _uri(self, uri: Any) -> Any:
        text = str(uri)
        if reveal_hidden(text)[1]:
            self.found.extend(reveal_hidden(text)[1])
            return "urn:anfitrion:withheld-uri-with-hidden-characters"
        return uri

    def _notice(self, text: str) -> mt.TextContent:
        return mt.TextContent(type="text", text=text)

    def blocks(self, blocks: Sequence[Any]) -> list[Any]:
        shaped = [self.block(b) for b in blocks]
        if self.cut:
            shaped.append(self._notice(f"[anfitrion: the text was cut at {self.limit} "
                                       "characters]"))
        return shaped

    def notice(self) -> mt.TextContent | None:
        """The notice a message that held hidden characters begins with."""
        return self._notice(_hidden_notice(self.found)) if self.found else None


def forward_result(result: mt.CallToolResult, limit: int) -> mt.CallToolResult:
    """An upstream tool result as the client gets it (structured content already checked
    against the pinned output schema by the toolset)."""
    shaper = Shaper(limit)
    content = shaper.blocks(result.content)
    structured = None if result.structured_content is None else \
        shaper.value(result.structured_content)
    notice = shaper.notice()
    if notice is not None:
        content.insert(0, notice)
    return mt.CallToolResult(content=content, structured_content=structured,
                             is_error=result.is_error)


def listed_tool(name: str, tool: Any, upstream: mt.Tool | None, *, trusted: bool) -> mt.Tool:
    """A ``tools/list`` entry: the pinned definition's ``title``, ``outputSchema``,
    ``execution`` (:func:`_execution`); the server's annotations when it is trusted, else the
    gateway's own with the server's claims under ``_meta["io.anfitrion/annotations"]``."""
    read = tool.effect is Effect.READ
    own = mt.ToolAnnotations(
        read_only_hint=read, destructive_hint=None if read else True,
        idempotent_hint=tool.idempotent, open_world_hint=tool.provenance is Provenance.UNTRUSTED)
    meta: dict[str, Any] | None = None
    annotations = own
    if upstream is not None and upstream.annotations is not None:
        claimed = upstream.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
        if trusted:
            annotations = upstream.annotations
        else:
            annotations = mt.ToolAnnotations(title=upstream.annotations.title,
                                             **own.model_dump(exclude={"title"}))
            meta = {ANNOTATIONS_META: {
                "trusted": False, "claimed": claimed,
                "note": "the server is not trusted: these hints are its claims; the gateway "
                        "determined the annotations above"}}
    return mt.Tool(
        name=name, title=upstream.title if upstream is not None else None,
        description=tool.description, input_schema=dict(tool.input_schema),
        output_schema=upstream.output_schema if upstream is not None else None,
        annotations=annotations,
        execution=_execution(upstream),
        _meta=meta)


def _execution(upstream: mt.Tool | None) -> mt.ToolExecution | None:
    """The upstream's ``execution``, except that a task-only tool is ``optional`` here: the
    gateway runs the upstream's task itself (polled to its end), so its client may call the
    tool with or without the Tasks extension."""
    execution = upstream.execution if upstream is not None else None
    if execution is not None and execution.task_support == "required":
        return execution.model_copy(update={"task_support": "optional"})
    return execution


def shape_messages(messages: Sequence[mt.PromptMessage], limit: int
                   ) -> tuple[list[mt.PromptMessage], list[str]]:
    """A prompt's messages, each block shaped; and the hidden characters found."""
    shaper = Shaper(limit)
    out = [mt.PromptMessage(role=m.role, content=shaper.block(m.content)) for m in messages]
    if shaper.found:
        notice = shaper.notice()
        assert notice is not None
        out.insert(0, mt.PromptMessage(role="user", content=notice))
    return out, shaper.found


def as_text(blocks: Sequence[Any]) -> str:
    """What taint and the audit log see of forwarded blocks."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, (mt.TextContent, mt.TextResourceContents)):
            parts.append(block.text)
        elif isinstance(block, mt.EmbeddedResource) and \
                isinstance(block.resource, mt.TextResourceContents):
            parts.append(block.resource.text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", by_alias=True,
                                                    exclude={"data", "blob"}),
                                    ensure_ascii=False))
    return "\n".join(parts)
