"""The canonical conversation round-trips through JSON losslessly."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion import (
    Provenance,
    Reply,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
    Transcript,
    Usage,
    UserMessage,
)
from anfitrion._conversation import dump_messages, load_messages
from anfitrion.exceptions import StoreError


def sample() -> Transcript:
    return Transcript([
        UserMessage((Text("Weather in Lisboa?"),)),
        Reply((Text("Checking."),
               ToolCall.from_raw("call_1", "get_weather", '{"location":"Lisboa, PT"}',
                                 provider_details={"id": "fc_1"}),
               ToolCall.from_raw("call_2", "get_weather", "{broken")),
              StopReason.TOOL_USE, Usage(10, 5), "m", {"response_id": "r1"}),
        UserMessage((ToolResult("call_1", "get_weather", "15 °C"),
                     ToolResult("call_2", "get_weather", "bad", True, "invalid_arguments",
                                True, Provenance.UNTRUSTED))),
        Reply((Text("done"),)),
    ])


def test_transcript_round_trips_through_json() -> None:
    transcript = sample()
    text = transcript.to_json()
    assert Transcript.from_json(text) == transcript
    assert json.loads(text)[1]["parts"][1]["provider_details"] == {"id": "fc_1"}


def test_tool_call_keeps_raw_text_and_parsed_arguments() -> None:
    good = ToolCall.from_raw("c", "t", '{"a": 1}')
    bad = ToolCall.from_raw("c", "t", "{nope")
    obj = ToolCall.from_object("c", "t", {"a": "ç"})
    assert good.arguments == {"a": 1}
    assert bad.arguments is None and bad.raw_arguments == "{nope"
    assert obj.raw_arguments == '{"a": "ç"}'
    with pytest.raises(ValueError, match="not JSON"):
        ToolCall.from_object("c", "t", {"a": object()})


def test_reply_exposes_text_and_calls() -> None:
    reply = sample()[1]
    assert isinstance(reply, Reply)
    assert reply.text == "Checking."
    assert [c.id for c in reply.tool_calls] == ["call_1", "call_2"]
    assert sample().tool_results[1].error_kind == "invalid_arguments"


@pytest.mark.parametrize(
    "data",
    [
        [{"kind": "nope", "parts": []}],
        [{"kind": "user", "parts": [{"kind": "tool_call", "id": "a", "name": "b",
                                     "raw_arguments": "{}"}]}],
        [{"kind": "reply", "parts": [{"kind": "tool_result", "call_id": "a", "name": "b",
                                      "content": "", "is_error": False}],
          "stop_reason": "end_turn"}],
        [{"kind": "reply", "parts": [], "stop_reason": "bogus"}],
        [{"parts": []}],
    ],
)
def test_malformed_stored_messages_raise_store_error(data: list[dict[str, object]]) -> None:
    with pytest.raises(StoreError):
        load_messages(data)


@given(st.lists(st.text(), min_size=1, max_size=5), st.text(), st.booleans())
def test_arbitrary_text_round_trips(texts: list[str], content: str, is_error: bool) -> None:
    messages = [UserMessage(tuple(Text(t) for t in texts)),
                UserMessage((ToolResult("id", "name", content, is_error),))]
    assert load_messages(json.loads(json.dumps(dump_messages(messages)))) == messages


def test_a_result_with_media_round_trips_and_one_without_keeps_the_old_shape() -> None:
    from anfitrion._conversation import Media, ToolResult, UserMessage, dump_messages, load_messages

    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(17)
    with_media = UserMessage((ToolResult("c", "t", "x", media=(Media("image/png", png),)),))
    assert load_messages(dump_messages([with_media])) == [with_media]
    plain = dump_messages([UserMessage((ToolResult("c", "t", "x"),))])[0]["parts"][0]
    assert "media" not in plain
    assert repr(Media("image/png", png)).startswith("Media('image/png', 33 bytes, sha256 ")


def test_stored_media_that_is_not_base64_is_a_store_error() -> None:
    import pytest

    from anfitrion._conversation import load_messages
    from anfitrion.exceptions import StoreError

    part = {"kind": "tool_result", "call_id": "c", "name": "t", "content": "", "is_error": False,
            "media": [{"mime_type": "image/png", "data": "not base64!", "sha256": "0"}]}
    with pytest.raises(StoreError, match="not base64"):
        load_messages([{"kind": "user", "parts": [part]}])
