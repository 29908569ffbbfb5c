"""The endpoint on 127.0.0.1, driven by the official ``openai`` SDK and by raw HTTP."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from anfitrion.localmodel import LocalServer

pytestmark = pytest.mark.local_model

openai = pytest.importorskip("openai")
Tools = list[dict[str, Any]]


def test_sdk_gets_a_tool_call_with_parseable_arguments(client: Any, tools: Tools) -> None:
    completion = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Weather in Lisboa?"}],
        tools=tools, tool_choice="required")
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name in {t["function"]["name"] for t in tools}
    assert isinstance(json.loads(call.function.arguments), dict)
    assert completion.usage.prompt_tokens > 0


def test_sdk_streams_a_tool_call_that_assembles_into_one_call(client: Any, tools: Tools) -> None:
    stream = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Weather in Lisboa?"}],
        tools=tools, tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True)
    ids, names, arguments, finish = [], [], "", None
    with stream:
        for chunk in stream:
            for delta_call in chunk.choices[0].delta.tool_calls or []:
                assert delta_call.index == 0
                ids += [delta_call.id] if delta_call.id else []
                names += [delta_call.function.name] if delta_call.function.name else []
                arguments += delta_call.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
    assert len(ids) == 1
    assert names == ["get_weather"]
    assert isinstance(json.loads(arguments)["location"], str)
    assert finish == "tool_calls"


def test_sdk_round_trip_with_null_content_and_a_tool_result_gets_text(
        client: Any, tools: Tools) -> None:
    completion = client.chat.completions.create(model="smollm2", tools=tools, messages=[
        {"role": "user", "content": "Weather in Lisboa?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"location": "Lisboa, PT"}'}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": '{"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}'}],
        max_tokens=60)
    message = completion.choices[0].message
    assert message.tool_calls is None
    assert message.content


def test_tool_choice_naming_an_absent_tool_is_a_400_in_openai_shape(
        client: Any, tools: Tools) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "hi"}], tools=tools,
            tool_choice={"type": "function", "function": {"name": "delete_file"}})
    assert info.value.body["param"] == "tool_choice"
    assert info.value.body["code"] == "invalid_request"


def test_streamed_request_over_the_context_is_a_400_before_the_stream_starts(
        client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "weather " * 5000}],
            stream=True)
    assert info.value.body["code"] == "context_length_exceeded"


def test_wrong_model_name_is_refused(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-4o",
                                       messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["code"] == "model_not_found"


def test_request_without_the_key_is_refused(server: LocalServer) -> None:
    with openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0) as guess, \
            pytest.raises(openai.AuthenticationError):
        guess.models.list()


def _raw(server: LocalServer, method: str, path: str, headers: dict[str, str],
         body: bytes | None = None) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.putrequest(method, path, skip_host=True)
        for key, value in headers.items():
            connection.putheader(key, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_a_page_reaching_the_port_through_dns_rebinding_is_refused(server: LocalServer) -> None:
    """A browser sends the attacker's host name: the server answers nothing useful."""
    status, body = _raw(server, "GET", "/v1/models",
                        {"Host": f"evil.example:{server.port}",
                         "Authorization": f"Bearer {server.api_key}"})
    assert status == 403
    assert body["error"]["code"] == "forbidden"


def test_malformed_body_is_a_400(server: LocalServer) -> None:
    headers = {"Host": f"127.0.0.1:{server.port}", "Authorization": f"Bearer {server.api_key}",
               "Content-Type": "application/json"}
    status, body = _raw(server, "POST", "/v1/chat/completions", headers, b"{not json")
    assert status == 400
    assert body["error"]["code"] == "invalid_body"


def test_models_lists_the_served_model(client: Any) -> None:
    assert [m.id for m in client.models.list()] == ["smollm2"]


def _refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_close_stops_serving_and_is_idempotent(model_path: Path) -> None:
    server = LocalServer(model_path, n_ctx=512).start()
    port = server.port
    assert server.running
    server.close()
    assert not server.running
    assert _refused(port)
    server.close()


@pytest.mark.anyio
async def test_close_during_a_stream_ends_the_stream_and_returns(model_path: Path) -> None:
    """Greedy, this story runs past 300 tokens (finish ``length``); closed, it ends ``stop``."""
    server = LocalServer(model_path, n_ctx=1024).start()
    port, key = server.port, server.api_key
    first_chunk = threading.Event()
    lines: list[bytes] = []

    def stream() -> None:
        body = json.dumps({"messages": [{"role": "user", "content": "Tell a long story."}],
                           "stream": True, "max_tokens": 300}).encode()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            connection.request("POST", "/v1/chat/completions", body,
                               {"Authorization": f"Bearer {key}",
                                "Content-Type": "application/json"})
            response = connection.getresponse()
            for line in response:
                lines.append(line)
                if line.startswith(b"data: "):
                    first_chunk.set()
        finally:
            connection.close()

    reader = threading.Thread(target=stream)
    reader.start()
    with anyio.fail_after(60):
        await anyio.to_thread.run_sync(first_chunk.wait)
        await anyio.to_thread.run_sync(server.close)
        await anyio.to_thread.run_sync(reader.join)
    chunks = [json.loads(line[6:]) for line in lines
              if line.startswith(b"data: {")]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert _refused(port)
