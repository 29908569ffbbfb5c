"""Streaming: assemble a whole response from a provider's stream events, sans I/O.

Each assembler takes the stream's events one at a time (plain dicts), returns the text delta to
show now, and at the end gives back the body the non-streamed API would have returned, which the
adapter's ``from_wire`` then reads like any other. So a tool call is gated only once complete,
and a stream that ends early is a truncated body: :class:`AdapterError`.

Chat Completions servers differ in how they stream tool calls: OpenAI sends a call's ``id`` and
``name`` once, in its first chunk; some servers (sglang, llama.cpp before mid-2025) repeat them
in every chunk; vLLM sends ``id: ""`` after the first; Ollama sends each call whole, sometimes
without an ``index``. :class:`ChatStream` accepts all of these: a repeated id or name is not
appended again, a *new* id at the same index starts a new call, and a call without an index
continues the last one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from .._conversation import Reply
from ..exceptions import ModelError
from ._base import Model, ModelRequest
from ._wire import Reader

__all__ = ["AnthropicStream", "ChatStream", "ResponsesStream", "StreamingModel"]


class _Events:
    """The numbered events of one stream, each read as an object, its path in errors."""

    _noun = "events"

    def __init__(self, provider: str) -> None:
        self._r = Reader(provider)
        self._n = 0

    def _next(self, event: object) -> tuple[Mapping[str, Any], str]:
        path = f"{self._noun}[{self._n}]"
        self._n += 1
        return self._r.obj(event, path), path

    def _typed(self, event: object) -> tuple[Mapping[str, Any], str, str]:
        """The next event, its path and its ``type``."""
        e, path = self._next(event)
        return e, path, self._r.string(e, "type", path)


class AnthropicStream(_Events):
    """Anthropic Messages events (``message_start``, ``content_block_*``, ``message_delta``,
    ``message_stop``) into a Message body."""

    def __init__(self) -> None:
        super().__init__("anthropic")
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}
        self._done = False

    def feed(self, event: object) -> str:
        r = self._r
        e, path, kind = self._typed(event)
        if kind == "message_start":
            message = dict(r.obj(e.get("message"), f"{path}.message"))
            message["content"] = []
            self._message = message
        elif kind == "content_block_start":
            index = self._index(e, path)
            self._blocks[index] = dict(r.obj(e.get("content_block"), f"{path}.content_block"))
            if self._blocks[index].get("type") == "tool_use":
                self._json[index] = ""
        elif kind == "content_block_delta":
            return self._delta(e, path)
        elif kind == "content_block_stop":
            index = self._index(e, path)
            if index in self._json:
                text = self._json.pop(index)
                try:
                    self._block(index, path)["input"] = json.loads(text) if text else {}
                except ValueError:
                    raise r.error("the streamed tool input is not JSON", path) from None
        elif kind == "message_delta":
            message = self._started(path)
            delta = r.obj(e.get("delta"), f"{path}.delta")
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    message[key] = delta[key]
            usage = r.opt_obj(e, "usage", path)
            if usage is not None:
                before = r.opt_obj(message, "usage", f"{path}.message") or {}
                message["usage"] = {**before,
                                    **{k: v for k, v in usage.items() if v is not None}}
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            error = e.get("error")
            shown = error.get("message") if isinstance(error, Mapping) else error
            raise ModelError(f"anthropic stream error: {shown}", provider="anthropic")
        # ping, and event types added later, carry nothing the body needs.
        return ""

    def _index(self, e: Mapping[str, Any], path: str) -> int:
        index = e.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise self._r.error("expected a non-negative integer", f"{path}.index")
        return index

    def _started(self, path: str) -> dict[str, Any]:
        if self._message is None:
            raise self._r.error("event before message_start", path)
        return self._message

    def _block(self, index: int, path: str) -> dict[str, Any]:
        if index not in self._blocks:
            raise self._r.error(f"delta for block {index}, which never started", path)
        return self._blocks[index]

    def _delta(self, e: Mapping[str, Any], path: str) -> str:
        r = self._r
        index = self._index(e, path)
        block = self._block(index, path)
        delta = r.obj(e.get("delta"), f"{path}.delta")
        kind = r.string(delta, "type", f"{path}.delta")
        if kind == "text_delta":
            text = r.string(delta, "text", f"{path}.delta")
            block["text"] = str(block.get("text", "")) + text
            return text
        if kind == "input_json_delta":
            if index not in self._json:
                raise r.error("input_json_delta for a block that is not tool_use", path)
            self._json[index] += r.string(delta, "partial_json", f"{path}.delta")
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking", "")) + \
                r.string(delta, "thinking", f"{path}.delta")
        elif kind == "signature_delta":
            block["signature"] = r.string(delta, "signature", f"{path}.delta")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))
        else:
            raise r.error(f"unknown delta type {kind!r}", f"{path}.delta.type")
        return ""

    def result(self) -> dict[str, Any]:
        """The Message body. Raises :class:`AdapterError` if the stream ended early."""
        message = self._started("stream")
        if not self._done or self._json:
            raise self._r.error("the stream ended before message_stop", "stream")
        if sorted(self._blocks) != list(range(len(self._blocks))):
            raise self._r.error("content block indexes are not contiguous", "stream")
        message["content"] = [self._blocks[i] for i in range(len(self._blocks))]
        return message


class ResponsesStream(_Events):
    """OpenAI Responses events into the final Response body.

    Text comes from ``response.output_text.delta`` (and ``response.refusal.delta``); the body
    is the one carried by ``response.completed`` or ``response.incomplete``.
    """

    def __init__(self) -> None:
        super().__init__("openai_responses")
        self._final: Mapping[str, Any] | None = None

    def feed(self, event: object) -> str:
        r = self._r
        e, path, kind = self._typed(event)
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return r.string(e, "delta", path)
        if kind in ("response.completed", "response.incomplete"):
            self._final = r.obj(e.get("response"), f"{path}.response")
        elif kind == "response.failed":
            response = r.obj(e.get("response"), f"{path}.response")
            error = response.get("error")
            shown = error.get("message") if isinstance(error, Mapping) else error
            raise ModelError(f"openai response failed: {shown}", provider="openai_responses")
        elif kind == "error":
            raise ModelError(f"openai stream error: {e.get('message')}",
                             provider="openai_responses")
        return ""

    def result(self) -> Mapping[str, Any]:
        if self._final is None:
            raise self._r.error("the stream ended before response.completed", "stream")
        return self._final


class ChatStream(_Events):
    """Chat Completions chunks into a ``chat.completion`` body (see the module docstring)."""

    _noun = "chunks"

    def __init__(self) -> None:
        super().__init__("openai_chat")
        self._head: dict[str, Any] = {}
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._by_index: dict[int, dict[str, Any]] = {}
        self._finish: object = None
        self._usage: object = None

    def feed(self, chunk: object) -> str:
        r = self._r
        c, path = self._next(chunk)
        for key in ("id", "model", "created", "system_fingerprint"):
            if c.get(key) is not None:
                self._head.setdefault(key, c[key])
        if c.get("usage") is not None:
            self._usage = c["usage"]
        shown: list[str] = []
        for i, raw_choice in enumerate(r.array(c.get("choices", []), f"{path}.choices")):
            cpath = f"{path}.choices[{i}]"
            choice = r.obj(raw_choice, cpath)
            if choice.get("index", 0) != 0:
                raise r.error("only one choice is requested", f"{cpath}.index")
            delta = r.opt_obj(choice, "delta", cpath) or {}
            dpath = f"{cpath}.delta"
            if (text := r.opt_string(delta, "content", dpath)) is not None:
                self._text.append(text)
                shown.append(text)
            if (refusal := r.opt_string(delta, "refusal", dpath)) is not None:
                self._refusal.append(refusal)
                shown.append(refusal)
            if (thought := r.opt_string(delta, "reasoning_content", dpath)) is not None:
                self._reasoning.append(thought)
            if delta.get("tool_calls") is not None:
                for j, raw in enumerate(r.array(delta["tool_calls"], f"{dpath}.tool_calls")):
                    self._tool_delta(r.obj(raw, f"{dpath}.tool_calls[{j}]"),
                                     f"{dpath}.tool_calls[{j}]")
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
        return "".join(shown)

    def _tool_delta(self, tc: Mapping[str, Any], path: str) -> None:
        r = self._r
        index = tc.get("index")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            raise r.error("expected an integer", f"{path}.index")
        call_id = r.opt_string(tc, "id", path) or None
        function = r.opt_obj(tc, "function", path) or {}
        name = r.opt_string(function, "name", f"{path}.function") or None
        arguments = r.opt_string(function, "arguments", f"{path}.function")
        if index is not None:
            current = self._by_index.get(index)
        else:
            current = self._calls[-1] if self._calls else None
        if current is None or (call_id and current["id"] and call_id != current["id"]):
            current = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            self._calls.append(current)
            if index is not None:
                self._by_index[index] = current
        if call_id and not current["id"]:
            current["id"] = call_id
        fn = current["function"]
        if name:
            if not fn["name"]:
                fn["name"] = name
            elif fn["name"] != name:
                raise r.error(f"call {current['id']!r} changed its name from "
                              f"{fn['name']!r} to {name!r}", f"{path}.function.name")
        if arguments:
            fn["arguments"] += arguments

    def result(self) -> dict[str, Any]:
        """The ``chat.completion`` body. Raises :class:`AdapterError` if the stream ended
        before a ``finish_reason``."""
        if self._finish is None:
            raise self._r.error("the stream ended before a finish_reason", "stream")
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self._text) if self._text else None}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._calls:
            message["tool_calls"] = self._calls
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        body: dict[str, Any] = {**self._head, "object": "chat.completion",
                                "choices": [{"index": 0, "message": message,
                                             "finish_reason": self._finish}]}
        if self._usage is not None:
            body["usage"] = self._usage
        return body


class StreamingModel:
    """Wraps a model so that every request streams its text to *on_text*.

    The host builds requests without a text callback; wrapping the model is how a caller (the
    CLI) sees the text as it arrives.

    Example:
        >>> from anfitrion.models import ScriptedModel, StreamingModel
        >>> model = StreamingModel(ScriptedModel(["hello"]), print)
    """

    def __init__(self, model: Model, on_text: Callable[[str], None]) -> None:
        self._model = model
        self._on_text = on_text

    @property
    def name(self) -> str:
        return self._model.name

    async def respond(self, request: ModelRequest) -> Reply:
        return await self._model.respond(replace(request, on_text=self._on_text))

