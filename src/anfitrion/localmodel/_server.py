"""An OpenAI-compatible Chat Completions endpoint on 127.0.0.1, served from a thread.

Standard library only (``http.server``): the ``local`` extra needs nothing but llama-cpp-python.
One model, one generation at a time (llama.cpp contexts are not thread-safe), one thread
(``n_threads=1``: on a shared 2-core machine two threads dropped generation from ≈ 140 to
1–10 tokens/s).

The endpoint listens on loopback only and wants a bearer key (random per server unless given),
and it refuses requests whose ``Host`` header is not this address, so a web page in a browser
cannot drive it through DNS rebinding.

Example:
    >>> with LocalServer(find_model_file("smollm2")) as server:          # doctest: +SKIP
    ...     client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key)
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ._chatml import RequestError
from ._grammar import ArgumentMode
from ._handler import ToolCallingHandler

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["LocalServer"]

log = logging.getLogger("anfitrion.localmodel")

MAX_BODY_BYTES = 8 * 1024 * 1024


class LocalServer:
    """A local model behind ``POST /v1/chat/completions`` and ``GET /v1/models``.

    Args:
        model_path: the GGUF file.
        model_name: the id the endpoint reports and accepts.
        port: 0 picks a free port.
        api_key: the bearer key clients must send; random when omitted.
        n_ctx: context size in tokens.
        n_threads: CPU threads for llama.cpp (keep 1 on small shared machines).
        arguments: ``schema`` or ``json``, see :class:`ToolCallingHandler`.
        after_tool_result: ``text`` or ``auto``, see :class:`ToolCallingHandler`.

    Raises (from :meth:`start`):
        OSError: the port cannot be bound.
        ValueError: llama.cpp cannot load the file.
    """

    def __init__(self, model_path: Path | str, *, model_name: str = "smollm2", port: int = 0,
                 api_key: str | None = None, n_ctx: int = 4096, n_threads: int = 1,
                 arguments: ArgumentMode = "schema",
                 after_tool_result: Literal["text", "auto"] = "text") -> None:
        self.model_path = Path(model_path)
        self.model_name = model_name
        self.api_key = api_key or secrets.token_urlsafe(24)
        self._port = port
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._closing = threading.Event()
        self._busy = threading.Lock()
        self.handler = ToolCallingHandler(arguments=arguments,
                                          after_tool_result=after_tool_result,
                                          should_stop=self._closing.is_set)
        self._llama: Llama | None = None
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client: ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> LocalServer:
        """Load the model, bind the port and serve from a daemon thread."""
        if self._httpd is not None:
            return self
        from llama_cpp import Llama

        started = time.perf_counter()
        self._llama = Llama(model_path=str(self.model_path), n_ctx=self._n_ctx,
                            n_threads=self._n_threads, n_threads_batch=self._n_threads,
                            verbose=False)
        log.info("loaded %s in %.1f s", self.model_path.name, time.perf_counter() - started)
        try:
            self._httpd = _HTTPServer(("127.0.0.1", self._port), self)
        except OSError:
            self._llama.close()
            self._llama = None
            raise
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name=f"anfitrion-local-{self.port}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, end a generation in progress, and free the model. Idempotent."""
        self._closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        with self._busy:  # a request thread may still be generating: wait for it to stop
            if self._llama is not None:
                self._llama.close()
        self._httpd = self._thread = self._llama = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- what the request threads call -------------------------------------------------------

    def authorized(self, header: str | None) -> bool:
        expected = f"Bearer {self.api_key}"
        return header is not None and hmac.compare_digest(header.encode(), expected.encode())

    def allowed_host(self, header: str | None) -> bool:
        return header in (f"127.0.0.1:{self.port}", f"localhost:{self.port}")

    def complete(self, body: dict[str, Any]) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """Run the handler; the caller holds :attr:`busy` while it consumes the result."""
        if self._llama is None or self._closing.is_set():
            raise RequestError("the server is shutting down", code="unavailable")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise RequestError(f"this server serves {self.model_name!r}, not {model!r}",
                               param="model", code="model_not_found")
        params = {k: v for k, v in body.items() if k not in ("model", "messages", "tools",
                                                             "tool_choice", "stream")}
        return self.handler(llama=self._llama, messages=body.get("messages"),
                            tools=body.get("tools"), tool_choice=body.get("tool_choice"),
                            stream=bool(body.get("stream")), model=self.model_name, **params)

    @property
    def busy(self) -> threading.Lock:
        return self._busy


def _error(message: str, code: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}


class _HTTPServer(ThreadingHTTPServer):
    """The HTTP server of one :class:`LocalServer`, which its request handlers serve."""

    def __init__(self, address: tuple[str, int], local: LocalServer) -> None:
        self.local = local
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    """One request: ``GET /v1/models`` or ``POST /v1/chat/completions``, Host and key checked."""

    server_version = "anfitrion-local"
    protocol_version = "HTTP/1.0"  # one request per connection: the stream ends at close

    @property
    def local(self) -> LocalServer:
        assert isinstance(self.server, _HTTPServer)
        return self.server.local

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _guard(self) -> bool:
        if not self.local.allowed_host(self.headers.get("Host")):
            self._send_json(HTTPStatus.FORBIDDEN, _error("unexpected Host header", "forbidden"))
            return False
        if not self.local.authorized(self.headers.get("Authorization")):
            self._send_json(HTTPStatus.UNAUTHORIZED, _error("a valid bearer key is needed",
                                                            "invalid_api_key"))
            return False
        return True

    def do_GET(self) -> None:
        if not self._guard():
            return
        if self.path.rstrip("/") != "/v1/models":
            self._send_json(HTTPStatus.NOT_FOUND, _error("no such endpoint", "not_found"))
            return
        self._send_json(HTTPStatus.OK, {"object": "list", "data": [
            {"id": self.local.model_name, "object": "model", "created": 0,
             "owned_by": "local"}]})

    def do_POST(self) -> None:
        if not self._guard():
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(HTTPStatus.NOT_FOUND, _error("no such endpoint", "not_found"))
            return
        body = self._json_body()
        if body is None:
            return
        with self.local.busy:
            try:
                result = self.local.complete(body)
                if isinstance(result, dict):
                    self._send_json(HTTPStatus.OK, result)
                else:
                    self._stream(result)
            except RequestError as exc:
                status = (HTTPStatus.SERVICE_UNAVAILABLE if exc.code == "unavailable"
                          else HTTPStatus.BAD_REQUEST)
                self._send_json(status, _error(str(exc), exc.code, exc.param))

    def _json_body(self) -> dict[str, Any] | None:
        """The request's JSON object; None when it is refused (the 400 is sent)."""
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY_BYTES:
            self._send_json(HTTPStatus.BAD_REQUEST,
                            _error(f"a JSON body of 1 to {MAX_BODY_BYTES} bytes is needed",
                                   "invalid_body"))
            return None
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError as exc:
            self._send_json(HTTPStatus.BAD_REQUEST, _error(f"invalid JSON: {exc}",
                                                           "invalid_body"))
            return None
        if not isinstance(body, dict):
            self._send_json(HTTPStatus.BAD_REQUEST, _error("the body must be an object",
                                                           "invalid_body"))
            return None
        return body

    def _stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        first = next(chunks)  # request errors surface here, before any header is sent
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        try:
            self.wfile.write(f"data: {json.dumps(first)}\n\n".encode())
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
                                 .encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            log.debug("the client went away during a stream")
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
