"""A real server for browser tests: uvicorn on 127.0.0.1 in a thread, Chromium from Debian."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import uvicorn

from anfitrion import Host, RunResult
from anfitrion.approvals import ApprovalAnswer, ApprovalRequest
from anfitrion.store import MemoryStore
from anfitrion.web import create_app

from .inbox_support import TOKEN

T = TypeVar("T")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@dataclass
class Resumer:
    """Resumes the host's session once its approvals are answered, as a deployment would."""

    host: Host | None = None
    results: list[RunResult] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    async def __call__(self, request: ApprovalRequest, answer: ApprovalAnswer) -> None:
        assert self.host is not None
        self.results.append(await self.host.resume(request.session_id))
        self.done.set()


def off_loop(function: Callable[[], T]) -> T:
    """Call *function* in a fresh thread: Playwright's sync API keeps a loop in this one."""
    box: list[T] = []
    thread = threading.Thread(target=lambda: box.append(function()))
    thread.start()
    thread.join(timeout=60)
    assert box, "the call did not finish"
    return box[0]


@contextmanager
def serve(store: MemoryStore, resumer: Resumer) -> Iterator[str]:
    """Serve the inbox on a free loopback port; yield its base URL."""
    app = create_app(store, token=TOKEN, on_answer=resumer)
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
