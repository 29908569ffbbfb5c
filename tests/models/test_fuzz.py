"""Arbitrary JSON given to any parser fails only with the documented adapter error."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion.exceptions import AdapterError, ModelError
from anfitrion.models import anthropic, openai_chat, openai_responses
from anfitrion.models._streaming import AnthropicStream, ChatStream, ResponsesStream

from . import conversations as conv

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=30)


def near(keys: dict[str, Any]) -> Any:
    """Objects with the real field names and arbitrary values: they reach deeper code."""
    return st.fixed_dictionaries({}, optional={k: v | json_values for k, v in keys.items()})


text_block = near({"type": st.sampled_from(["text", "tool_use", "thinking", "x"]),
                   "text": st.text(), "id": st.text(), "name": st.text(),
                   "input": st.dictionaries(st.text(max_size=5), scalars, max_size=3)})
anthropic_bodies = json_values | near({
    "content": st.lists(text_block, max_size=3),
    "stop_reason": st.sampled_from(["end_turn", "tool_use", "max_tokens", "odd"]),
    "usage": near({"input_tokens": st.integers(), "output_tokens": st.integers()}),
    "id": st.text(), "model": st.text()})

item = near({"type": st.sampled_from(["message", "function_call", "reasoning", "x"]),
             "call_id": st.text(), "name": st.sampled_from(["get_weather", "x"]),
             "arguments": st.text(), "id": st.text(),
             "content": st.lists(near({"type": st.sampled_from(["output_text", "refusal"]),
                                       "text": st.text(), "refusal": st.text(),
                                       "annotations": st.just([])}), max_size=2)})
responses_bodies = json_values | near({
    "output": st.lists(item, max_size=3),
    "status": st.sampled_from(["completed", "incomplete", "failed", None]),
    "incomplete_details": near({"reason": st.sampled_from(["max_output_tokens", "x"])}),
    "usage": near({"input_tokens": st.integers(), "output_tokens": st.integers()})})

tool_call = near({"id": st.text(), "type": st.sampled_from(["function", "x"]),
                  "function": near({"name": st.sampled_from(["get_weather", "x"]),
                                    "arguments": st.text()})})
chat_bodies = json_values | near({
    "choices": st.lists(near({
        "index": st.integers(0, 1),
        "message": near({"content": st.text() | st.none(), "refusal": st.none(),
                         "tool_calls": st.lists(tool_call, max_size=2)}),
        "finish_reason": st.sampled_from(["stop", "tool_calls", "length", None, "x"])}),
        max_size=2),
    "usage": near({"prompt_tokens": st.integers(), "completion_tokens": st.integers()})})


def _only_adapter_errors(parse: Any, body: Any) -> None:
    with contextlib.suppress(AdapterError):
        parse(body)


@settings(max_examples=300)
@given(anthropic_bodies)
def test_anthropic_from_wire_raises_only_adapter_errors(body: Any) -> None:
    _only_adapter_errors(anthropic.from_wire, body)


@settings(max_examples=300)
@given(responses_bodies)
def test_responses_from_wire_raises_only_adapter_errors(body: Any) -> None:
    _only_adapter_errors(
        lambda b: openai_responses.from_wire(b, tools=[conv.WEATHER]), body)


@settings(max_examples=300)
@given(chat_bodies)
def test_chat_from_wire_raises_only_adapter_errors(body: Any) -> None:
    _only_adapter_errors(lambda b: openai_chat.from_wire(b, tools=[conv.WEATHER]), body)


event_types = st.sampled_from([
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop", "ping", "response.output_text.delta",
    "response.completed", "x"])
events = json_values | near({
    "type": event_types, "index": st.integers(-1, 2),
    "message": near({"content": st.just([]), "usage": json_values}),
    "content_block": near({"type": st.sampled_from(["text", "tool_use"])}),
    "delta": near({"type": st.sampled_from(["text_delta", "input_json_delta", "x"]),
                   "text": st.text(), "partial_json": st.text(),
                   "content": st.text(), "tool_calls": st.lists(tool_call, max_size=2)}),
    "choices": st.lists(near({"index": st.integers(0, 1), "delta": json_values,
                              "finish_reason": st.sampled_from(["stop", None])}), max_size=2),
    "response": json_values})


@settings(max_examples=300)
@given(st.lists(events, max_size=8))
def test_stream_assemblers_raise_only_adapter_errors(sequence: list[Any]) -> None:
    for make, parse in ((AnthropicStream, anthropic.from_wire),
                        (ResponsesStream, openai_responses.from_wire),
                        (ChatStream, openai_chat.from_wire)):
        stream = make()
        # AdapterError, or ModelError for an error event the provider sent: never a crash.
        with contextlib.suppress(ModelError):
            for event in sequence:
                stream.feed(event)
            parse(stream.result())
