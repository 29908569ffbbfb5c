"""Text that is not valid Unicode (lone surrogates) in a tool result cannot be encoded as UTF-8:
the audit recorder fails on it — silently dropping the record of that result — and no JSON
store or provider can carry the transcript any more. A third party who names a file or serves a
page chooses such text; these tests make sure it never reaches a result."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from anfitrion import Effect, Tool
from anfitrion.models._scripted import call
from anfitrion.toolkits import files

pytest.importorskip("httpx")

from anfitrion.toolkits import http_fetch, static_resolver


async def _recorded_types(outcome: Any) -> list[str]:
    return [r.type for r in await outcome.store.audit_records()]


def _encodable(outcome: Any) -> bool:
    try:
        outcome.run.transcript.to_json().encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@pytest.mark.anyio
async def test_a_file_name_that_is_not_utf8_is_listed_escaped_and_audited(
        hostile: Any, tmp_path: Path) -> None:
    with open(os.path.join(bytes(tmp_path), b"bill\xff\xfe.txt"), "wb") as f:
        f.write(b"x")
    outcome = await hostile(files(tmp_path), [call("list_files", {"path": "."})])
    [entry] = json.loads(outcome.result.content)["entries"]
    assert entry["name"] == "bill\\xff\\xfe.txt"
    assert "result.returned" in await _recorded_types(outcome)
    assert _encodable(outcome)


class _Charset(BaseHTTPRequestHandler):
    bodies: ClassVar[dict[str, tuple[str, bytes]]] = {
        "/utf7": ("text/plain; charset=utf-7", b"ok +2AA- ok"),
        "/escape": ("text/plain; charset=unicode_escape", b"ok \\ud800 ok"),
        "/html": ("text/html; charset=unicode_escape",
                  b"<title>\\udfff</title><p>ok \\udc00</p>"),
    }

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        ctype, body = self.bodies[self.path]
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Charset)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/utf7", "/escape", "/html"])
async def test_a_server_chosen_charset_cannot_put_lone_surrogates_in_a_result(
        hostile: Any, port: int, path: str) -> None:
    tool = http_fetch([f"app.test:{port}"], resolver=static_resolver({"app.test": ["127.0.0.1"]}),
                      allow_http_loopback=True)
    outcome = await hostile([tool], [call("fetch_url", {"url": f"http://app.test:{port}{path}"})])
    assert not outcome.result.is_error, outcome.result.content
    assert "ok" in outcome.result.content
    assert "result.returned" in await _recorded_types(outcome)
    assert _encodable(outcome)


@pytest.mark.anyio
async def test_any_tool_result_with_lone_surrogates_is_still_audited(hostile: Any) -> None:
    tool = Tool.from_schema("names", {"type": "object"}, lambda a: "bad \udcff name",
                            effect=Effect.READ)
    outcome = await hostile([tool], [call("names", {})])
    assert "result.returned" in await _recorded_types(outcome)
    assert _encodable(outcome)
