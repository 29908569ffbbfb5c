"""Strict checking of the bodies POSTed to the gateway's streamable HTTP endpoint.

The MCP SDK parses a body with ``json.loads`` and catches only ``JSONDecodeError``: invalid
UTF-8, an integer of 5,000 digits or 100,000 nested arrays raise something else and the SDK
answers 500. It also accepts what a strict peer must not: a byte-order mark, UTF-16 bodies,
``NaN``, duplicate keys (which one wins?), lone surrogates. And it answers a method it does
not know with -32602 (invalid params), because its request union fails to validate.

:func:`check_body` runs before the SDK sees the body, without I/O:

- a body that is not strict JSON (:func:`anfitrion._json.parse_json_strict`: UTF-8 only, no
  BOM, no duplicate keys, no ``NaN``/``Infinity``, finite numbers, no unpaired surrogates,
  nesting at most :data:`MAX_BODY_DEPTH`) → -32700 *parse error*, HTTP 400;
- JSON that is not one JSON-RPC 2.0 message (a batch, a non-object, a wrong ``jsonrpc``, a
  bad ``id``, ``method`` or ``params``) → -32600 *invalid request*, HTTP 400. The streamable
  HTTP transport says a server that cannot accept the input answers an HTTP error status
  with a JSON-RPC error that has no id; batches were removed from MCP in 2025-06-18 and the
  SDK does not accept them;
- a request whose method is not an MCP client request (:data:`MCP_REQUEST_METHODS`) nor one
  of an extension the gateway serves (:data:`EXTENSION_REQUEST_METHODS`) → -32601
  *method not found*, answered to that request's id as an ``application/json`` response, as
  the transport answers any request; an MCP client sees it as the request's error.

Notifications and responses the client sends pass on to the SDK, which drops notifications it
does not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp.types as mt
from pydantic import ValidationError

from .._json import parse_json_strict
from ..exceptions import JsonError

__all__ = ["EXTENSION_REQUEST_METHODS", "INVALID_REQUEST", "MAX_BODY_DEPTH",
           "MCP_REQUEST_METHODS", "METHOD_NOT_FOUND", "PARSE_ERROR", "BodyRefusal", "check_body",
           "read_body", "send_refusal"]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601

MAX_BODY_DEPTH = 64
"""Nesting allowed in a body: the envelope, ``params`` and arguments nested 32 deep (what the
gate accepts for arguments) fit with room to spare."""

MCP_REQUEST_METHODS = frozenset({
    "initialize", "ping",
    "tools/list", "tools/call",
    "prompts/list", "prompts/get",
    "resources/list", "resources/templates/list", "resources/read",
    "resources/subscribe", "resources/unsubscribe",
    "completion/complete", "logging/setLevel",
    "server/discover", "subscriptions/listen",
})
"""Every request method an MCP client may send (the SDK's ``ClientRequest``; a test keeps them
equal). Methods the gateway does not serve among them get -32601 from the SDK itself."""

EXTENSION_REQUEST_METHODS = frozenset({"tasks/get", "tasks/cancel", "tasks/update"})
"""Request methods of the extensions the gateway serves (the Tasks extension, SEP-2663)."""


@dataclass(frozen=True, slots=True)
class BodyRefusal:
    """Why a body is refused: the HTTP status and the JSON-RPC error to answer with."""

    status: int
    code: int
    message: str
    id: str | int | None = None

    def payload(self) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": self.id,
                           "error": {"code": self.code, "message": self.message}},
                          ensure_ascii=True).encode("ascii")


def _invalid(message: str) -> BodyRefusal:
    return BodyRefusal(400, INVALID_REQUEST, f"Invalid request: {message}")


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or _is_integer(value)


def check_body(body: bytes, *, max_bytes: int) -> BodyRefusal | None:
    """The refusal for a POSTed *body*, or ``None`` when the SDK may have it.

    Example:
        >>> check_body(b'[]', max_bytes=1024).code
        -32600
    """
    return read_body(body, max_bytes=max_bytes)[1]


def read_body(body: bytes, *, max_bytes: int) -> tuple[Any, BodyRefusal | None]:
    """The message a POSTed *body* holds (``None`` when it is no JSON) and its refusal, or
    ``None`` when the SDK may have it (:func:`check_body`)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, BodyRefusal(400, PARSE_ERROR,
                                 f"Parse error: the body is not valid UTF-8 (byte {exc.start})")
    try:
        message = parse_json_strict(text, max_bytes=max_bytes, max_depth=MAX_BODY_DEPTH)
    except JsonError as exc:
        return None, BodyRefusal(400, PARSE_ERROR, f"Parse error: {exc}")
    return message, _envelope_problem(message) or _sdk_problem(message)


def _envelope_problem(message: Any) -> BodyRefusal | None:
    if isinstance(message, list):
        return _invalid("batches are not supported: send one JSON-RPC message per request")
    if not isinstance(message, dict):
        return _invalid("the body must be one JSON-RPC message (an object)")
    if message.get("jsonrpc") != "2.0":
        return _invalid('"jsonrpc" must be "2.0"')
    if "id" in message and not _is_id(message["id"]):
        return _invalid('"id" must be a string or an integer')
    if "method" in message:
        method = message["method"]
        if not isinstance(method, str):
            return _invalid('"method" must be a string')
        if "result" in message or "error" in message:
            return _invalid('a message with "method" has no "result" or "error"')
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return _invalid('"params" must be an object')
        if "id" in message and method not in MCP_REQUEST_METHODS | EXTENSION_REQUEST_METHODS:
            return BodyRefusal(200, METHOD_NOT_FOUND,
                               f"Method not found: {method[:100]!r} is not an MCP request",
                               message["id"])
        return None
    if "id" not in message:
        return _invalid('a message needs "method" (a request or notification) or "id" '
                        '(a response)')
    if ("result" in message) == ("error" in message):
        return _invalid('a response has exactly one of "result" and "error"')
    if "result" in message and not isinstance(message["result"], dict):
        return _invalid('"result" must be an object')
    error = message.get("error")
    if "error" in message and not (isinstance(error, dict) and _is_integer(error.get("code"))
                                   and isinstance(error.get("message"), str)):
        return _invalid('"error" must be an object with an integer "code" and a "message"')
    return None


def _sdk_problem(message: Any) -> BodyRefusal | None:
    """What the SDK would refuse with -32602 (its message union), refused as -32600."""
    try:
        mt.jsonrpc_message_adapter.validate_python(message, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "the message"
        return _invalid(f"{where}: {first['msg']}")
    return None


async def send_refusal(send: Any, refusal: BodyRefusal) -> None:
    """Answer an ASGI request with *refusal*."""
    body = refusal.payload()
    await send({"type": "http.response.start", "status": refusal.status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
