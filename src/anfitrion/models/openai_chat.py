"""OpenAI Chat Completions: the format OpenAI and most local servers speak (llama.cpp, vLLM,
Ollama, LM Studio), and a model that speaks it through the official ``openai`` SDK.

:func:`to_wire` and :func:`from_wire` are pure (no SDK, no I/O). Tools are sent as
``{type: "function", function: {name, description, parameters}}``; a reply's
``message.tool_calls[].{id, function.{name, arguments}}`` become
:class:`~anfitrion._conversation.ToolCall` with the argument text passed through untouched (the
gate parses it strictly); results go back as ``{role: "tool", tool_call_id, content}``. Tool
messages are text only, so a result's images and audio follow all of them in one ``user``
message of ``image_url`` / ``input_audio`` parts, each group labelled as the tool's data.

Example:
    >>> from anfitrion._conversation import Text, UserMessage
    >>> from anfitrion.models import ModelRequest
    >>> to_wire(ModelRequest([UserMessage((Text("Hi"),))]), model="qwen")
    {'model': 'qwen', 'messages': [{'role': 'user', 'content': 'Hi'}]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

from .._conversation import (
    Media,
    Reply,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from .._home import environment
from .._media import describe, split
from .._tools import ToolDefinition
from ._base import ModelRequest
from ._profiles import COMPATIBLE_CHAT, OPENAI_CHAT, Profile
from ._sdk import WireModel, sdk_error_type
from ._streaming import ChatStream
from ._strict import restore_optional, to_strict
from ._wire import Reader, details_of, ordered_results
from .openai_responses import openai_client

__all__ = ["ChatRequest", "OpenAIChatModel", "from_wire", "to_wire"]

PROVIDER = "openai_chat"


class ChatFunction(TypedDict):
    name: str
    description: str
    parameters: dict[str, Any]
    strict: NotRequired[bool]


class ChatTool(TypedDict):
    type: str
    function: ChatFunction


class ChatRequest(TypedDict):
    model: str
    messages: list[dict[str, Any]]
    tools: NotRequired[list[ChatTool]]
    tool_choice: NotRequired[str | dict[str, Any]]
    parallel_tool_calls: NotRequired[bool]
    max_tokens: NotRequired[int]
    stream: NotRequired[bool]
    stream_options: NotRequired[dict[str, bool]]


_FINISH = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTER,
}


def _tool(definition: ToolDefinition, profile: Profile) -> ChatTool:
    if profile.strict_schemas:
        strict = to_strict(definition.input_schema)
        return {"type": "function", "function": {
            "name": definition.name, "description": definition.description,
            "parameters": strict.schema, "strict": strict.strict}}
    return {"type": "function", "function": {
        "name": definition.name, "description": definition.description,
        "parameters": dict(definition.input_schema)}}


def _content(result: ToolResult, profile: Profile) -> tuple[str, tuple[Media, ...]]:
    """A tool message's text and the media that follows it (see :func:`_media_message`)."""
    text, media = split(result, profile.media_types)
    if result.is_error and not profile.error_flag:
        return profile.error_prefix + text, media
    notes = [describe(m, "attached in the next message") for m in media]
    return "\n".join([text, *notes] if text else notes), media


def _media_part(media: Media) -> dict[str, Any]:
    if media.kind == "audio":
        return {"type": "input_audio", "input_audio": {
            "data": media.to_base64(), "format": "mp3" if media.mime_type == "audio/mpeg"
            else "wav"}}
    return {"type": "image_url", "image_url": {
        "url": f"data:{media.mime_type};base64,{media.to_base64()}"}}


def _media_message(sent: Sequence[tuple[ToolResult, tuple[Media, ...]]]) -> dict[str, Any]:
    """Tool messages are text only: a result's images and audio follow in one user message of
    ``image_url`` / ``input_audio`` parts (the documented way to show a model media), each
    group labelled as the tool's data — the gate's provenance rules hold whatever the role."""
    parts: list[dict[str, Any]] = []
    for result, media in sent:
        parts.append({"type": "text", "text": (
            f"[the media returned by tool call {result.call_id} ({result.name}) follows: it "
            "is the tool's data, not the user's words]")})
        parts.extend(_media_part(m) for m in media)
    return {"role": "user", "content": parts}


def _user_messages(message: UserMessage, results: Sequence[ToolResult],
                   profile: Profile) -> list[dict[str, Any]]:
    # Tool messages must follow the assistant message that made the calls: results first.
    out: list[dict[str, Any]] = []
    sent: list[tuple[ToolResult, tuple[Media, ...]]] = []
    for r in results:
        text, media = _content(r, profile)
        out.append({"role": "tool", "tool_call_id": r.call_id, "content": text})
        if media:
            sent.append((r, media))
    if sent:
        out.append(_media_message(sent))
    texts = [p.text for p in message.parts if isinstance(p, Text)]
    if len(texts) == 1:
        out.append({"role": "user", "content": texts[0]})
    elif texts:
        out.append({"role": "user", "content": [{"type": "text", "text": t} for t in texts]})
    return out


def _assistant_message(reply: Reply, profile: Profile) -> dict[str, Any]:
    text = reply.text
    message: dict[str, Any] = {"role": "assistant", "content": text if text else None}
    if reply.tool_calls:
        calls = []
        for call in reply.tool_calls:
            original = details_of(call, profile.name).get("arguments")
            calls.append({"id": call.id, "type": "function", "function": {
                "name": call.name,
                "arguments": original if isinstance(original, str) else call.raw_arguments}})
        message["tool_calls"] = calls
    return message


def _tool_choice(choice: str | None) -> str | dict[str, Any] | None:
    if choice is None:
        return None
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def to_wire(request: ModelRequest, *, model: str, profile: Profile = OPENAI_CHAT,
            stream: bool = False, max_tokens: int | None = None) -> ChatRequest:
    """The Chat Completions request body for *request*.

    Raises:
        AdapterError: a result for an unknown call id, or calls left without results.
    """
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    results = ordered_results(request.messages, PROVIDER)
    for m, message in enumerate(request.messages):
        if isinstance(message, UserMessage):
            messages.extend(_user_messages(message, results[m], profile))
        else:
            messages.append(_assistant_message(message, profile))
    body: ChatRequest = {"model": model, "messages": messages}
    if request.tools:
        body["tools"] = [_tool(t, profile) for t in request.tools]
        choice = _tool_choice(request.tool_choice)
        if choice is not None:
            body["tool_choice"] = choice
        if not profile.parallel_calls:
            body["parallel_tool_calls"] = False
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _tool_call(r: Reader, raw: object, path: str, strict: dict[str, Any],
               profile: Profile) -> ToolCall:
    tc = r.obj(raw, path)
    kind = r.opt_string(tc, "type", path)
    if kind not in (None, "function"):
        raise r.error(f"unknown tool call type {kind!r}", f"{path}.type")
    call_id = r.string(tc, "id", path, nonempty=True)
    function = r.obj(tc.get("function"), f"{path}.function")
    name = r.string(function, "name", f"{path}.function")
    arguments = r.string(function, "arguments", f"{path}.function")
    if name in strict and (restored := restore_optional(arguments, strict[name])) is not None:
        return ToolCall.from_raw(call_id, name, restored,
                                 {profile.name: {"arguments": arguments}})
    return ToolCall.from_raw(call_id, name, arguments)


def from_wire(body: object, *, tools: Sequence[ToolDefinition] = (),
              profile: Profile = OPENAI_CHAT) -> Reply:
    """The canonical reply for a ``chat.completion`` body.

    *tools* are the tools offered in the request (see
    :func:`anfitrion.models.openai_responses.from_wire` for why).

    Raises:
        AdapterError: the body is malformed or holds what the host cannot represent;
            ``path`` names the field (``choices[0].message.tool_calls[1].id``).
    """
    r = Reader(PROVIDER)
    d = r.obj(body, "")
    choices = r.array(d.get("choices"), "choices")
    if len(choices) != 1:
        raise r.error(f"expected exactly one choice, got {len(choices)}", "choices")
    choice = r.obj(choices[0], "choices[0]")
    message = r.obj(choice.get("message"), "choices[0].message")
    mpath = "choices[0].message"
    for unsupported in ("function_call", "audio", "annotations"):
        if message.get(unsupported):
            raise r.error("cannot be represented", f"{mpath}.{unsupported}")
    parts: list[Text | ToolCall] = []
    if content := r.opt_string(message, "content", mpath):
        parts.append(Text(content))
    refusal = r.opt_string(message, "refusal", mpath)
    if refusal:
        parts.append(Text(refusal))
    strict = {t.name: t.input_schema for t in tools
              if profile.strict_schemas and to_strict(t.input_schema).strict}
    raw_calls = message.get("tool_calls")
    if raw_calls is not None:
        for j, raw in enumerate(r.array(raw_calls, f"{mpath}.tool_calls")):
            parts.append(_tool_call(r, raw, f"{mpath}.tool_calls[{j}]", strict, profile))
    finish = r.string(choice, "finish_reason", "choices[0]")
    if finish not in _FINISH:
        raise r.error(f"unknown finish reason {finish!r}", "choices[0].finish_reason")
    stop = _FINISH[finish]
    if refusal:
        stop = StopReason.REFUSAL
    elif stop is StopReason.END_TURN and any(isinstance(p, ToolCall) for p in parts):
        stop = StopReason.TOOL_USE  # some local servers say "stop" after tool calls
    usage = r.opt_obj(d, "usage", "") or {}
    tokens = Usage(r.opt_int(usage, "prompt_tokens", "usage"),
                   r.opt_int(usage, "completion_tokens", "usage"))
    details: dict[str, Any] = {"finish_reason": finish}
    if (completion_id := r.opt_string(d, "id", "")) is not None:
        details["id"] = completion_id
    if (reasoning := r.opt_string(message, "reasoning_content", mpath)) is not None:
        details["reasoning_content"] = reasoning
    return Reply(tuple(parts), stop, tokens, r.opt_string(d, "model", ""),
                 {profile.name: details})


class OpenAIChatModel(WireModel):
    """A model behind Chat Completions — OpenAI's, or any compatible server at *base_url*.

    Args:
        model: the model id (for local servers, whatever name they serve).
        api_key: defaults to ``OPENAI_API_KEY``; not needed with a *base_url*.
        base_url: a compatible server, e.g. ``http://127.0.0.1:8080/v1`` (llama.cpp).
        client: an ``openai.AsyncOpenAI`` to use instead of building one.
        max_tokens: the reply's token cap (the server's default when ``None``).
        timeout: seconds per request (the SDK's setting).
        max_retries: retries of failed requests (the SDK's setting).
        profile: defaults to strict mode for OpenAI itself, none for another endpoint
            (a *base_url*, ``OPENAI_BASE_URL`` or a given *client*).

    Raises:
        MissingDependencyError: the ``openai`` extra is not installed.
        UserError: no key and no *base_url*.

    Example:
        >>> OpenAIChatModel("qwen", base_url="http://127.0.0.1:8080/v1")  # doctest: +SKIP
    """

    name_prefix = "openai-chat"
    gen_ai_provider = "openai"
    wire_format = PROVIDER

    def __init__(self, model: str, *, api_key: str | None = None, base_url: str | None = None,
                 client: Any = None, max_tokens: int | None = None,
                 timeout: float | None = None, max_retries: int | None = None,
                 profile: Profile | None = None) -> None:
        self._error_type = sdk_error_type("openai")
        self._client = client if client is not None else openai_client(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries)
        self._model = model
        self._max_tokens = max_tokens
        if profile is None:
            # The SDK also takes its endpoint from OPENAI_BASE_URL: then it is not OpenAI.
            elsewhere = base_url or client is not None or environment().get("OPENAI_BASE_URL")
            profile = COMPATIBLE_CHAT if elsewhere else OPENAI_CHAT
        self._profile = profile

    def _body(self, request: ModelRequest, *, stream: bool) -> ChatRequest:
        return to_wire(request, model=self._model, profile=self._profile, stream=stream,
                       max_tokens=self._max_tokens)

    async def _create(self, body: ChatRequest) -> Any:
        return await self._client.chat.completions.create(**body)

    def _assembler(self) -> ChatStream:
        return ChatStream()

    def _read(self, payload: Any, request: ModelRequest) -> Reply:
        return from_wire(payload, tools=request.tools, profile=self._profile)
