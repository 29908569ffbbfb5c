"""A request's answer goes as one JSON body when nothing else goes to the client before it, and
as the SDK's SSE stream otherwise: the same messages in the same order either way."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import httpx2
from gateway_helpers import approve_all, protocol_server, serving_http, writes_allowed

from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._gateway_framing import lone_answer_as_json
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import MemoryStore

pytestmark = pytest.mark.anyio

TOKEN = "framing-token-0123456789abcdef"
SSE_START = {"type": "http.response.start", "status": 200, "headers": [
    (b"cache-control", b"no-cache, no-transform"), (b"connection", b"keep-alive"),
    (b"content-type", b"text/event-stream"), (b"mcp-session-id", b"abc"),
    (b"x-accel-buffering", b"no")]}
ANSWER = b'{"jsonrpc":"2.0","id":7,"result":{"content":[]}}'


def event(data: bytes, *, extra: bytes = b"") -> dict[str, Any]:
    return {"type": "http.response.body", "more_body": True,
            "body": extra + b"event: message\r\ndata: " + data + b"\r\n\r\n"}


async def framed(*messages: dict[str, Any], request_id: str | int = 7) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    framing = lone_answer_as_json(send, request_id)
    for message in messages:
        await framing(message)
    return sent


async def test_an_answer_alone_is_one_json_body_with_the_session_header() -> None:
    sent = await framed(SSE_START, event(ANSWER),
                        {"type": "http.response.body", "body": b"", "more_body": False})
    start, body = sent[:2]
    assert start["status"] == 200
    assert dict(start["headers"]) == {b"mcp-session-id": b"abc",
                                      b"content-type": b"application/json",
                                      b"content-length": str(len(ANSWER)).encode()}
    assert body == {"type": "http.response.body", "body": ANSWER, "more_body": False}


@pytest.mark.parametrize("first", [
    event(b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}'),
    event(b'{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{}}'),
    event(ANSWER, extra=b"id: 1\r\n"),  # resumable: its id matters to the client
    event(b'{"jsonrpc":"2.0","id":"7","result":{}}'),  # another request's answer
    event(b'{"jsonrpc":"2.0","id":7,"result":{}, "error":{}}'),
    event(b"not json"),
    {"type": "http.response.body", "body": b": ping\r\n\r\n", "more_body": True},
    {"type": "http.response.body", "body": b"", "more_body": False},
], ids=["notification", "server-request", "event-id", "other-id", "not-a-response",
        "not-json", "keep-alive", "empty-stream"])
async def test_anything_before_the_answer_keeps_the_sse_stream_as_sent(
        first: dict[str, Any]) -> None:
    later = event(ANSWER)
    assert await framed(SSE_START, first, later) == [SSE_START, first, later]


async def test_a_response_that_is_no_stream_passes_as_it_is() -> None:
    start = {"type": "http.response.start", "status": 202,
             "headers": [(b"content-type", b"application/json")]}
    body = {"type": "http.response.body", "body": b"", "more_body": False}
    assert await framed(start, body) == [start, body]


@asynccontextmanager
async def gateway_url(store: MemoryStore) -> AsyncIterator[tuple[str, socket.socket]]:
    configs = [protocol_server(trusted=True)]
    await approve_all(configs, store)
    async with McpServers(configs, store) as servers:
        gateway = Gateway(servers, store=store, policy=writes_allowed(), own_names=True)
        async with serving_http(gateway, TOKEN) as sock:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", sock


def rpc(method: str, request_id: int | None, **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return message


async def initialized(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """An MCP session opened over raw HTTP (its ``initialize`` answered as one JSON body):
    the headers each later request of it carries."""
    opened = await http.post(url, json=rpc(
        "initialize", 1, protocolVersion="2025-06-18", capabilities={},
        clientInfo={"name": "t", "version": "1"}))
    assert opened.headers["content-type"] == "application/json"
    session = {"mcp-session-id": opened.headers["mcp-session-id"],
               "mcp-protocol-version": "2025-06-18"}
    await http.post(url, json=rpc("notifications/initialized", None), headers=session)
    return session


@pytest.mark.mcp_servers
async def test_a_quiet_call_is_answered_as_json_and_a_logging_one_as_a_stream() -> None:
    """Over real HTTP: the quiet call's answer is one JSON body on a connection kept open; a
    call whose server logs first gets its log message, then its answer, on an SSE stream."""
    headers = {"Authorization": f"Bearer {TOKEN}",
               "Accept": "application/json, text/event-stream"}
    with anyio.fail_after(60):
        async with gateway_url(MemoryStore()) as (url, sock), \
                httpx2.AsyncClient(headers=headers, timeout=30) as http:
            session = await initialized(http, url)
            quiet = await http.post(url, json=rpc("tools/call", 2, name="text", arguments={}),
                                    headers=session)
            await http.post(url, json=rpc("logging/setLevel", 3, level="debug"),
                            headers=session)
            streamed = await http.post(url, json=rpc("tools/call", 4, name="logging",
                                                     arguments={}), headers=session)
            nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert quiet.headers["content-type"] == "application/json"
    assert quiet.headers["content-length"] == str(len(quiet.content))
    assert quiet.headers["mcp-session-id"] == session["mcp-session-id"]
    assert quiet.headers.get("connection") != "close"
    answer = json.loads(quiet.content)
    assert answer["id"] == 2 and answer["result"]["isError"] is False
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: ")]
    assert [e.get("method") for e in events] == ["notifications/message"] * 3 + [None]
    assert events[-1]["id"] == 4
    assert nodelay, "answers written as headers, then body, would wait for a delayed ACK"
