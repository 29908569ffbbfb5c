"""The SSE stream of one POST, answered with two tasks instead of five.

The MCP SDK's streamable HTTP transport answers each request of a stateful session with
``sse_starlette.EventSourceResponse(content=…, data_sender_callable=…, headers=…)``. That
response runs five tasks per request — the stream, a keep-alive pinger, a watcher of the
server's exit, the SDK's writer, a watcher of the client's disconnect — each wrapped to cancel
the others when it ends. A relayed call is one short exchange, and the gateway spent about
as much CPU on that scaffolding as on its own policy stage (docs/performance.md, issue 31).

:class:`PostEventStream` is what the transport builds instead while a gateway serves
(:func:`lean_post_streams`): for a POST it runs the SDK's writer and a watcher of the client's
disconnect as tasks and streams the events in the request's own task, sending a keep-alive
comment after :data:`PING_SECONDS` without an event (as ``sse_starlette`` does, every 15 s);
the events are encoded by ``sse_starlette`` itself, so the bytes are the same. Any other
request (the standalone ``GET`` stream, a replay) and any option it does not know go to
``EventSourceResponse`` unchanged. What it leaves out: the watcher of the server's exit,
which ends a stream mid-call when uvicorn stops — a POST's stream ends with its answer, and
the gateway's drain answers the calls that wait for a person first (docs/scaling.md,
*Graceful shutdown*).

The SDK has no hook for the response it builds, so the substitution is of the name
``EventSourceResponse`` in ``mcp.server.streamable_http``, counted: made when the first
gateway starts serving HTTP in the process, undone when the last one stops. A test checks
that the SDK still looks the name up when it answers a POST (an SDK that stops doing so
loses the saving, never the stream).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from sse_starlette import EventSourceResponse
from sse_starlette.event import ensure_bytes

__all__ = ["PING_SECONDS", "SDK_NAME", "PostEventStream", "lean_post_streams"]

SDK_NAME = "EventSourceResponse"
"""The name in ``mcp.server.streamable_http`` the transport builds a POST's stream with."""

PING_SECONDS = 15.0
"""A keep-alive comment after this long without an event (``sse_starlette``'s default)."""

_SEPARATOR = "\r\n"  # sse_starlette's default line separator
_PING = b": ping" + _SEPARATOR.encode() * 2

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class PostEventStream:
    """``EventSourceResponse``'s constructor, served lean for a POST (the module docstring)."""

    def __init__(self, content: MemoryObjectReceiveStream[Any],
                 data_sender_callable: Callable[[], Coroutine[Any, Any, None]] | None = None,
                 headers: Mapping[str, str] | None = None, **options: Any) -> None:
        self._content = content
        self._sender = data_sender_callable
        self._headers = dict(headers or {})
        self._options = options

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._options or scope.get("type") != "http" or scope.get("method") != "POST" \
                or not isinstance(self._content, MemoryObjectReceiveStream):
            sdk = EventSourceResponse(content=self._content,
                                      data_sender_callable=self._sender,
                                      headers=self._headers, **self._options)
            await sdk(scope, receive, send)  # type: ignore[arg-type]
            return
        headers = [(name.lower().encode("latin-1"), value.encode("latin-1"))
                   for name, value in self._headers.items()]
        headers.append((b"x-accel-buffering", b"no"))
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_cancel_on_disconnect, receive, tasks.cancel_scope)
            if self._sender is not None:
                tasks.start_soon(self._sender)
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await _stream(self._content, send)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tasks.cancel_scope.cancel()  # the disconnect watcher; the writer has ended


async def _stream(content: MemoryObjectReceiveStream[Any], send: Send) -> None:
    """Each event of *content* as SSE, a keep-alive comment in each quiet
    :data:`PING_SECONDS`, until the writer closes it."""
    async with content:
        while True:
            with anyio.move_on_after(PING_SECONDS) as quiet:
                try:
                    event = await content.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    return
            if quiet.cancelled_caught:
                await send({"type": "http.response.body", "body": _PING, "more_body": True})
                continue
            await send({"type": "http.response.body", "body": ensure_bytes(event, _SEPARATOR),
                        "more_body": True})


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


_lock = threading.Lock()
_serving = 0
_original: Any = None


@contextmanager
def lean_post_streams() -> Iterator[None]:
    """While inside: the SDK's transport answers a POST with :class:`PostEventStream`
    (counted across the process's gateways; the name is restored when the last one leaves)."""
    global _serving, _original
    import mcp.server.streamable_http as transport

    with _lock:
        if _serving == 0:
            _original = getattr(transport, SDK_NAME)
            setattr(transport, SDK_NAME, PostEventStream)
        _serving += 1
    try:
        yield
    finally:
        with _lock:
            _serving -= 1
            if _serving == 0:
                setattr(transport, SDK_NAME, _original)
                _original = None
