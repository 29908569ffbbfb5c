"""The Anthropic Messages adapter: exact request bodies, replies, round trips, bad payloads."""

# Inline snapshots hold wire strings verbatim, some longer than a line:
# ruff: noqa: E501

from __future__ import annotations

import pytest
from inline_snapshot import snapshot

from anfitrion._conversation import (
    Reply,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from anfitrion.exceptions import AdapterError
from anfitrion.models._base import ModelRequest
from anfitrion.models.anthropic import from_wire, to_wire

from . import conversations as conv


def test_request_with_one_tool() -> None:
    assert to_wire(conv.one_tool(), model="claude-test") == snapshot(
        {
            "model": "claude-test",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Weather in Lisboa?"}],
            "tools": [
                {
                    "name": "get_weather",
                    "description": "Get the current weather for a given location.",
                    "input_schema": {
                        "additionalProperties": False,
                        "properties": {
                            "location": {
                                "description": 'City and country, e.g. "Lisboa, PT".',
                                "type": "string",
                            },
                            "units": {
                                "default": "celsius",
                                "description": "Temperature units.",
                                "enum": ["celsius", "fahrenheit"],
                                "type": "string",
                            },
                        },
                        "required": ["location"],
                        "type": "object",
                    },
                }
            ],
        }
    )


def test_request_with_several_tools_instructions_and_required_choice() -> None:
    assert to_wire(conv.several_tools(), model="claude-test", max_tokens=512) == snapshot(
        {
            "model": "claude-test",
            "max_tokens": 512,
            "messages": [{"role": "user", "content": "Save a note about the weather."}],
            "system": "You are a careful assistant.",
            "tools": [
                {
                    "name": "get_weather",
                    "description": "Get the current weather for a given location.",
                    "input_schema": {
                        "additionalProperties": False,
                        "properties": {
                            "location": {
                                "description": 'City and country, e.g. "Lisboa, PT".',
                                "type": "string",
                            },
                            "units": {
                                "default": "celsius",
                                "description": "Temperature units.",
                                "enum": ["celsius", "fahrenheit"],
                                "type": "string",
                            },
                        },
                        "required": ["location"],
                        "type": "object",
                    },
                },
                {
                    "name": "save_note",
                    "description": "Save a short note for the team under drafts/. Use only when asked to save a note.",
                    "input_schema": {
                        "additionalProperties": False,
                        "properties": {
                            "path": {
                                "description": 'Where to save it, e.g. "drafts/weather.md".',
                                "type": "string",
                            },
                            "text": {"description": "The note's text.", "type": "string"},
                        },
                        "required": ["path", "text"],
                        "type": "object",
                    },
                },
            ],
            "tool_choice": {"type": "any"},
        }
    )


def test_two_parallel_calls_get_all_results_in_one_user_message_in_call_order() -> None:
    assert to_wire(conv.parallel_calls(), model="claude-test")["messages"][1:] == snapshot(
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking both."},
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "get_weather",
                        "input": {"location": "Lisboa, PT"},
                    },
                    {
                        "type": "tool_use",
                        "id": "call_2",
                        "name": "get_weather",
                        "input": {"location": "Porto, PT", "units": "celsius"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_1",
                        "content": '{"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}',
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_2",
                        "content": '{"location": "Porto, PT", "temp_c": 17, "sky": "partly cloudy"}',
                    },
                ],
            },
        ]
    )


def test_error_results_carry_is_error() -> None:
    assert to_wire(conv.error_results(), model="claude-test")["messages"][1:] == snapshot(
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "call_3",
                        "name": "delete_file",
                        "input": {"path": "notes.txt"},
                    },
                    {
                        "type": "tool_use",
                        "id": "call_4",
                        "name": "get_weather",
                        "input": {"location": "Porto, PT", "units": "kelvin"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_3",
                        "content": "unknown tool 'delete_file': it is not one of the tools offered (get_weather)",
                        "is_error": True,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_4",
                        "content": "units: 'kelvin' is not one of ['celsius', 'fahrenheit']",
                        "is_error": True,
                    },
                ],
            },
        ]
    )


def test_long_multi_turn_transcript() -> None:
    assert to_wire(conv.long_multi_turn(), model="claude-test", stream=True) == snapshot(
        {
            "model": "claude-test",
            "max_tokens": 1024,
            "messages": [
                {"role": "user", "content": "Weather in Lisboa?"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "call_1",
                            "name": "get_weather",
                            "input": {"location": "Lisboa, PT"},
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "call_1",
                            "content": '{"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}',
                        }
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "It is 15 °C and partly cloudy in Lisboa."}
                    ],
                },
                {"role": "user", "content": "And Porto?"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "call_2",
                            "name": "get_weather",
                            "input": {"location": "Porto, PT", "units": "celsius"},
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "call_2",
                            "content": '{"location": "Porto, PT", "temp_c": 17, "sky": "partly cloudy"}',
                        }
                    ],
                },
                {"role": "assistant", "content": [{"type": "text", "text": "17 °C in Porto."}]},
                {"role": "user", "content": "Save a note with both."},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Saving."},
                        {
                            "type": "tool_use",
                            "id": "call_5",
                            "name": "save_note",
                            "input": {
                                "path": "drafts/weather.md",
                                "text": "Lisboa 15 °C, Porto 17 °C.",
                            },
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "call_5",
                            "content": "saved 26 characters to drafts/weather.md",
                        }
                    ],
                },
            ],
            "system": "Be brief.",
            "tools": [
                {
                    "name": "get_weather",
                    "description": "Get the current weather for a given location.",
                    "input_schema": {
                        "additionalProperties": False,
                        "properties": {
                            "location": {
                                "description": 'City and country, e.g. "Lisboa, PT".',
                                "type": "string",
                            },
                            "units": {
                                "default": "celsius",
                                "description": "Temperature units.",
                                "enum": ["celsius", "fahrenheit"],
                                "type": "string",
                            },
                        },
                        "required": ["location"],
                        "type": "object",
                    },
                },
                {
                    "name": "save_note",
                    "description": "Save a short note for the team under drafts/. Use only when asked to save a note.",
                    "input_schema": {
                        "additionalProperties": False,
                        "properties": {
                            "path": {
                                "description": 'Where to save it, e.g. "drafts/weather.md".',
                                "type": "string",
                            },
                            "text": {"description": "The note's text.", "type": "string"},
                        },
                        "required": ["path", "text"],
                        "type": "object",
                    },
                },
            ],
            "stream": True,
        }
    )


@pytest.mark.parametrize("choice", ["auto", "none", "get_weather"])
def test_tool_choice_maps_to_the_documented_objects(choice: str) -> None:
    request = ModelRequest([conv.ASK], [conv.WEATHER], tool_choice=choice)
    expected = {
        "auto": None,
        "none": {"type": "none"},
        "get_weather": {"type": "tool", "name": "get_weather"},
    }[choice]
    assert to_wire(request, model="m").get("tool_choice") == expected


def test_reply_with_text_and_calls_round_trips_through_the_wire() -> None:
    reply = conv.parallel_calls().messages[1]
    assert isinstance(reply, Reply)
    wire = to_wire(
        ModelRequest([conv.ASK, reply, UserMessage((conv.RESULT_LISBOA, conv.RESULT_PORTO))]),
        model="m",
    )
    back = from_wire({"content": wire["messages"][1]["content"], "stop_reason": "tool_use"})
    assert back.parts == reply.parts
    assert back.stop_reason is StopReason.TOOL_USE


def test_full_response_is_read_with_usage_and_id() -> None:
    reply = from_wire(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [{"type": "text", "text": "Hi"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 5},
        }
    )
    assert reply == Reply(
        (Text("Hi"),),
        StopReason.END_TURN,
        Usage(15, 3),
        "claude-test",
        {"anthropic": {"id": "msg_1"}},
    )


def test_thinking_blocks_are_kept_and_sent_back_in_place() -> None:
    thinking = {"type": "thinking", "thinking": "Lisboa first.", "signature": "sig=="}
    content = [
        thinking,
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "get_weather",
            "input": {"location": "Lisboa, PT"},
        },
    ]
    reply = from_wire({"content": content, "stop_reason": "tool_use"})
    assert [p.kind for p in reply.parts] == ["tool_call"]
    wire = to_wire(
        ModelRequest([conv.ASK, reply, UserMessage((ToolResult("toolu_1", "get_weather", "15"),))]),
        model="m",
    )
    assert wire["messages"][1]["content"] == content


def test_context_window_stop_reads_as_max_tokens_keeping_the_original() -> None:
    reply = from_wire(
        {"content": [{"type": "text", "text": "…"}], "stop_reason": "model_context_window_exceeded"}
    )
    assert reply.stop_reason is StopReason.MAX_TOKENS
    assert reply.provider_details == {"anthropic": {"stop_reason": "model_context_window_exceeded"}}


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ([], "(body)"),
        ({"stop_reason": "end_turn"}, "content"),
        (
            {
                "content": [{"type": "tool_use", "name": "x", "input": {}}],
                "stop_reason": "tool_use",
            },
            "content[0].id",
        ),
        (
            {
                "content": [{"type": "tool_use", "id": "", "name": "x", "input": {}}],
                "stop_reason": "tool_use",
            },
            "content[0].id",
        ),
        (
            {
                "content": [{"type": "tool_use", "id": "t", "name": "x", "input": "{}"}],
                "stop_reason": "tool_use",
            },
            "content[0].input",
        ),
        ({"content": [{"type": "text", "text": 3}], "stop_reason": "end_turn"}, "content[0].text"),
        (
            {"content": [{"type": "image", "source": {}}], "stop_reason": "end_turn"},
            "content[0].type",
        ),
        ({"content": [], "stop_reason": "bored"}, "stop_reason"),
        ({"content": []}, "stop_reason"),
        (
            {"content": [], "stop_reason": "end_turn", "usage": {"input_tokens": -1}},
            "usage.input_tokens",
        ),
    ],
)
def test_malformed_responses_raise_one_error_naming_the_field(body: object, path: str) -> None:
    with pytest.raises(AdapterError) as caught:
        from_wire(body)
    assert caught.value.path == path
    assert caught.value.provider == "anthropic"


def test_a_result_for_an_unknown_call_id_cannot_be_sent() -> None:
    request = ModelRequest(
        [
            conv.ASK,
            Reply((conv.CALL_LISBOA,), StopReason.TOOL_USE),
            UserMessage((conv.RESULT_LISBOA, conv.RESULT_PORTO)),
        ]
    )
    with pytest.raises(AdapterError, match="unknown call id 'call_2'") as caught:
        to_wire(request, model="m")
    assert caught.value.path == "messages[2].parts[1].call_id"


def test_a_call_left_without_a_result_cannot_be_sent() -> None:
    request = ModelRequest(
        [conv.ASK, Reply((conv.CALL_LISBOA, conv.CALL_PORTO)), UserMessage((conv.RESULT_LISBOA,))]
    )
    with pytest.raises(AdapterError, match="no result for call ids call_2"):
        to_wire(request, model="m")


def test_an_id_outside_the_declared_pattern_cannot_be_sent() -> None:
    call = ToolCall.from_object("call 1/evil", "get_weather", {})
    request = ModelRequest(
        [conv.ASK, Reply((call,)), UserMessage((ToolResult("call 1/evil", "get_weather", "x"),))]
    )
    with pytest.raises(AdapterError, match="does not match"):
        to_wire(request, model="m")


def test_arguments_that_are_not_an_object_cannot_be_sent_as_input() -> None:
    call = ToolCall.from_raw("call_1", "get_weather", '{"location": ')
    request = ModelRequest(
        [
            conv.ASK,
            Reply((call,)),
            UserMessage((ToolResult("call_1", "get_weather", "x", is_error=True),)),
        ]
    )
    with pytest.raises(AdapterError, match="not a JSON object") as caught:
        to_wire(request, model="m")
    assert caught.value.path == "messages[1].parts[0].arguments"


def test_stored_extras_without_a_position_are_not_sent() -> None:
    reply = Reply((conv.CALL_LISBOA,), StopReason.TOOL_USE, provider_details={"anthropic": {
        "extra": [{"item": {"type": "thinking"}}, {"before": "0", "item": {}}, "junk"]}})
    wire = to_wire(ModelRequest([conv.ASK, reply, UserMessage((conv.RESULT_LISBOA,))]),
                   model="m")
    assert [b["type"] for b in wire["messages"][1]["content"]] == ["tool_use"]
