"""The Chat Completions adapter: exact request bodies, replies, round trips, bad payloads."""

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
from anfitrion.models._profiles import COMPATIBLE_CHAT, OPENAI_CHAT
from anfitrion.models.openai_chat import from_wire, to_wire

from . import conversations as conv


def test_request_with_one_tool_for_a_compatible_server() -> None:
    assert to_wire(conv.one_tool(), model="qwen", profile=COMPATIBLE_CHAT) == snapshot(
        {
            "model": "qwen",
            "messages": [{"role": "user", "content": "Weather in Lisboa?"}],
            "tools": [
                {
                    "type": "function",
                    "function": {
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
                }
            ],
        }
    )


def test_request_with_one_tool_for_openai_is_strict() -> None:
    assert to_wire(conv.one_tool(), model="gpt-test", profile=OPENAI_CHAT)["tools"] == snapshot(
        [
            {
                "type": "function",
                "function": {
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
            }
        ]
    )


def test_request_with_several_tools_instructions_and_required_choice() -> None:
    assert to_wire(
        conv.several_tools(), model="qwen", profile=COMPATIBLE_CHAT, max_tokens=512
    ) == snapshot(
        {
            "model": "qwen",
            "messages": [
                {"role": "system", "content": "You are a careful assistant."},
                {"role": "user", "content": "Save a note about the weather."},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
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
                },
                {
                    "type": "function",
                    "function": {
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
                    },
                },
            ],
            "tool_choice": "required",
            "max_tokens": 512,
        }
    )


def test_two_parallel_calls_get_tool_messages_in_call_order() -> None:
    assert to_wire(conv.parallel_calls(), model="qwen", profile=COMPATIBLE_CHAT)["messages"][
        1:
    ] == snapshot(
        [
            {
                "role": "assistant",
                "content": "Checking both.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"location": "Lisboa, PT"}',
                        },
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"location": "Porto, PT", "units": "celsius"}',
                        },
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": '{"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}',
            },
            {
                "role": "tool",
                "tool_call_id": "call_2",
                "content": '{"location": "Porto, PT", "temp_c": 17, "sky": "partly cloudy"}',
            },
        ]
    )


def test_error_results_are_marked_in_the_content() -> None:
    assert to_wire(conv.error_results(), model="qwen", profile=COMPATIBLE_CHAT)["messages"][
        1:
    ] == snapshot(
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_3",
                        "type": "function",
                        "function": {"name": "delete_file", "arguments": '{"path": "notes.txt"}'},
                    },
                    {
                        "id": "call_4",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"location": "Porto, PT", "units": "kelvin"}',
                        },
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_3",
                "content": "error: unknown tool 'delete_file': it is not one of the tools offered (get_weather)",
            },
            {
                "role": "tool",
                "tool_call_id": "call_4",
                "content": "error: units: 'kelvin' is not one of ['celsius', 'fahrenheit']",
            },
        ]
    )


def test_long_multi_turn_transcript() -> None:
    assert to_wire(
        conv.long_multi_turn(), model="qwen", profile=COMPATIBLE_CHAT, stream=True
    ) == snapshot(
        {
            "model": "qwen",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Lisboa?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": '{"location": "Lisboa, PT"}',
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "call_1",
                    "content": '{"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}',
                },
                {"role": "assistant", "content": "It is 15 °C and partly cloudy in Lisboa."},
                {"role": "user", "content": "And Porto?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": '{"location": "Porto, PT", "units": "celsius"}',
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "call_2",
                    "content": '{"location": "Porto, PT", "temp_c": 17, "sky": "partly cloudy"}',
                },
                {"role": "assistant", "content": "17 °C in Porto."},
                {"role": "user", "content": "Save a note with both."},
                {
                    "role": "assistant",
                    "content": "Saving.",
                    "tool_calls": [
                        {
                            "id": "call_5",
                            "type": "function",
                            "function": {
                                "name": "save_note",
                                "arguments": '{"path": "drafts/weather.md", "text": "Lisboa 15 °C, Porto 17 °C."}',
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "call_5",
                    "content": "saved 26 characters to drafts/weather.md",
                },
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
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
                },
                {
                    "type": "function",
                    "function": {
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
                    },
                },
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


def _completion(message: dict[str, object], finish: str = "tool_calls") -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "qwen",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37},
    }


def test_assistant_message_round_trips_through_the_wire() -> None:
    reply = conv.parallel_calls().messages[1]
    assert isinstance(reply, Reply)
    wire = to_wire(
        ModelRequest([conv.ASK, reply, UserMessage((conv.RESULT_LISBOA, conv.RESULT_PORTO))]),
        model="m",
        profile=COMPATIBLE_CHAT,
    )
    back = from_wire(_completion(wire["messages"][1]), profile=COMPATIBLE_CHAT)
    assert back.parts == reply.parts
    assert back.stop_reason is StopReason.TOOL_USE
    assert back.usage == Usage(30, 7)


def test_bad_argument_json_is_passed_through_for_the_gate() -> None:
    body = _completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{location: Lisboa}"},
                }
            ],
        }
    )
    (call,) = from_wire(body, tools=[conv.WEATHER]).tool_calls
    assert call == ToolCall.from_raw("call_1", "get_weather", "{location: Lisboa}")


def test_strict_mode_nulls_are_removed_only_for_openai_strict_profile() -> None:
    sent = '{"location": "Porto, PT", "units": null}'
    body = _completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": sent},
                }
            ],
        }
    )
    (strict,) = from_wire(body, tools=[conv.WEATHER], profile=OPENAI_CHAT).tool_calls
    assert json.loads(strict.raw_arguments) == {"location": "Porto, PT"}
    (loose,) = from_wire(body, tools=[conv.WEATHER], profile=COMPATIBLE_CHAT).tool_calls
    assert loose.raw_arguments == sent
    wire = to_wire(
        ModelRequest(
            [conv.ASK, Reply((strict,)), UserMessage((ToolResult("call_1", "get_weather", "17"),))]
        ),
        model="m",
        profile=OPENAI_CHAT,
    )
    assert wire["messages"][1]["tool_calls"][0]["function"]["arguments"] == sent


def test_a_local_server_saying_stop_after_tool_calls_still_reads_as_tool_use() -> None:
    body = _completion(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        finish="stop",
    )
    reply = from_wire(body)
    assert reply.stop_reason is StopReason.TOOL_USE
    assert reply.provider_details == {"openai_chat": {"finish_reason": "stop", "id": "chatcmpl-1"}}


def test_reasoning_content_of_local_servers_is_kept() -> None:
    body = _completion(
        {"role": "assistant", "content": "15 °C.", "reasoning_content": "The tool said 15."},
        finish="stop",
    )
    reply = from_wire(body)
    assert reply.parts == (Text("15 °C."),)
    assert reply.provider_details is not None
    assert reply.provider_details["openai_chat"]["reasoning_content"] == "The tool said 15."


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (None, "(body)"),
        ({"choices": []}, "choices"),
        ({"choices": [{"index": 0, "finish_reason": "stop"}]}, "choices[0].message"),
        (
            _completion(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"type": "function", "function": {"name": "x", "arguments": "{}"}}
                    ],
                }
            ),
            "choices[0].message.tool_calls[0].id",
        ),
        (
            _completion(
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "function": {"name": "x", "arguments": {"a": 1}}}],
                }
            ),
            "choices[0].message.tool_calls[0].function.arguments",
        ),
        (
            _completion(
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}
            ),
            "choices[0].message.tool_calls[0].type",
        ),
        (
            _completion({"role": "assistant", "content": "x"}, finish="eos"),
            "choices[0].finish_reason",
        ),
        (
            {"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": None}]},
            "choices[0].finish_reason",
        ),
        (
            _completion({"role": "assistant", "function_call": {"name": "x", "arguments": "{}"}}),
            "choices[0].message.function_call",
        ),
        (_completion({"role": "assistant", "content": ["x"]}), "choices[0].message.content"),
    ],
)
def test_malformed_responses_raise_one_error_naming_the_field(body: object, path: str) -> None:
    with pytest.raises(AdapterError) as caught:
        from_wire(body)
    assert caught.value.path == path
    assert caught.value.provider == "openai_chat"


def test_a_result_for_an_unknown_call_id_cannot_be_sent() -> None:
    request = ModelRequest(
        [
            conv.ASK,
            Reply((conv.CALL_LISBOA,)),
            UserMessage((conv.RESULT_LISBOA, ToolResult("call_9", "x", "?"))),
        ]
    )
    with pytest.raises(AdapterError, match="unknown call id 'call_9'"):
        to_wire(request, model="m")
