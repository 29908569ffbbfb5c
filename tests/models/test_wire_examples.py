"""The providers' documented examples parse and serialise exactly (fixtures/wire_examples.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anfitrion._conversation import Reply, Text, ToolCall, ToolResult, UserMessage
from anfitrion._tools import ToolDefinition
from anfitrion.models import anthropic, openai_responses
from anfitrion.models._base import ModelRequest
from anfitrion.models._profiles import OPENAI_RESPONSES

EXAMPLES: dict[str, Any] = json.loads(
    (Path(__file__).parent / "fixtures" / "wire_examples.json").read_text(encoding="utf-8"))


@pytest.fixture
def claude() -> dict[str, Any]:
    examples: dict[str, Any] = EXAMPLES["anthropic_messages"]
    return examples


@pytest.fixture
def openai() -> dict[str, Any]:
    examples: dict[str, Any] = EXAMPLES["openai_responses"]
    return examples


def test_the_documented_anthropic_request_is_produced_exactly(claude: dict[str, Any]) -> None:
    request = claude["request"]
    tool = request["tools"][0]
    canonical = ModelRequest(
        [UserMessage((Text(request["messages"][0]["content"]),))],
        [ToolDefinition(tool["name"], tool["description"], tool["input_schema"])])
    assert anthropic.to_wire(canonical, model=request["model"],
                             max_tokens=request["max_tokens"]) == request


def test_the_documented_anthropic_tool_use_and_result_round_trip(
        claude: dict[str, Any]) -> None:
    reply = anthropic.from_wire(claude["response"])
    assert reply.tool_calls == (ToolCall.from_object(
        "toolu_01A09q90qw90lq917835lq9", "get_weather", {"location": "San Francisco, CA"}),)
    result_block = claude["tool_result_message"]["content"][0]
    result = ToolResult(result_block["tool_use_id"], "get_weather", result_block["content"])
    body = anthropic.to_wire(ModelRequest([UserMessage((Text("?"),)), reply,
                                           UserMessage((result,))]), model="m")
    assert body["messages"][1] == {"role": "assistant", "content": claude["response"]["content"]}
    assert body["messages"][2] == claude["tool_result_message"]


def test_the_documented_openai_function_tool_is_produced_exactly(
        openai: dict[str, Any]) -> None:
    tool = openai["tool"]
    request = ModelRequest([UserMessage((Text("?"),))],
                           [ToolDefinition(tool["name"], tool["description"], tool["parameters"])])
    body = openai_responses.to_wire(request, model="m", profile=OPENAI_RESPONSES)
    assert body["tools"] == [tool]


def test_the_documented_function_call_and_output_round_trip(openai: dict[str, Any]) -> None:
    item = openai["function_call"]
    reply = openai_responses.from_wire({"output": [item]})
    (call,) = reply.tool_calls
    assert (call.id, call.name, call.raw_arguments) == (
        "call_12345xyz", "get_weather", '{"location":"Paris, France"}')
    assert call.arguments == {"location": "Paris, France"}
    output = openai["function_call_output"]
    result = ToolResult(output["call_id"], "get_weather", output["output"])
    body = openai_responses.to_wire(ModelRequest([UserMessage((Text("?"),)), reply,
                                                  UserMessage((result,))]), model="m")
    assert body["input"][1:] == [item, output]


def test_the_fixture_reply_is_a_reply() -> None:
    assert isinstance(anthropic.from_wire(EXAMPLES["anthropic_messages"]["response"]), Reply)
