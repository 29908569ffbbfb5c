"""A real HTTP receiver on 127.0.0.1 (uvicorn in a thread) standing in for a chat bridge."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Answers each delivery with the next of *statuses* (then 200), recording what came."""

    statuses: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    url: str = ""

    async def endpoint(self, request: Request) -> Response:
        self.received.append(Received(dict(request.headers), await request.body()))
        status = self.statuses.pop(0) if self.statuses else 200
        return Response("ok" if status < 300 else "no", status_code=status)


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Serve an ASGI app on a free loopback port; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn accepts: no start-up race
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def receiver(statuses: list[int] | None = None) -> Iterator[Receiver]:
    found = Receiver(list(statuses or []))
    app = Starlette(routes=[Route("/hook", found.endpoint, methods=["POST"])])
    with serve_app(app) as base:
        found.url = f"{base}/hook"
        yield found


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port
