"""The gateway's HTTP endpoint parses every body strictly before the MCP SDK sees it.

The SDK catches only ``JSONDecodeError``: invalid UTF-8, a 5,000-digit integer or 100,000
nested arrays made it answer 500 (and hand the error to the session). Every hostile body of
the family below must get a 4xx JSON-RPC error (-32700 or -32600, no id) — never a 500 — and
the same MCP session must go on serving afterwards. Run against the real gateway on uvicorn,
with the real SDK client.
"""

from __future__ import annotations

import json
import socket
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("mcp")
import httpx
import httpx2
import mcp.types as mt
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._http_body import EXTENSION_REQUEST_METHODS, MCP_REQUEST_METHODS, check_body
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import MemoryStore

pytestmark = pytest.mark.anyio

TOKEN = "test-token-0123456789abcdef"
PING = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'


def _deep(opening: str, closing: str, depth: int, inner: str = "1") -> bytes:
    return f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' \
           f'{{"name": "x", "arguments": {{"a": {opening * depth}{inner}{closing * depth}}}}}}}' \
        .encode()


def _invalid_utf8_at(position: int, bad: bytes = b"\xff") -> bytes:
    return PING[:position] + bad + PING[position:]


PARSE_ERRORS: dict[str, bytes] = {
    **{f"invalid UTF-8 at byte {i}": _invalid_utf8_at(i) for i in (0, 1, 20, len(PING) - 1,
                                                                   len(PING))},
    "invalid UTF-8 inside a string": PING.replace(b"ping", b"pi\xc3ng"),
    "an overlong UTF-8 encoding": PING.replace(b"ping", b"\xc0\xafping"),
    "a surrogate encoded in UTF-8": PING.replace(b"ping", b"p\xed\xa0\x80ing"),
    "a truncated multibyte sequence at the end": PING + b"\xe2\x82",
    "a UTF-8 byte-order mark": b"\xef\xbb\xbf" + PING,
    "UTF-16": PING.decode().encode("utf-16"),
    "UTF-32 without a BOM": PING.decode().encode("utf-32-le"),
    "a 5,000-digit id": PING.replace(b'"id": 1', b'"id": ' + b"9" * 5000),
    "a 5,000-digit negative integer in params":
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"n": -' + b"1" * 5000 + b"}}",
    "a float that overflows": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", '
                              b'"params": {"x": 1e999}}',
    "a negative float that overflows": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", '
                                       b'"params": {"x": -1e400}}',
    "100,000 nested arrays": b"[" * 100_000 + b"]" * 100_000,
    "100,000 nested objects": b'{"a": ' * 100_000 + b"1" + b"}" * 100_000,
    "deep arrays inside arguments": _deep("[", "]", 10_000),
    "deep objects inside arguments": _deep('{"b": ', "}", 10_000),
    "nesting one level past the limit": _deep("[", "]", 62),
    "a duplicate method": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", '
                          b'"method": "tools/call"}',
    "a duplicate key inside params": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
                                     b'"params": {"name": "a", "name": "b"}}',
    "NaN": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": NaN}}',
    "Infinity": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": Infinity}}',
    "-Infinity": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": -Infinity}}',
    "an escaped lone high surrogate": b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}',
    "an escaped lone low surrogate in a key": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", '
                                              b'"params": {"\\udfff": 1}}',
    "an empty body": b"",
    "whitespace only": b" \r\n\t ",
    "trailing garbage": PING + b"x",
    "two messages back to back": PING + PING,
    "truncated JSON": PING[:-5],
    "a single quote string": b"{'jsonrpc': '2.0'}",
}

INVALID_REQUESTS: dict[str, bytes] = {
    "an empty batch": b"[]",
    "a batch of valid requests": b"[" + PING + b", " + PING.replace(b"1", b"2") + b"]",
    "a number": b"1",
    "a string": b'"ping"',
    "null": b"null",
    "true": b"true",
    "jsonrpc 1.0": PING.replace(b'"2.0"', b'"1.0"'),
    "jsonrpc as a number": PING.replace(b'"2.0"', b"2.0"),
    "no jsonrpc": b'{"id": 1, "method": "ping"}',
    "an id that is true": PING.replace(b'"id": 1', b'"id": true'),
    "an id that is null": PING.replace(b'"id": 1', b'"id": null'),
    "an id that is a float": PING.replace(b'"id": 1', b'"id": 1.5'),
    "an id that is an object": PING.replace(b'"id": 1', b'"id": {}'),
    "a method that is a number": b'{"jsonrpc": "2.0", "id": 1, "method": 7}',
    "params that are an array": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}',
    "a request with a result": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "result": {}}',
    "neither method nor id": b'{"jsonrpc": "2.0"}',
    "a response without result or error": b'{"jsonrpc": "2.0", "id": 1}',
    "a response with both result and error":
        b'{"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "m"}}',
    "a response whose result is a list": b'{"jsonrpc": "2.0", "id": 1, "result": []}',
    "an error with a string code": b'{"jsonrpc": "2.0", "id": 1, '
                                   b'"error": {"code": "1", "message": "m"}}',
}


@asynccontextmanager
async def gateway_url() -> AsyncIterator[str]:
    store = MemoryStore()
    async with McpServers([], store) as servers:
        gateway = Gateway(servers, store=store)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        ready = anyio.Event()
        ports: list[int] = []

        def started(port: int) -> None:
            ports.append(port)
            ready.set()

        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(gateway.serve_http, token=TOKEN, sock=sock, started=started,
                                  stop=stop, max_body_bytes=1024 * 1024))
            await ready.wait()
            try:
                yield f"http://127.0.0.1:{ports[0]}/mcp"
            finally:
                stop.set()


@asynccontextmanager
async def sdk_session(url: str) -> AsyncIterator[tuple[ClientSession, str]]:
    sids: list[str] = []

    async def keep_sid(response: httpx2.Response) -> None:
        if sid := response.headers.get("mcp-session-id"):
            sids.append(sid)

    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300),
                                  headers={"Authorization": f"Bearer {TOKEN}"},
                                  event_hooks={"response": [keep_sid]}) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        assert sids
        sid = sids[0]
        yield session, sid


async def _post(http: httpx.AsyncClient, url: str, body: bytes,
                session_id: str) -> httpx.Response:
    return await http.post(url, content=body, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "Mcp-Session-Id": session_id,
        "MCP-Protocol-Version": mt.LATEST_PROTOCOL_VERSION})


async def test_every_hostile_body_gets_a_4xx_json_rpc_error_and_the_session_goes_on() -> None:
    wrong: dict[str, str] = {}
    with anyio.fail_after(120):
        async with gateway_url() as url, sdk_session(url) as (session, sid), \
                httpx.AsyncClient() as http:
            for family, expected in ((PARSE_ERRORS, -32700), (INVALID_REQUESTS, -32600)):
                for name, body in family.items():
                    response = await _post(http, url, body, sid)
                    try:
                        answer = response.json()
                    except ValueError:
                        answer = None
                    error = answer.get("error") if isinstance(answer, dict) else None
                    if (response.status_code != 400
                            or response.headers["content-type"] != "application/json"
                            or not isinstance(error, dict) or error.get("code") != expected
                            or answer.get("id") is not None):
                        wrong[name] = f"{response.status_code} {response.text[:200]}"
            # the very same session still works, and so does a new one
            assert (await session.list_tools()).tools == []
            await session.send_ping()
            async with sdk_session(url) as (again, _):
                assert (await again.list_tools()).tools == []
    assert wrong == {}


async def test_an_unknown_method_is_method_not_found_not_invalid_params() -> None:
    """The SDK answers -32602 for a method outside its request union; the guard answers
    -32601 to the request's id. A known MCP method the gateway does not serve (``tasks/list``)
    is -32601 too (from the SDK), so a client sees one answer for both."""
    with anyio.fail_after(60):
        async with gateway_url() as url, sdk_session(url) as (session, sid), \
                httpx.AsyncClient() as http:
            for method, request_id in (("tools/destroy", 7), ("rpc.discover", "a"),
                                       ("", 0), ("x" * 10_000, 8)):
                response = await _post(http, url, json.dumps(
                    {"jsonrpc": "2.0", "id": request_id, "method": method}).encode(), sid)
                assert response.status_code == 200
                assert response.headers["content-type"] == "application/json"
                answer = response.json()
                assert answer["id"] == request_id
                assert answer["error"]["code"] == -32601
                assert len(answer["error"]["message"]) < 200
            # tasks are not forwarded (the 2.x SDK has no task requests): -32601
            response = await _post(http, url, b'{"jsonrpc": "2.0", "id": 10, '
                                              b'"method": "tasks/list"}', sid)
            assert '"code":-32601' in response.text.replace(" ", "")
            # a known method with bad params stays invalid params, from the SDK
            response = await _post(http, url, b'{"jsonrpc": "2.0", "id": 9, '
                                              b'"method": "tools/call", "params": {}}', sid)
            assert "-32602" in response.text
            assert (await session.list_tools()).tools == []


def test_the_method_list_is_the_sdks_client_requests() -> None:
    sdk = {method for model in typing.get_args(mt.ClientRequest)
           for method in typing.get_args(model.model_fields["method"].annotation)}
    assert sdk == MCP_REQUEST_METHODS


def test_valid_messages_of_every_kind_pass_the_check() -> None:
    for body in (PING,
                 b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
                 b'{"jsonrpc": "2.0", "method": "notifications/unknown", "params": {}}',
                 b'{"jsonrpc": "2.0", "id": "s1", "result": {}}',
                 b'{"jsonrpc": "2.0", "id": 3, "error": {"code": -1, "message": "no"}}',
                 _deep("[", "]", 58),
                 '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"t": "ä\U0001f600"}}'
                 .encode()):
        assert check_body(body, max_bytes=1024 * 1024) is None, body[:80]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)


@given(st.binary(max_size=400))
def test_any_bytes_get_an_answer_never_an_exception(body: bytes) -> None:
    refusal = check_body(body, max_bytes=1024)
    assert refusal is None or (refusal.status in (200, 400)
                               and refusal.code in (-32700, -32600, -32601))


_MESSAGES = st.fixed_dictionaries({}, optional={
    "jsonrpc": st.sampled_from(["2.0", "1.0", 2.0, None, ""]),
    "id": st.one_of(st.integers(), st.text(max_size=5), st.none(), st.booleans(), st.floats()),
    "method": st.one_of(st.sampled_from(sorted(MCP_REQUEST_METHODS)), st.text(max_size=12),
                        st.integers()),
    "params": _JSON, "result": _JSON, "error": _JSON,
})


@given(st.one_of(_JSON, _MESSAGES, st.lists(_MESSAGES, max_size=3)))
def test_what_passes_the_check_is_one_message_the_sdk_accepts_with_an_mcp_method(
        value: object) -> None:
    body = json.dumps(value).encode()  # may hold NaN or Infinity: refused as a parse error
    refusal = check_body(body, max_bytes=1 << 20)
    if refusal is None:
        message = mt.jsonrpc_message_adapter.validate_python(value, by_name=False)
        if isinstance(message, mt.JSONRPCRequest):
            assert message.method in MCP_REQUEST_METHODS | EXTENSION_REQUEST_METHODS
    else:
        assert json.loads(refusal.payload())["error"]["code"] == refusal.code
