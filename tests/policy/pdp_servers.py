"""Decision points for the tests, on loopback: OPA's Data API over a real Rego engine, and a
small AuthZEN evaluation server whose behaviour a test chooses (answer, hang, garbage ...).

The Rego engine is ``opa_eval`` (PyPI), Microsoft's regorus interpreter: no ``opa`` server
binary can be installed from the registries this project uses (npm's
``@open-policy-agent/opa`` is a client, the wasm SDKs need a policy compiled by the ``opa``
binary), so the tests put the in-process engine behind OPA's Data API, as OPA serves it:
``POST /v1/data/<path>`` with ``{"input": …}`` answers ``{"result": …}``, or ``{}`` when the
document is undefined.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Answer = Callable[[dict[str, Any]], tuple[int, bytes]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"null")
        self.server.seen.append({"path": self.path, "body": body,
                                 "headers": {k.lower(): v for k, v in self.headers.items()}})
        if self.server.drip is not None:
            self._drip(self.server.drip)
            return
        status, payload = self.server.answer(self.path, body)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _drip(self, stop: threading.Event) -> None:
        """A valid start, then one byte per 50 ms until *stop* (or the client leaves): each
        read is quick, the answer never ends."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "60000")
        self.end_headers()
        try:
            self.wfile.write(b'{"decision": true, "pad": "')
            while not stop.wait(0.05):
                self.wfile.write(b"x")
                self.wfile.flush()
        except OSError:
            return

    def log_message(self, format: str, *args: Any) -> None:
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    answer: Callable[[str, Any], tuple[int, bytes]]
    seen: list[dict[str, Any]]
    drip: threading.Event | None = None


@contextmanager
def serve(answer: Callable[[str, Any], tuple[int, bytes]], *,
          drip: threading.Event | None = None) -> Iterator[tuple[str, _Server]]:
    """A server on 127.0.0.1 answering POSTs with *answer(path, body)* (or, given *drip*,
    dripping an answer until it is set); its base URL."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.answer, server.seen, server.drip = answer, [], drip
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def opa_answer(rego: Path) -> Callable[[str, Any], tuple[int, bytes]]:
    """OPA's Data API over *rego*, evaluated by the regorus engine (``opa_eval``)."""
    import opa_eval

    def answer(path: str, body: Any) -> tuple[int, bytes]:
        if not path.startswith("/v1/data/") or not isinstance(body, dict):
            return 404, b'{"code": "not_found"}'
        query = "data." + ".".join(p for p in path[len("/v1/data/"):].split("/") if p)
        try:
            engine = opa_eval.OpaEval(str(rego), query=query)
            result = engine.evaluate(json.dumps(body.get("input")))
        except RuntimeError as exc:
            if "not a valid rule path" in str(exc):
                return 200, b"{}"  # OPA: an undefined document has no result
            return 500, json.dumps({"code": "internal_error", "message": str(exc)}).encode()
        return 200, b'{"result": ' + result.encode() + b"}"

    return answer
