"""The official SDK clients against a local server speaking each provider's format.

A full host run of the Lisboa scenario goes through each format, plain and streamed, and the
test checks what the server received: results paired to call ids, in call order.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from anfitrion import Host, RunStatus
from anfitrion._conversation import Text, UserMessage
from anfitrion._demo import demo_toolbox
from anfitrion.exceptions import ModelError
from anfitrion.models import StreamingModel
from anfitrion.models._base import Model, ModelRequest

from .fake_providers import (
    FINAL,
    TWO_CALLS,
    FakeProvider,
    anthropic_brain,
    chat_brain,
    responses_brain,
    serve,
)

pytest.importorskip("anthropic")
pytest.importorskip("openai")

from anfitrion.models.anthropic import AnthropicModel
from anfitrion.models.openai_chat import OpenAIChatModel
from anfitrion.models.openai_responses import OpenAIResponsesModel

LISBOA_RESULT = {"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}


def anthropic_model(url: str) -> Model:
    return AnthropicModel("claude-test", api_key="test-key", base_url=url, max_retries=0,
                          timeout=20)


def responses_model(url: str) -> Model:
    return OpenAIResponsesModel("gpt-test", api_key="test-key", base_url=f"{url}/v1",
                                max_retries=0, timeout=20)


def chat_model(url: str) -> Model:
    return OpenAIChatModel("local-test", base_url=f"{url}/v1", max_retries=0, timeout=20)


async def run_lisboa(model: Model, prompt: str = "Weather in Lisboa?") -> Any:
    with tempfile.TemporaryDirectory() as workdir:
        host = Host(model=model, tools=demo_toolbox(workdir), max_turns=4)
        return await _run(host, prompt)


async def _run(host: Host, prompt: str) -> Any:
    with anyio.fail_after(30):
        return await host.run(prompt, principal="alice")


def streamed(make: Callable[[str], Model], url: str) -> tuple[Model, list[str]]:
    chunks: list[str] = []
    return StreamingModel(make(url), chunks.append), chunks


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_lisboa_runs_through_the_anthropic_sdk(stream: bool) -> None:
    with serve(anthropic_brain()) as server:
        model, chunks = streamed(anthropic_model, server.url)
        run = await run_lisboa(model if stream else anthropic_model(server.url))
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.output == FINAL
    assert run.usage.input_tokens == 101 + 103
    assert run.usage.output_tokens == 40
    if stream:
        assert "".join(chunks) == "Let me check." + FINAL
    first, second = server.requests
    assert first.path == "/v1/messages"
    assert "test-key" in (first.headers.get("x-api-key", "") + first.headers["authorization"])
    assert "anthropic-version" in first.headers
    assert first.body["tools"][0]["name"] == "get_weather"
    assert second.body["messages"][1] == {"role": "assistant", "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_00", "name": "get_weather",
         "input": {"location": "Lisboa, PT"}}]}
    assert second.body["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_00",
         "content": json.dumps(LISBOA_RESULT, ensure_ascii=False)}]}


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_lisboa_runs_through_the_openai_responses_sdk(stream: bool) -> None:
    with serve(responses_brain()) as server:
        model, chunks = streamed(responses_model, server.url)
        run = await run_lisboa(model if stream else responses_model(server.url))
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.output == FINAL
    if stream:
        assert "".join(chunks) == FINAL
    first, second = server.requests
    assert first.path == "/v1/responses"
    assert first.headers["authorization"] == "Bearer test-key"
    assert first.body["tools"][0]["strict"] is True
    assert second.body["input"][1:] == [
        {"type": "function_call", "id": "fc_0", "call_id": "call_0", "name": "get_weather",
         "arguments": '{"location": "Lisboa, PT"}', "status": "completed"},
        {"type": "function_call_output", "call_id": "call_0",
         "output": json.dumps(LISBOA_RESULT, ensure_ascii=False)}]


@pytest.mark.anyio
@pytest.mark.parametrize("repeat_ids", [False, True], ids=["ids-once", "ids-repeated"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_lisboa_runs_through_the_openai_chat_sdk(stream: bool, repeat_ids: bool) -> None:
    with serve(chat_brain(), chat_repeat_ids=repeat_ids) as server:
        model, chunks = streamed(chat_model, server.url)
        run = await run_lisboa(model if stream else chat_model(server.url))
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.output == FINAL
    assert run.usage.input_tokens == 101 + 103
    if stream:
        assert "".join(chunks) == FINAL
        assert server.requests[0].body["stream_options"] == {"include_usage": True}
    first, second = server.requests
    assert first.path == "/v1/chat/completions"
    assert "strict" not in first.body["tools"][0]["function"]  # a compatible server
    assert second.body["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"location": "Lisboa, PT"}'}}]},
        {"role": "tool", "tool_call_id": "call_0",
         "content": json.dumps(LISBOA_RESULT, ensure_ascii=False)}]


def _results_of(server: FakeProvider, fmt: str) -> list[tuple[str, str]]:
    body = server.requests[1].body
    if fmt == "anthropic":
        last = body["messages"][-1]
        assert last["role"] == "user"
        return [(b["tool_use_id"], b["content"]) for b in last["content"]]
    if fmt == "responses":
        return [(i["call_id"], i["output"]) for i in body["input"]
                if i.get("type") == "function_call_output"]
    return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]


@pytest.mark.anyio
@pytest.mark.parametrize(("fmt", "brain", "make", "ids"), [
    ("anthropic", anthropic_brain(TWO_CALLS), anthropic_model, ["toolu_00", "toolu_01"]),
    ("responses", responses_brain(TWO_CALLS), responses_model, ["call_0", "call_1"]),
    ("chat", chat_brain(TWO_CALLS), chat_model, ["call_0", "call_1"]),
])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_parallel_calls_get_their_results_paired_in_call_order(
        fmt: str, brain: Any, make: Callable[[str], Model], ids: list[str],
        stream: bool) -> None:
    with serve(brain) as server:
        model = StreamingModel(make(server.url), lambda _: None) if stream \
            else make(server.url)
        run = await run_lisboa(model, "Weather in Lisboa and Porto?")
    assert run.status is RunStatus.COMPLETED, run.error
    results = _results_of(server, fmt)
    assert [call_id for call_id, _ in results] == ids
    assert "Lisboa" in results[0][1]
    assert "Porto" in results[1][1]


@pytest.mark.anyio
@pytest.mark.parametrize(("brain", "make"), [
    (responses_brain(arguments='{"location": "Lisboa, PT"'), responses_model),
    (chat_brain(arguments='{"location": "Lisboa, PT"'), chat_model),
])
async def test_bad_argument_json_reaches_the_model_as_an_error_result(
        brain: Any, make: Callable[[str], Model]) -> None:
    with serve(brain) as server:
        run = await run_lisboa(make(server.url))
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.calls[0].error_kind == "invalid_arguments"
    body = server.requests[1].body
    sent = json.dumps(body)
    assert '{\\"location\\": \\"Lisboa, PT\\"' in sent  # the model's own text went back as is
    outputs = [i.get("output") or i.get("content") for i in body.get("input", [])
               + body.get("messages", []) if i.get("type") == "function_call_output"
               or i.get("role") == "tool"]
    assert len(outputs) == 1
    assert outputs[0].startswith("error: ")


@pytest.mark.anyio
@pytest.mark.parametrize("make", [anthropic_model, responses_model, chat_model])
async def test_an_http_error_from_the_provider_fails_the_run_as_a_model_error(
        make: Callable[[str], Model]) -> None:
    def brain(path: str, body: dict[str, Any]) -> Any:
        return 500, {"error": {"type": "api_error", "message": "overloaded"}}

    with serve(brain) as server:
        model = make(server.url)
        with pytest.raises(ModelError) as caught:
            await model.respond(ModelRequest([UserMessage((Text("hi"),))]))
        run = await run_lisboa(model)
    assert caught.value.status_code == 500  # the SDK error's fields survive the translation
    assert caught.value.provider
    assert caught.value.__cause__ is not None
    assert run.status is RunStatus.FAILED
    assert "overloaded" in (run.error or "")


@pytest.mark.anyio
async def test_a_malformed_reply_fails_the_run_naming_the_field() -> None:
    def brain(path: str, body: dict[str, Any]) -> Any:
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1},
                "content": [{"type": "tool_use", "name": "get_weather", "input": {}}]}

    with serve(brain) as server:
        run = await run_lisboa(anthropic_model(server.url))
    assert run.status is RunStatus.FAILED
    assert "content[0].id: missing" in (run.error or "")


@pytest.mark.anyio
async def test_a_stream_cut_short_is_an_adapter_error_not_a_partial_reply() -> None:
    events = [("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": "save_note", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
            "type": "input_json_delta", "partial_json": '{"path": "drafts/'}})]

    with serve(lambda path, body: events) as server:
        run = await run_lisboa(StreamingModel(anthropic_model(server.url), lambda _: None))
    assert run.status is RunStatus.FAILED
    assert "ended before message_stop" in (run.error or "")
    assert run.calls == ()  # nothing was gated from the half-received call


@pytest.mark.anyio
async def test_strict_mode_nulls_pass_the_gate_and_go_back_as_the_model_sent_them() -> None:
    sent = '{"location":"Lisboa, PT","units":null}'
    with serve(responses_brain(arguments=sent)) as server:
        run = await run_lisboa(responses_model(server.url))
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.calls[0].is_error is False
    units = server.requests[0].body["tools"][0]["parameters"]["properties"]["units"]
    assert units["type"] == ["string", "null"]
    assert server.requests[1].body["input"][1]["arguments"] == sent
