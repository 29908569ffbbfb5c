"""A client that goes away mid-request — mid-body, or before the answer — leaves no traceback
and no "Unexpected ASGI message" in the server's log, changes nothing, and the server goes on
serving. Real uvicorn servers and raw sockets: the inbox (form and JSON API), the gateway's
HTTP endpoint (its guard and the MCP SDK behind it).

An attacker who read the code: declares a long body and sends a few bytes, sends a whole JSON
message under a longer ``Content-Length``, drops during a chunked body, and repeats it to fill
the operator's log with tracebacks.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
import uvicorn

from anfitrion.store import MemoryStore
from anfitrion.web import create_app

pytest.importorskip("mcp")
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._gateway_http import HttpGuard
from anfitrion.mcp._toolset import McpServers

TOKEN = "drop-token-0123456789abcdef"
INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "x", "version": "1"}}}).encode()


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def noise(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()}" for r in self.records
                if r.levelno >= logging.WARNING or r.exc_info]


@contextmanager
def logged() -> Iterator[Records]:
    records = Records()
    names = ("", "uvicorn", "uvicorn.error", "anfitrion")
    for name in names:
        logging.getLogger(name).addHandler(records)
    try:
        yield records
    finally:
        for name in names:
            logging.getLogger(name).removeHandler(records)


@contextmanager
def served(app: Any) -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_config=None,
                                           access_log=False))
    thread = threading.Thread(target=lambda: anyio.run(
        lambda: server.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def drop(port: int, path: str, body: bytes, *, declared: int | None = None,
         host: str = "127.0.0.1", extra: str = "") -> None:
    """Send the head and *body*, then vanish."""
    length = (f"Content-Length: {declared}\r\n" if declared is not None
              else "Transfer-Encoding: chunked\r\n")
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Origin: http://{host}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\n{extra}{length}\r\n")
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(head.encode() + body)
        time.sleep(0.2)
    time.sleep(0.2)


def _get(port: int, path: str, host: str) -> int:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
                     "Connection: close\r\n\r\n".encode())
        return int(conn.recv(100).split()[1])


def test_the_inbox_logs_nothing_when_clients_drop_mid_body() -> None:
    store = MemoryStore()
    app = create_app(store, token=TOKEN, allowed_hosts=["127.0.0.1"])
    with logged() as records, served(app) as port:
        for _ in range(3):
            drop(port, "/api/v1/approvals/x/approve", b'{"dig', declared=1000)
            drop(port, "/api/v1/effects/k/resolve", b'{"outcome": "done"}', declared=5000)
            drop(port, "/api/v1/approvals/x/deny", b"5\r\n{\"dig\r\n")
            drop(port, "/login", b"token=abc", declared=400,
                 extra="Content-Type: application/x-www-form-urlencoded\r\n")
        assert _get(port, "/api/v1/approvals", "127.0.0.1") == 200
    assert records.noise() == []


def test_the_gateway_logs_nothing_when_clients_drop_mid_body() -> None:
    async def main() -> list[str]:
        store = MemoryStore()
        async with McpServers([], store) as servers:
            gateway = Gateway(servers, store=store)
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            ready, stop = anyio.Event(), anyio.Event()
            with logged() as records:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: gateway.serve_http(
                        token=TOKEN, sock=sock, stop=stop, started=lambda _: ready.set()))
                    await ready.wait()
                    host = f"127.0.0.1:{port}"
                    for _ in range(3):
                        for body, declared in ((b'{"jsonrpc"', 1000), (INIT, len(INIT) + 50),
                                               (INIT, len(INIT)), (b"9\r\n{\"jsonrpc\r\n", None)):
                            await anyio.to_thread.run_sync(
                                lambda b=body, d=declared: drop(port, "/mcp", b, declared=d,
                                                                host=host))
                    assert await anyio.to_thread.run_sync(_get, port, "/healthz", host) == 200
                    stop.set()
                return records.noise()

    assert anyio.run(main) == []


def test_an_app_answering_twice_is_cut_to_one_answer_without_a_traceback() -> None:
    async def twice(scope: Any, receive: Any, send: Any) -> None:
        for _ in range(2):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})

    guard = HttpGuard(twice, token=TOKEN, allowed_hosts={"127.0.0.1"})
    with logged() as records, served(guard) as port:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
            conn.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                         f"{TOKEN}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                         .encode() + body)
            assert conn.recv(100).startswith(b"HTTP/1.1 200")
        time.sleep(0.3)
    assert records.noise() == []
