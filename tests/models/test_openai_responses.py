"""The OpenAI Responses adapter: exact request bodies, replies, round trips, bad payloads."""

# Inline snapshots hold wire strings verbatim, some longer than a line:
# ruff: noqa: E501

from __future__ import annotations

import json

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
from anfitrion.models._profiles import OPENAI_RESPONSES, Profile
from anfitrion.models.openai_responses import from_wire, to_wire

from . import conversations as conv


def test_request_with_one_tool_sends_a_strict_schema() -> None:
    assert to_wire(conv.one_tool(), model="gpt-test") == snapshot(
        {
            "model": "gpt-test",
            "input": [{"role": "user", "content": "Weather in Lisboa?"}],
            "tools": [
                {
                    "type": "function",
                    "name": "get_weather",
                    "description": "Get the current weather for a given location.",
                    "parameters": {
                        "additionalProperties": False,
                        "properties": {
                            "location": {
                                "description": 'City and country, e.g. "Lisboa, PT".',
                                "type": "string",
                            },
                            "units": {
                                "description": "Temperature units.",
                                "enum": ["celsius", "fahrenheit", None],
                                "type": ["string", "null"],
                            },
                        },
                        "required": ["location", "units"],
                        "type": "object",
                    },
                    "strict": True,
                }
            ],
        }
    )


def test_request_with_several_tools_instructions_and_required_choice() -> None:
    assert to_wire(conv.several_tools(), model="gpt-test", max_output_tokens=512) == snapshot(
        {
            "model": "gpt-test",
            "input": [{"role": "user", "content": "Save a note about the weather."}],
            "instructions": "You are a careful assistant.",
            "tools": [
                {
                    "type": "function",
                    "name": "get_weather",
                    "description": "Get the current weather for a given location.",
                    "parameters": {
                        "additionalProperties": False,
                        "properties": {
                            "location": {
                                "description": 'City and country, e.g. "Lisboa, PT".',
                                "type": "string",
                            },
                            "units": {
                                "description": "Temperature units.",
                                "enum": ["celsius", "fahrenheit", None],
                                "type": ["string", "null"],
                            },
                        },
                        "required": ["location", "units"],
                        "type": "object",
                    },
                    "strict": True,
                },
                {
                    "type": "function",
                    "name": "save_note",
                    "description": "Save a short note for the team under drafts/. Use only when asked to save a note.",
                    "parameters": {
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
                    "strict": True,
                },
            ],
            "tool_choice": "required",
            "max_output_tokens": 512,
        }
    )


def test_two_parallel_calls_get_their_outputs_in_call_order() -> None:
    assert to_wire(conv.parallel_calls(), model="gpt-test")["input"][1:] == snapshot(
        [
            {"role": "assistant", "content": "Checking both."},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"location": "Lisboa, PT"}',
            },
            {
                "type": "function_call",
                "call_id": "call_2",
                "name": "get_weather",
                "arguments": '{"location": "Porto, PT", "units": "celsius"}',
            },
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": '{"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}',
            },
            {
                "type": "function_call_output",
                "call_id": "call_2",
                "output": '{"location": "Porto, PT", "temp_c": 17, "sky": "partly cloudy"}',
            },
        ]
    )


def test_error_results_are_marked_in_the_output_text() -> None:
    assert to_wire(conv.error_results(), model="gpt-test")["input"][1:] == snapshot(
        [
            {
                "type": "function_call",
                "call_id": "call_3",
                "name": "delete_file",
                "arguments": '{"path": "notes.txt"}',
            },
            {
                "type": "function_call",
                "call_id": "call_4",
                "name": "get_weather",
                "arguments": '{"location": "Porto, PT", "units": "kelvin"}',
            },
            {
                "type": "function_call_output",
                "call_id": "call_3",
                "output": "error: unknown tool 'delete_file': it is not one of the tools offered (get_weather)",
            },
            {
                "type": "function_call_output",
                "call_id": "call_4",
                "output": "error: units: 'kelvin' is not one of ['celsius', 'fahrenheit']",
            },
        ]
    )


def test_long_multi_turn_transcript() -> None:
    assert to_wire(conv.long_multi_turn(), model="gpt-test", stream=True) == snapshot(
        {
            "model": "gpt-test",
            "input": [
                {"role": "user", "content": "Weather in Lisboa?"},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"location": "Lisboa, PT"}',
                },
                {
                    "type": "function_call_output",
                    "call_id": "call_1",
                    "output": '{"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}',
                },
                {"role": "assistant", "content": "It is 15 °C and partly cloudy in Lisboa."},
                {"role": "user", "content": "And Porto?"},
                {
                    "type": "function_call",
                    "call_id": "call_2",
                    "name": "get_weather",
                    "arguments": '{"location": "Porto, PT", "units": "celsius"}',
                },
                {
                    "type": "function_call_output",
                    "call_id": "call_2",
                    "output": '{"location": "Porto, PT", "temp_c": 17, "sky": "partly cloudy"}',
                },
                {"role": "assistant", "content": "17 °C in Porto."},
                {"role": "user", "content": "Save a note with both."},
                {"role": "assistant", "content": "Saving."},
                {
                    "type": "function_call",
                    "call_id": "call_5",
                    "name": "save_note",
                    "arguments": '{"path": "drafts/weather.md", "text": "Lisboa 15 °C, Porto 17 °C."}',
                },
                {
                    "type": "function_call_output",
                    "call_id": "call_5",
                    "output": "saved 26 characters to drafts/weather.md",
                },
            ],
            "instructions": "Be brief.",
            "tools": [
                {
                    "type": "function",
                    "name": "get_weather",
                    "description": "Get the current weather for a given location.",
                    "parameters": {
                        "additionalProperties": False,
                        "properties": {
                            "location": {
                                "description": 'City and country, e.g. "Lisboa, PT".',
                                "type": "string",
                            },
                            "units": {
                                "description": "Temperature units.",
                                "enum": ["celsius", "fahrenheit", None],
                                "type": ["string", "null"],
                            },
                        },
                        "required": ["location", "units"],
                        "type": "object",
                    },
                    "strict": True,
                },
                {
                    "type": "function",
                    "name": "save_note",
                    "description": "Save a short note for the team under drafts/. Use only when asked to save a note.",
                    "parameters": {
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
                    "strict": True,
                },
            ],
            "stream": True,
        }
    )


def test_a_profile_without_strict_mode_sends_the_schema_unchanged() -> None:
    loose = Profile("openai_responses")
    tool = to_wire(conv.one_tool(), model="m", profile=loose)["tools"][0]
    assert tool["strict"] is False
    assert tool["parameters"] == conv.WEATHER.input_schema


def test_function_call_round_trips_with_its_item_id() -> None:
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"location":"Lisboa, PT"}',
        "status": "completed",
    }
    reply = from_wire({"output": [item], "status": "completed"})
    assert reply.parts == (
        ToolCall.from_raw(
            "call_1",
            "get_weather",
            '{"location":"Lisboa, PT"}',
            {"openai_responses": {"id": "fc_1", "status": "completed"}},
        ),
    )
    wire = to_wire(
        ModelRequest([conv.ASK, reply, UserMessage((ToolResult("call_1", "get_weather", "15"),))]),
        model="m",
    )
    assert wire["input"][1] == item


def test_bad_argument_json_is_passed_through_for_the_gate() -> None:
    item = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"location": "Lisboa',
    }
    (call,) = from_wire({"output": [item]}, tools=[conv.WEATHER]).tool_calls
    assert call.raw_arguments == '{"location": "Lisboa'
    assert call.arguments is None


def test_strict_mode_nulls_for_optional_properties_are_removed_keeping_the_original() -> None:
    sent = '{"location":"Porto, PT","units":null}'
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": sent,
    }
    (call,) = from_wire({"output": [item]}, tools=[conv.WEATHER]).tool_calls
    assert json.loads(call.raw_arguments) == {"location": "Porto, PT"}
    wire = to_wire(
        ModelRequest(
            [conv.ASK, Reply((call,)), UserMessage((ToolResult("call_1", "get_weather", "17"),))]
        ),
        model="m",
    )
    assert wire["input"][1]["arguments"] == sent  # the model's own text goes back


def test_duplicate_keys_are_left_for_the_gate_to_refuse() -> None:
    sent = '{"location":"Porto, PT","location":"Lisboa, PT","units":null}'
    item = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": sent}
    (call,) = from_wire({"output": [item]}, tools=[conv.WEATHER]).tool_calls
    assert call.raw_arguments == sent


def test_message_reasoning_and_usage_are_read() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e=="}
    reply = from_wire(
        {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "model": "gpt-test",
            "output": [
                reasoning,
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
                },
            ],
            "usage": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
        }
    )
    assert reply == Reply(
        (Text("Hi"),),
        StopReason.END_TURN,
        Usage(12, 3),
        "gpt-test",
        {"openai_responses": {"id": "resp_1", "extra": [{"before": 0, "item": reasoning}]}},
    )
    wire = to_wire(ModelRequest([conv.ASK, reply, UserMessage((Text("And Porto?"),))]), model="m")
    assert wire["input"][1:3] == [reasoning, {"role": "assistant", "content": "Hi"}]


@pytest.mark.parametrize(
    ("details", "stop"),
    [
        ({"reason": "max_output_tokens"}, StopReason.MAX_TOKENS),
        ({"reason": "content_filter"}, StopReason.CONTENT_FILTER),
    ],
)
def test_incomplete_responses_map_to_stop_reasons(
    details: dict[str, str], stop: StopReason
) -> None:
    reply = from_wire({"status": "incomplete", "incomplete_details": details, "output": []})
    assert reply.stop_reason is stop


def test_a_refusal_is_text_with_the_refusal_stop_reason() -> None:
    reply = from_wire(
        {
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "content": [{"type": "refusal", "refusal": "I can't help with that."}],
                }
            ],
        }
    )
    assert reply.text == "I can't help with that."
    assert reply.stop_reason is StopReason.REFUSAL


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ("x", "(body)"),
        ({}, "output"),
        (
            {"output": [{"type": "function_call", "name": "x", "arguments": "{}"}]},
            "output[0].call_id",
        ),
        (
            {
                "output": [
                    {
                        "type": "function_call",
                        "call_id": "c",
                        "name": "x",
                        "arguments": {"location": "Lisboa"},
                    }
                ]
            },
            "output[0].arguments",
        ),
        ({"output": [{"type": "web_search_call", "id": "ws_1"}]}, "output[0].type"),
        (
            {"output": [{"type": "message", "content": [{"type": "output_audio"}]}]},
            "output[0].content[0].type",
        ),
        (
            {
                "output": [
                    {
                        "type": "message",
                        "content": [
                            {"type": "output_text", "text": "x", "annotations": [{"type": "url"}]}
                        ],
                    }
                ]
            },
            "output[0].content[0].annotations",
        ),
        ({"output": [], "status": "failed", "error": {"message": "boom"}}, "status"),
        (
            {"output": [], "status": "incomplete", "incomplete_details": {"reason": "odd"}},
            "incomplete_details.reason",
        ),
        ({"output": [], "usage": {"output_tokens": "3"}}, "usage.output_tokens"),
    ],
)
def test_malformed_responses_raise_one_error_naming_the_field(body: object, path: str) -> None:
    with pytest.raises(AdapterError) as caught:
        from_wire(body)
    assert caught.value.path == path
    assert caught.value.provider == "openai_responses"


def test_a_result_for_an_unknown_call_id_cannot_be_sent() -> None:
    request = ModelRequest(
        [conv.ASK, Reply((conv.CALL_LISBOA,)), UserMessage((conv.RESULT_PORTO,))]
    )
    with pytest.raises(AdapterError, match="unknown call id 'call_2'"):
        to_wire(request, model="m", profile=OPENAI_RESPONSES)
