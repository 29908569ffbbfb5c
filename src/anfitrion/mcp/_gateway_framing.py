"""A request's answer framed as JSON when nothing else goes to the client before it.

The MCP SDK's streamable HTTP transport answers every request of a stateful session with an
SSE stream (``text/event-stream``): its headers at once, then the request's notifications and
server requests (progress, log messages, elicitation, sampling, list changes), then its
response. The transport's other framing — one ``application/json`` body with the response —
has no wire for anything else, so the SDK drops what a call relays meanwhile; the gateway
cannot use it for every request.

Most calls relay nothing before their result, and then the SSE stream costs what the answer
does not need: the official client reads the stream up to the response and closes it, so
the connection cannot be reused (a TCP connection per call, on both sides). So the gateway
decides per request, when the first message of the answer is known: :func:`lone_answer_as_json`
holds the SSE stream's headers until the first event; if that event is the request's own
response, the client gets it as the ``application/json`` body the SDK's JSON framing would
have sent (the same bytes, ``Content-Length``, the connection kept); anything else (a
notification, a server request, a keep-alive comment, the stream's end) releases the held
headers and the SSE stream goes on as the SDK sends it. Both framings are the transport's own
and clients must accept either; the messages and their order do not change.

The headers are held until the first event or the SDK's first keep-alive comment (15 s), so
no silence the client waits through is longer than the SSE stream's own. A stream that is
meant to stay open (``subscriptions/listen``) is never held.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["STREAMED_METHODS", "lone_answer_as_json"]

Send = Callable[[dict[str, Any]], Awaitable[None]]

STREAMED_METHODS = frozenset({"subscriptions/listen"})
"""Requests answered by a stream that stays open: framed as the SDK frames them."""

_EVENT_STREAM = b"text/event-stream"
_STREAM_HEADERS = frozenset({b"content-type", b"content-length", b"cache-control",
                             b"connection", b"x-accel-buffering", b"transfer-encoding"})
"""The SSE stream's own headers, not carried over to a JSON answer."""


def lone_answer_as_json(send: Send, request_id: str | int) -> Send:
    """*send*, answering the request *request_id* as one JSON body when its SSE stream's
    first event is its response (see the module docstring)."""
    held: dict[str, Any] | None = None
    decided = False

    async def framed(message: dict[str, Any]) -> None:
        nonlocal held, decided
        if decided:
            await send(message)
            return
        if message["type"] == "http.response.start" and held is None \
                and _is_event_stream(message):
            held = message  # until the first event says how to frame the answer
            return
        decided = True
        start, held = held, None
        if start is None:
            await send(message)
            return
        answer = _lone_answer(message, request_id)
        if answer is None:
            await send(start)
            await send(message)
            return
        headers = [(k, v) for k, v in start.get("headers", [])
                   if k.lower() not in _STREAM_HEADERS]
        headers += [(b"content-type", b"application/json"),
                    (b"content-length", str(len(answer)).encode("ascii"))]
        await send({"type": "http.response.start", "status": start["status"],
                    "headers": headers})
        await send({"type": "http.response.body", "body": answer, "more_body": False})

    return framed


def _is_event_stream(start: dict[str, Any]) -> bool:
    return any(k.lower() == b"content-type" and v.lower().startswith(_EVENT_STREAM)
               for k, v in start.get("headers", []))


def _lone_answer(message: dict[str, Any], request_id: str | int) -> bytes | None:
    """The JSON-RPC response in *message* when it is one SSE event carrying the response to
    *request_id* (``event: message`` and one ``data:`` line), else ``None``."""
    if message["type"] != "http.response.body":
        return None
    body: bytes = message.get("body", b"")
    sep = b"\r\n" if body.endswith(b"\r\n\r\n") else b"\n"
    lines = body.split(sep)
    if len(lines) != 4 or lines[0] != b"event: message" or lines[2] or lines[3] \
            or not lines[1].startswith(b"data: "):
        return None
    data = lines[1][6:]
    try:
        answer = json.loads(data)
    except ValueError:
        return None
    if not isinstance(answer, dict) or "method" in answer \
            or ("result" in answer) == ("error" in answer):
        return None
    found = answer.get("id")
    if type(found) is not type(request_id) or found != request_id:
        return None
    return data
