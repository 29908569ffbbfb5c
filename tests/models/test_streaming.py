"""Assembling whole replies from stream events, as each provider and local server sends them."""

from __future__ import annotations

from typing import Any

import pytest

from anfitrion._conversation import StopReason, Text, ToolCall, Usage
from anfitrion.exceptions import AdapterError, ModelError
from anfitrion.models import anthropic, openai_chat, openai_responses
from anfitrion.models._streaming import AnthropicStream, ChatStream, ResponsesStream

from .fake_providers import anthropic_brain, anthropic_events, chat_chunks, responses_events


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "model": "qwen",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _tc(index: int | None = None, id: str | None = None, name: str | None = None,
        arguments: str | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    tc: dict[str, Any] = {"function": function}
    if index is not None:
        tc["index"] = index
    if id is not None:
        tc["id"] = id
    return tc


def _assemble(chunks: list[dict[str, Any]]) -> tuple[str, tuple[ToolCall, ...]]:
    stream = ChatStream()
    shown = "".join(stream.feed(c) for c in chunks)
    return shown, openai_chat.from_wire(stream.result()).tool_calls


EXPECTED = (ToolCall.from_raw("call_a", "get_weather", '{"location": "Lisboa, PT"}'),
            ToolCall.from_raw("call_b", "get_weather", '{"location": "Porto, PT"}'))


def test_ids_and_names_sent_once_as_openai_does() -> None:
    chunks = [_chunk({"role": "assistant", "content": "Checking"}),
              _chunk({"tool_calls": [_tc(0, "call_a", "get_weather", "")]}),
              _chunk({"tool_calls": [_tc(0, arguments='{"location": ')]}),
              _chunk({"tool_calls": [_tc(0, arguments='"Lisboa, PT"}')]}),
              _chunk({"tool_calls": [_tc(1, "call_b", "get_weather", '{"location": ')]}),
              _chunk({"tool_calls": [_tc(1, arguments='"Porto, PT"}')]}),
              _chunk({}, "tool_calls")]
    assert _assemble(chunks) == ("Checking", EXPECTED)


def test_ids_and_names_repeated_in_every_chunk_are_not_appended_twice() -> None:
    chunks = [_chunk({"tool_calls": [_tc(0, "call_a", "get_weather", '{"location": ')]}),
              _chunk({"tool_calls": [_tc(0, "call_a", "get_weather", '"Lisboa, PT"}')]}),
              _chunk({"tool_calls": [_tc(1, "call_b", "get_weather", '{"location": ')]}),
              _chunk({"tool_calls": [_tc(1, "call_b", "get_weather", '"Porto, PT"}')]}),
              _chunk({}, "tool_calls")]
    assert _assemble(chunks)[1] == EXPECTED


def test_empty_ids_after_the_first_chunk_continue_the_call() -> None:
    chunks = [_chunk({"tool_calls": [_tc(0, "call_a", "get_weather", "")]}),
              _chunk({"tool_calls": [_tc(0, "", None, '{"location": "Lisboa, PT"}')]}),
              _chunk({"tool_calls": [_tc(1, "call_b", "get_weather", "")]}),
              _chunk({"tool_calls": [_tc(1, "", None, '{"location": "Porto, PT"}')]}),
              _chunk({}, "tool_calls")]
    assert _assemble(chunks)[1] == EXPECTED


def test_a_new_id_at_the_same_index_starts_a_new_call() -> None:
    chunks = [_chunk({"tool_calls": [_tc(0, "call_a", "get_weather", '{"location": ')]}),
              _chunk({"tool_calls": [_tc(0, "call_a", None, '"Lisboa, PT"}')]}),
              _chunk({"tool_calls": [_tc(0, "call_b", "get_weather", '{"location": ')]}),
              _chunk({"tool_calls": [_tc(0, "call_b", None, '"Porto, PT"}')]}),
              _chunk({}, "tool_calls")]
    assert _assemble(chunks)[1] == EXPECTED


def test_whole_calls_without_an_index_as_ollama_sends_them() -> None:
    chunks = [_chunk({"tool_calls": [
        _tc(None, "call_a", "get_weather", '{"location": "Lisboa, PT"}'),
        _tc(None, "call_b", "get_weather", '{"location": "Porto, PT"}')]}),
        _chunk({}, "stop")]
    assert _assemble(chunks)[1] == EXPECTED


def test_a_call_that_changes_its_name_midway_is_refused() -> None:
    stream = ChatStream()
    stream.feed(_chunk({"tool_calls": [_tc(0, "call_a", "get_weather", "")]}))
    with pytest.raises(AdapterError, match="changed its name") as caught:
        stream.feed(_chunk({"tool_calls": [_tc(0, "call_a", "delete_file", "{}")]}))
    assert caught.value.path == "chunks[1].choices[0].delta.tool_calls[0].function.name"


def test_a_call_whose_id_never_came_is_refused_whole() -> None:
    stream = ChatStream()
    stream.feed(_chunk({"tool_calls": [_tc(0, None, "get_weather", "{}")]}, "tool_calls"))
    with pytest.raises(AdapterError) as caught:
        openai_chat.from_wire(stream.result())
    assert caught.value.path == "choices[0].message.tool_calls[0].id"


def test_a_chat_stream_without_finish_reason_is_truncated() -> None:
    stream = ChatStream()
    stream.feed(_chunk({"tool_calls": [_tc(0, "call_a", "save_note", '{"path": "dr')]}))
    with pytest.raises(AdapterError, match="ended before a finish_reason"):
        stream.result()


def test_usage_from_the_last_chunk_is_kept() -> None:
    completion = {"id": "c1", "created": 1, "model": "qwen", "choices": [{
        "index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hi"}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}
    stream = ChatStream()
    assert "".join(stream.feed(c) for c in chat_chunks(completion, False)) == "Hi"
    reply = openai_chat.from_wire(stream.result())
    assert (reply.text, reply.usage, reply.model) == ("Hi", Usage(9, 2), "qwen")


def test_anthropic_events_assemble_into_the_same_reply_as_the_whole_message() -> None:
    message = anthropic_brain()("/v1/messages", {"model": "claude-test", "messages": [
        {"role": "user", "content": "Weather in Lisboa?"}]})
    stream = AnthropicStream()
    shown = "".join(stream.feed(e) for _, e in anthropic_events(message))
    assert shown == "Let me check."
    assert anthropic.from_wire(stream.result()) == anthropic.from_wire(message)


def test_anthropic_thinking_and_signature_deltas_are_assembled() -> None:
    stream = AnthropicStream()
    for event in [
        {"type": "message_start", "message": {"id": "m", "content": [], "stop_reason": None,
                                              "usage": {"input_tokens": 3}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "Hmm."}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "signature_delta", "signature": "sig"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]:
        stream.feed(event)
    reply = anthropic.from_wire(stream.result())
    assert reply.parts == (Text("Hi"),)
    assert reply.usage == Usage(3, 5)
    assert reply.stop_reason is StopReason.END_TURN
    assert reply.provider_details == {"anthropic": {"id": "m", "extra": [{"before": 0, "item": {
        "type": "thinking", "thinking": "Hmm.", "signature": "sig"}}]}}


@pytest.mark.parametrize(("events", "match"), [
    ([{"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}],
     "before message_start"),
    ([{"type": "message_start", "message": {"content": []}},
      {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}],
     "never started"),
    ([{"type": "message_start", "message": {"usage": [1]}},
      {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 1}}],
     "expected an object"),
    ([{"type": "message_start", "message": {"content": []}},
      {"type": "content_block_start", "index": 0, "content_block": {
          "type": "tool_use", "id": "t", "name": "n", "input": {}}},
      {"type": "content_block_delta", "index": 0,
       "delta": {"type": "input_json_delta", "partial_json": "{nope"}},
      {"type": "content_block_stop", "index": 0}], "not JSON"),
])
def test_anthropic_streams_out_of_order_or_broken_are_adapter_errors(
        events: list[dict[str, Any]], match: str) -> None:
    stream = AnthropicStream()

    def feed_all() -> None:
        for event in events:
            stream.feed(event)
        stream.result()

    with pytest.raises(AdapterError, match=match):
        feed_all()


def test_an_anthropic_error_event_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="overloaded"):
        AnthropicStream().feed({"type": "error", "error": {"type": "overloaded_error",
                                                           "message": "overloaded"}})


def test_responses_events_give_text_deltas_and_the_completed_body() -> None:
    response = {"id": "resp_1", "status": "completed", "model": "gpt-test", "output": [
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "It is 15 °C.", "annotations": []}]}],
        "usage": {"input_tokens": 4, "output_tokens": 5}}
    stream = ResponsesStream()
    shown = "".join(stream.feed(e) for _, e in responses_events(response))
    assert shown == "It is 15 °C."
    assert openai_responses.from_wire(stream.result()).text == "It is 15 °C."


def test_a_responses_stream_without_completion_is_truncated() -> None:
    stream = ResponsesStream()
    stream.feed({"type": "response.output_text.delta", "delta": "It is"})
    with pytest.raises(AdapterError, match=r"ended before response\.completed"):
        stream.result()


def test_a_failed_response_event_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="rate limited"):
        ResponsesStream().feed({"type": "response.failed", "response": {
            "status": "failed", "error": {"message": "rate limited"}}})
