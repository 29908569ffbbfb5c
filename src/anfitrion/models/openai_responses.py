"""OpenAI Responses: the wire format, and a model that speaks it through the official SDK.

:func:`to_wire` and :func:`from_wire` are pure (no SDK, no I/O). Tools are sent as
``{type: "function", name, description, parameters, strict}``, schemas through the strict
transformer when the profile says so. Output ``function_call`` items carry ``arguments`` as a
JSON *string*: the adapter passes that text through untouched (the gate parses it strictly, so
bad JSON becomes an error result the model sees) and keeps the item's ``id`` beside ``call_id``
in ``provider_details`` so the item goes back exactly. Results go back as
``function_call_output`` items with ``call_id`` and ``output``: text, or a list of
``input_text`` and ``input_image`` parts when the result carries images.

Example:
    >>> from anfitrion._conversation import Text, UserMessage
    >>> from anfitrion.models import ModelRequest
    >>> to_wire(ModelRequest([UserMessage((Text("Hi"),))]), model="gpt-x")
    {'model': 'gpt-x', 'input': [{'role': 'user', 'content': 'Hi'}]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

from .._conversation import Reply, StopReason, Text, ToolCall, ToolResult, Usage, UserMessage
from .._media import split
from .._tools import ToolDefinition
from ._base import ModelRequest
from ._profiles import OPENAI_RESPONSES, Profile
from ._sdk import WireModel, sdk_client, sdk_error_type
from ._streaming import ResponsesStream
from ._strict import restore_optional, to_strict
from ._wire import Reader, details_of, interleave, ordered_results

__all__ = ["OpenAIResponsesModel", "ResponsesRequest", "from_wire", "to_wire"]

PROVIDER = "openai_responses"
PLACEHOLDER_KEY = "not-needed"  # servers at a base_url often need no key; the SDK wants one


class FunctionTool(TypedDict):
    type: str
    name: str
    description: str
    parameters: dict[str, Any]
    strict: bool


class ResponsesRequest(TypedDict):
    model: str
    instructions: NotRequired[str]
    input: list[dict[str, Any]]
    tools: NotRequired[list[FunctionTool]]
    tool_choice: NotRequired[str | dict[str, str]]
    parallel_tool_calls: NotRequired[bool]
    max_output_tokens: NotRequired[int]
    stream: NotRequired[bool]


def _tool(definition: ToolDefinition, profile: Profile) -> FunctionTool:
    if profile.strict_schemas:
        strict = to_strict(definition.input_schema)
        return {"type": "function", "name": definition.name,
                "description": definition.description, "parameters": strict.schema,
                "strict": strict.strict}
    return {"type": "function", "name": definition.name, "description": definition.description,
            "parameters": dict(definition.input_schema), "strict": False}


def _output(result: ToolResult, profile: Profile) -> str | list[dict[str, Any]]:
    """A result's text, or its text and images as the content list ``function_call_output``
    takes (``input_text``, ``input_image`` with a data URL)."""
    text, media = split(result, profile.media_types)
    if result.is_error and not profile.error_flag:
        return profile.error_prefix + text
    if not media:
        return text
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": text}] if text else []
    parts.extend({"type": "input_image", "image_url": f"data:{m.mime_type};base64,"
                  f"{m.to_base64()}"} for m in media)
    return parts


def _user_items(message: UserMessage, results: Sequence[ToolResult],
                profile: Profile) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"type": "function_call_output", "call_id": r.call_id, "output": _output(r, profile)}
        for r in results]
    texts = [p.text for p in message.parts if isinstance(p, Text)]
    if len(texts) == 1:
        items.append({"role": "user", "content": texts[0]})
    elif texts:
        items.append({"role": "user",
                      "content": [{"type": "input_text", "text": t} for t in texts]})
    return items


def _reply_items(reply: Reply, profile: Profile) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for part in reply.parts:
        if isinstance(part, Text):
            items.append({"role": "assistant", "content": part.text})
            continue
        details = details_of(part, profile.name)
        item: dict[str, Any] = {"type": "function_call"}
        if isinstance(details.get("id"), str):
            item["id"] = details["id"]
        item["call_id"] = part.id
        item["name"] = part.name
        # What the model sent, even when the host removed strict-mode nulls from it.
        original = details.get("arguments")
        item["arguments"] = original if isinstance(original, str) else part.raw_arguments
        if isinstance(details.get("status"), str):
            item["status"] = details["status"]
        items.append(item)
    return interleave(items, details_of(reply, profile.name).get("extra"))


def _tool_choice(choice: str | None) -> str | dict[str, str] | None:
    if choice is None:
        return None
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "name": choice}


def to_wire(request: ModelRequest, *, model: str, profile: Profile = OPENAI_RESPONSES,
            stream: bool = False, max_output_tokens: int | None = None) -> ResponsesRequest:
    """The Responses API request body for *request*.

    Raises:
        AdapterError: a result for an unknown call id, or calls left without results.
    """
    body: ResponsesRequest = {"model": model, "input": []}
    if request.instructions:
        body["instructions"] = request.instructions
    results = ordered_results(request.messages, PROVIDER)
    for m, message in enumerate(request.messages):
        if isinstance(message, UserMessage):
            body["input"].extend(_user_items(message, results[m], profile))
        else:
            body["input"].extend(_reply_items(message, profile))
    if request.tools:
        body["tools"] = [_tool(t, profile) for t in request.tools]
        choice = _tool_choice(request.tool_choice)
        if choice is not None:
            body["tool_choice"] = choice
        if not profile.parallel_calls:
            body["parallel_tool_calls"] = False
    if max_output_tokens is not None:
        body["max_output_tokens"] = max_output_tokens
    if stream:
        body["stream"] = True
    return body


def _strict_schemas(tools: Sequence[ToolDefinition], profile: Profile) -> dict[str, Any]:
    """The schemas of the tools that were sent in strict mode, by name."""
    if not profile.strict_schemas:
        return {}
    return {t.name: t.input_schema for t in tools if to_strict(t.input_schema).strict}


def _function_call(r: Reader, item: Any, path: str, strict: dict[str, Any]) -> ToolCall:
    call_id = r.string(item, "call_id", path, nonempty=True)
    name = r.string(item, "name", path)
    arguments = r.string(item, "arguments", path)
    details: dict[str, Any] = {}
    if (item_id := r.opt_string(item, "id", path)) is not None:
        details["id"] = item_id
    if (status := r.opt_string(item, "status", path)) is not None:
        details["status"] = status
    raw = arguments
    if name in strict and (restored := restore_optional(arguments, strict[name])) is not None:
        details["arguments"] = arguments
        raw = restored
    return ToolCall.from_raw(call_id, name, raw, {PROVIDER: details} if details else None)


def from_wire(body: object, *, tools: Sequence[ToolDefinition] = (),
              profile: Profile = OPENAI_RESPONSES) -> Reply:
    """The canonical reply for a Responses API response body.

    *tools* are the tools offered in the request: for those sent in strict mode, the nulls the
    model had to send for optional properties are removed (the original text is kept in
    ``provider_details``).

    Raises:
        AdapterError: the body is malformed, holds an item the host cannot represent, or the
            response did not complete; ``path`` names the field (``output[1].call_id``).
    """
    r = Reader(PROVIDER)
    d = r.obj(body, "")
    output = r.array(d.get("output"), "output")
    strict = _strict_schemas(tools, profile)
    parts: list[Text | ToolCall] = []
    extra: list[dict[str, Any]] = []
    refused = False
    for i, raw_item in enumerate(output):
        path = f"output[{i}]"
        item = r.obj(raw_item, path)
        kind = r.string(item, "type", path)
        if kind == "message":
            for j, raw_part in enumerate(r.array(item.get("content"), f"{path}.content")):
                ppath = f"{path}.content[{j}]"
                part = r.obj(raw_part, ppath)
                part_kind = r.string(part, "type", ppath)
                if part_kind == "output_text":
                    if part.get("annotations"):
                        raise r.error("annotations cannot be represented",
                                      f"{ppath}.annotations")
                    parts.append(Text(r.string(part, "text", ppath)))
                elif part_kind == "refusal":
                    parts.append(Text(r.string(part, "refusal", ppath)))
                    refused = True
                else:
                    raise r.error(f"unknown content type {part_kind!r}", f"{ppath}.type")
        elif kind == "function_call":
            parts.append(_function_call(r, item, path, strict))
        elif kind == "reasoning":
            extra.append({"before": len(parts), "item": dict(item)})
        else:
            raise r.error(f"unknown output item type {kind!r}", f"{path}.type")
    status = r.opt_string(d, "status", "")
    details: dict[str, Any] = {}
    if status in (None, "completed"):
        if refused:
            stop = StopReason.REFUSAL
        elif any(isinstance(p, ToolCall) for p in parts):
            stop = StopReason.TOOL_USE
        else:
            stop = StopReason.END_TURN
    elif status == "incomplete":
        reason = r.opt_string(r.opt_obj(d, "incomplete_details", "") or {}, "reason",
                              "incomplete_details")
        if reason == "max_output_tokens":
            stop = StopReason.MAX_TOKENS
        elif reason == "content_filter":
            stop = StopReason.CONTENT_FILTER
        else:
            raise r.error(f"incomplete for a reason the host cannot represent: {reason!r}",
                          "incomplete_details.reason")
        details["incomplete_reason"] = reason
    else:
        error = d.get("error")
        text = error.get("message") if isinstance(error, dict) else None
        raise r.error(f"the response is {status!r}" + (f": {text}" if text else ""), "status")
    usage = r.opt_obj(d, "usage", "") or {}
    tokens = Usage(r.opt_int(usage, "input_tokens", "usage"),
                   r.opt_int(usage, "output_tokens", "usage"))
    if (response_id := r.opt_string(d, "id", "")) is not None:
        details["id"] = response_id
    if extra:
        details["extra"] = extra
    return Reply(tuple(parts), stop, tokens, r.opt_string(d, "model", ""),
                 {profile.name: details} if details else None)


class OpenAIResponsesModel(WireModel):
    """An OpenAI model behind the Responses API, through the official ``openai`` SDK.

    Args:
        model: the model id.
        api_key: defaults to ``OPENAI_API_KEY`` (not needed with a *base_url*).
        base_url: another endpoint speaking the Responses API.
        client: an ``openai.AsyncOpenAI`` to use instead of building one.
        max_output_tokens: the reply's token cap (the API's default when ``None``).
        timeout: seconds per request (the SDK's setting).
        max_retries: retries of failed requests (the SDK's setting).

    Raises:
        MissingDependencyError: the ``openai`` extra is not installed.
        UserError: no key and no *base_url*.
    """

    name_prefix = "openai"
    gen_ai_provider = "openai"
    wire_format = PROVIDER

    def __init__(self, model: str, *, api_key: str | None = None, base_url: str | None = None,
                 client: Any = None, max_output_tokens: int | None = None,
                 timeout: float | None = None, max_retries: int | None = None,
                 profile: Profile = OPENAI_RESPONSES) -> None:
        self._error_type = sdk_error_type("openai")
        self._client = client if client is not None else openai_client(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries)
        self._model = model
        self._max_output_tokens = max_output_tokens
        self._profile = profile

    def _body(self, request: ModelRequest, *, stream: bool) -> ResponsesRequest:
        return to_wire(request, model=self._model, profile=self._profile, stream=stream,
                       max_output_tokens=self._max_output_tokens)

    async def _create(self, body: ResponsesRequest) -> Any:
        return await self._client.responses.create(**body)

    def _assembler(self) -> ResponsesStream:
        return ResponsesStream()

    def _read(self, payload: Any, request: ModelRequest) -> Reply:
        return from_wire(payload, tools=request.tools, profile=self._profile)


def openai_client(*, api_key: str | None, base_url: str | None, timeout: float | None,
                  max_retries: int | None) -> Any:
    """An ``openai.AsyncOpenAI``; without a key, a placeholder when *base_url* is set.

    Raises:
        MissingDependencyError: the ``openai`` extra is not installed.
        UserError: no key and no *base_url*.
    """
    return sdk_client("openai", "AsyncOpenAI", api_key=api_key, key_env="OPENAI_API_KEY",
                      provider="OpenAI", base_url=base_url, timeout=timeout,
                      max_retries=max_retries, placeholder_key=PLACEHOLDER_KEY)
