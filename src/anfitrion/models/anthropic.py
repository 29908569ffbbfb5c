"""Anthropic Messages: the wire format, and a model that speaks it through the official SDK.

:func:`to_wire` and :func:`from_wire` are pure (no SDK, no I/O). Tools are sent as
``{name, description, input_schema}``; a reply's ``tool_use`` blocks become
:class:`~anfitrion._conversation.ToolCall`; tool results go back as ``tool_result`` blocks — all
results of a turn in one ``user`` message, in call order, ``is_error`` set on failures, a
result's images as ``image`` blocks inside its ``tool_result``.

Example:
    >>> from anfitrion._conversation import Text, UserMessage
    >>> from anfitrion.models import ModelRequest
    >>> to_wire(ModelRequest([UserMessage((Text("Hi"),))]), model="claude-x")
    {'model': 'claude-x', 'max_tokens': 1024, 'messages': [{'role': 'user', 'content': 'Hi'}]}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, NotRequired, TypedDict

from .._conversation import Reply, StopReason, Text, ToolCall, ToolResult, Usage, UserMessage
from .._media import split
from ..exceptions import AdapterError
from ._base import ModelRequest
from ._profiles import ANTHROPIC, Profile
from ._sdk import WireModel, sdk_client, sdk_error_type
from ._streaming import AnthropicStream
from ._wire import Reader, details_of, interleave, ordered_results

__all__ = ["AnthropicModel", "AnthropicRequest", "from_wire", "to_wire"]

PROVIDER = "anthropic"


class AnthropicTool(TypedDict):
    name: str
    description: str
    input_schema: dict[str, Any]


class AnthropicMessage(TypedDict):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class AnthropicRequest(TypedDict):
    model: str
    max_tokens: int
    system: NotRequired[str]
    tools: NotRequired[list[AnthropicTool]]
    tool_choice: NotRequired[dict[str, Any]]
    messages: list[AnthropicMessage]
    stream: NotRequired[bool]


_STOP = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.PAUSE_TURN,
    # The context window filled up: for the host, the reply was cut short like max_tokens.
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
}
# Blocks the host does not interpret but must send back unchanged (signed reasoning).
_PASSTHROUGH = frozenset({"thinking", "redacted_thinking"})


def _tool_choice(choice: str | None) -> dict[str, Any] | None:
    if choice in (None, "auto"):
        return None
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    return {"type": "tool", "name": choice}


def _input_of(call: ToolCall, path: str) -> dict[str, Any]:
    if isinstance(call.arguments, dict):
        return call.arguments
    try:
        parsed = json.loads(call.raw_arguments)
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        raise AdapterError("the call's arguments are not a JSON object; Anthropic's tool_use "
                           "input cannot carry them", path=path, provider=PROVIDER)
    return parsed


def _result_content(result: ToolResult, profile: Profile) -> str | list[dict[str, Any]]:
    """A result's text, or its text and images as blocks (``image`` blocks with base64
    ``source``, which ``tool_result`` content takes)."""
    text, media = split(result, profile.media_types)
    if not media:
        return text
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.extend({"type": "image", "source": {"type": "base64", "media_type": m.mime_type,
                                               "data": m.to_base64()}} for m in media)
    return blocks


def _user_content(message: UserMessage, results: Sequence[ToolResult], m: int,
                  profile: Profile) -> str | list[dict[str, Any]]:
    texts = [p for p in message.parts if isinstance(p, Text)]
    if not results and len(texts) == 1:
        return texts[0].text
    blocks: list[dict[str, Any]] = []
    for r in results:  # results first: the format requires tool_result blocks to lead
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.call_id,
                                 "content": _result_content(r, profile)}
        if r.is_error:
            block["is_error"] = True
        blocks.append(block)
    blocks.extend({"type": "text", "text": t.text} for t in texts if t.text)
    if not blocks:
        raise AdapterError("a user message with no content", path=f"messages[{m}]",
                           provider=PROVIDER)
    return blocks


def _assistant_content(reply: Reply, m: int, profile: Profile) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for p, part in enumerate(reply.parts):
        if isinstance(part, Text):
            blocks.append({"type": "text", "text": part.text})
        else:
            if not profile.id_pattern.fullmatch(part.id):
                raise AdapterError(f"call id {part.id!r} does not match the ids this format "
                                   "accepts", path=f"messages[{m}].parts[{p}].id",
                                   provider=PROVIDER)
            blocks.append({"type": "tool_use", "id": part.id, "name": part.name,
                           "input": _input_of(part, f"messages[{m}].parts[{p}].arguments")})
    blocks = interleave(blocks, details_of(reply, profile.name).get("extra"))
    # Empty text blocks are refused by the API and carry nothing.
    return [b for b in blocks if not (b.get("type") == "text" and not b.get("text"))]


def to_wire(request: ModelRequest, *, model: str, max_tokens: int = 1024,
            profile: Profile = ANTHROPIC, stream: bool = False) -> AnthropicRequest:
    """The Messages API request body for *request*.

    Raises:
        AdapterError: the conversation cannot be sent (a result for an unknown call id, a
            call without results, arguments that are not an object, an id the format refuses).
    """
    body: AnthropicRequest = {"model": model, "max_tokens": max_tokens, "messages": []}
    if request.instructions:
        body["system"] = request.instructions
    if request.tools:
        body["tools"] = [{"name": t.name, "description": t.description,
                          "input_schema": dict(t.input_schema)} for t in request.tools]
        choice = _tool_choice(request.tool_choice)
        if not profile.parallel_calls and (choice is None or choice["type"] != "none"):
            choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
        if choice is not None:
            body["tool_choice"] = choice
    results = ordered_results(request.messages, PROVIDER)
    for m, message in enumerate(request.messages):
        if isinstance(message, UserMessage):
            body["messages"].append(
                {"role": "user", "content": _user_content(message, results[m], m, profile)})
        else:
            body["messages"].append(
                {"role": "assistant", "content": _assistant_content(message, m, profile)})
    if stream:
        body["stream"] = True
    return body


def from_wire(body: object, *, profile: Profile = ANTHROPIC) -> Reply:
    """The canonical reply for a Messages API response body.

    Raises:
        AdapterError: the body is malformed or holds a block the host cannot represent; the
            error's ``path`` names the field (``content[1].id``).
    """
    r = Reader(PROVIDER)
    d = r.obj(body, "")
    content = r.array(d.get("content"), "content")
    parts: list[Text | ToolCall] = []
    extra: list[dict[str, Any]] = []
    for i, raw_block in enumerate(content):
        path = f"content[{i}]"
        block = r.obj(raw_block, path)
        kind = r.string(block, "type", path)
        if kind == "text":
            if block.get("citations"):
                raise r.error("citations cannot be represented", f"{path}.citations")
            parts.append(Text(r.string(block, "text", path)))
        elif kind == "tool_use":
            call_id = r.string(block, "id", path, nonempty=True)
            name = r.string(block, "name", path)
            if "input" not in block:
                raise r.error("missing", f"{path}.input")
            arguments = r.obj(block["input"], f"{path}.input")
            parts.append(ToolCall.from_object(call_id, name, dict(arguments)))
        elif kind in _PASSTHROUGH:
            extra.append({"before": len(parts), "item": dict(block)})
        else:
            raise r.error(f"unknown content block type {kind!r}", f"{path}.type")
    stop_text = r.string(d, "stop_reason", "")
    if stop_text not in _STOP:
        raise r.error(f"unknown stop reason {stop_text!r}", "stop_reason")
    usage = r.opt_obj(d, "usage", "") or {}
    tokens = Usage(
        r.opt_int(usage, "input_tokens", "usage")
        + r.opt_int(usage, "cache_creation_input_tokens", "usage")
        + r.opt_int(usage, "cache_read_input_tokens", "usage"),
        r.opt_int(usage, "output_tokens", "usage"))
    details: dict[str, Any] = {}
    if (message_id := r.opt_string(d, "id", "")) is not None:
        details["id"] = message_id
    if _STOP[stop_text].value != stop_text:
        details["stop_reason"] = stop_text
    if (sequence := r.opt_string(d, "stop_sequence", "")) is not None:
        details["stop_sequence"] = sequence
    if extra:
        details["extra"] = extra
    return Reply(tuple(parts), _STOP[stop_text], tokens, r.opt_string(d, "model", ""),
                 {profile.name: details} if details else None)


class AnthropicModel(WireModel):
    """A Claude model behind the Messages API, through the official ``anthropic`` SDK.

    Args:
        model: the model id, e.g. ``"claude-sonnet-4-5"``.
        api_key: defaults to ``ANTHROPIC_API_KEY``.
        base_url: another endpoint speaking the Messages API.
        client: an ``anthropic.AsyncAnthropic`` to use instead of building one.
        max_tokens: the reply's token cap.
        timeout: seconds per request (the SDK's setting).
        max_retries: retries of failed requests (the SDK's setting).

    Raises:
        MissingDependencyError: the ``anthropic`` extra is not installed.
        UserError: no key in ``api_key`` or ``ANTHROPIC_API_KEY``.

    Example:
        >>> model = AnthropicModel("claude-sonnet-4-5", api_key="sk-ant-...")  # doctest: +SKIP
        >>> Host(model=model, tools=tools).run_sync("Weather in Lisboa?")  # doctest: +SKIP
    """

    name_prefix = "anthropic"
    gen_ai_provider = "anthropic"
    wire_format = PROVIDER

    def __init__(self, model: str, *, api_key: str | None = None, base_url: str | None = None,
                 client: Any = None, max_tokens: int = 1024, timeout: float | None = None,
                 max_retries: int | None = None, profile: Profile = ANTHROPIC) -> None:
        self._error_type = sdk_error_type("anthropic")
        self._client = client if client is not None else sdk_client(
            "anthropic", "AsyncAnthropic", api_key=api_key, key_env="ANTHROPIC_API_KEY",
            provider="Anthropic", base_url=base_url, timeout=timeout, max_retries=max_retries)
        self._model = model
        self._max_tokens = max_tokens
        self._profile = profile

    def _body(self, request: ModelRequest, *, stream: bool) -> AnthropicRequest:
        return to_wire(request, model=self._model, max_tokens=self._max_tokens,
                       profile=self._profile, stream=stream)

    async def _create(self, body: AnthropicRequest) -> Any:
        return await self._client.messages.create(**body)

    def _assembler(self) -> AnthropicStream:
        return AnthropicStream()

    def _read(self, payload: Any, request: ModelRequest) -> Reply:
        return from_wire(payload, profile=self._profile)
