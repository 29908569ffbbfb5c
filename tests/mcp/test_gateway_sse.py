"""A POST's SSE stream while the gateway serves: the SDK's events, keep-alive comments in a quiet
call, the call ended when its client goes — with two tasks a request, not sse_starlette's five."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import httpx2
import mcp.server.streamable_http as transport
from sse_starlette import EventSourceResponse
from test_gateway_framing import TOKEN, gateway_url, initialized, rpc

from anfitrion.mcp import _gateway_sse
from anfitrion.mcp._gateway_sse import SDK_NAME, PostEventStream, lean_post_streams
from anfitrion.store import MemoryStore

HEADERS = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}


def _answer(body: str) -> Any:
    """The JSON-RPC answer of a POST: its JSON body, or the last ``data:`` of its stream."""
    if body.startswith("{"):
        return json.loads(body)
    return json.loads([line for line in body.splitlines() if line.startswith("data: ")][-1][6:])


def test_the_sdk_builds_a_posts_stream_by_the_name_the_gateway_substitutes() -> None:
    """If the SDK stops looking the name up when it answers a POST, this fails (the gateway
    would keep working on sse_starlette's stream, without the saving)."""
    post = transport.StreamableHTTPServerTransport._handle_post_request
    assert SDK_NAME in post.__code__.co_names
    assert getattr(transport, SDK_NAME) is EventSourceResponse


def test_the_substitution_lasts_while_any_gateway_serves_and_is_undone_by_the_last() -> None:
    first, second = lean_post_streams(), lean_post_streams()
    first.__enter__()
    assert getattr(transport, SDK_NAME) is PostEventStream
    second.__enter__()
    first.__exit__(None, None, None)  # the first gateway stops while the second serves
    assert getattr(transport, SDK_NAME) is PostEventStream
    second.__exit__(None, None, None)
    assert getattr(transport, SDK_NAME) is EventSourceResponse
    with pytest.raises(RuntimeError), lean_post_streams():
        raise RuntimeError("the gateway failed")
    assert getattr(transport, SDK_NAME) is EventSourceResponse


@pytest.mark.anyio
async def test_a_stream_it_does_not_know_goes_to_sse_starlette_unchanged() -> None:
    """A GET (the standalone stream) or an option it does not take: the SDK's own response."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    writer, reader = anyio.create_memory_object_stream[Any](0)

    async def writes() -> None:
        async with writer:
            await writer.send({"event": "message", "data": "{}"})

    stream = PostEventStream(content=reader, data_sender_callable=writes,
                             headers={"Content-Type": "text/event-stream"})
    with anyio.fail_after(10):
        async with reader:
            await stream({"type": "http", "method": "GET", "headers": []}, receive, send)
    assert sent[0]["type"] == "http.response.start"
    assert (b"cache-control", b"no-store") in sent[0]["headers"]  # sse_starlette's own
    assert sent[1]["body"] == b"event: message\r\ndata: {}\r\n\r\n"


@pytest.mark.anyio
async def test_a_clients_disconnect_ends_a_stream_whose_writer_is_still_open() -> None:
    """The SDK's writer waits for its request's answer; the client's ``http.disconnect``
    ends the response at once (as sse_starlette's watcher does), the writer with it."""
    writer, reader = anyio.create_memory_object_stream[Any](0)
    writing = anyio.Event()
    sent: list[dict[str, Any]] = []

    async def writes() -> None:
        async with writer:
            writing.set()
            await anyio.sleep_forever()

    async def receive() -> dict[str, Any]:
        await writing.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    stream = PostEventStream(content=reader, data_sender_callable=writes,
                             headers={"Content-Type": "text/event-stream"})
    with anyio.fail_after(5):
        await stream({"type": "http", "method": "POST", "headers": []}, receive, send)
    assert sent[0]["type"] == "http.response.start"
    assert (b"content-type", b"text/event-stream") in sent[0]["headers"]
    with pytest.raises(anyio.ClosedResourceError):  # its task was cancelled and left
        writer.send_nowait({})


@pytest.mark.anyio
@pytest.mark.mcp_servers
async def test_a_quiet_call_gets_keep_alives_and_its_client_hanging_up_ends_its_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Over real HTTP: a call that sends nothing for PING_SECONDS gets a keep-alive comment
    (which also releases the SSE stream the gateway held to answer as JSON); the client
    hanging up ends the stream soon — and not the call, which MCP cancels only by
    ``notifications/cancelled`` (as with sse_starlette's stream)."""
    monkeypatch.setattr(_gateway_sse, "PING_SECONDS", 0.2)
    ended = anyio.Event()
    serve = PostEventStream.__call__

    async def served(self: PostEventStream, *args: Any) -> None:
        try:
            await serve(self, *args)
        finally:
            ended.set()

    monkeypatch.setattr(PostEventStream, "__call__", served)
    with anyio.fail_after(60):
        async with gateway_url(MemoryStore()) as (url, _sock), \
                httpx2.AsyncClient(headers=HEADERS, timeout=30) as http:
            session = await initialized(http, url)
            assert getattr(transport, SDK_NAME) is PostEventStream
            async with httpx2.AsyncClient(headers=HEADERS, timeout=30) as caller, \
                    caller.stream("POST", url, json=rpc("tools/call", 2, name="slow",
                                                       arguments={}), headers=session) as slow:
                assert slow.headers["content-type"].startswith("text/event-stream")
                pings = 0
                async for line in slow.aiter_lines():
                    pings += line == ": ping"
                    if pings == 2:
                        break
            with anyio.fail_after(5):
                await ended.wait()  # the hang-up, not the call (still running), ended it
            before = await _count(http, url, session, 3)
            await http.post(url, json=rpc("notifications/cancelled", None, requestId=2),
                            headers=session)
            after: dict[str, Any] = {}
            for request_id in range(4, 60):  # the upstream sees the cancellation soon after
                after = await _count(http, url, session, request_id)
                if after["cancelled"]:
                    break
                await anyio.sleep(0.1)
    assert pings == 2
    assert before["cancelled"] == 0 and after["cancelled"] == 1
    assert getattr(transport, SDK_NAME) is EventSourceResponse  # the gateway stopped


async def _count(http: httpx2.AsyncClient, url: str, session: dict[str, str],
                 request_id: int) -> Any:
    answer = await http.post(url, json=rpc("tools/call", request_id, name="count",
                                           arguments={}), headers=session)
    return json.loads(_answer(answer.text)["result"]["content"][0]["text"])
