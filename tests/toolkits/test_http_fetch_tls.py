"""https with the connection pinned to the checked address: TLS still verifies the name."""

from __future__ import annotations

import importlib
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from anfitrion import Principal, ToolContext
from anfitrion.exceptions import ToolError

pytest.importorskip("httpx")

# the package's function shadows the module's attribute name: import the module itself
from anfitrion.toolkits import http_fetch, static_resolver

module = importlib.import_module("anfitrion.toolkits._http_fetch")


class Hello(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = f"hello {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=secure.test",
                    "-addext", "subjectAltName=DNS:secure.test"],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], cert
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def loopback_counts_as_public(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only here: let https reach the local test server (production refuses loopback)."""
    real = module.address_is_public
    monkeypatch.setattr(module, "address_is_public", lambda ip: ip.is_loopback or real(ip))


async def fetch(port: int, cert: Path, host: str) -> Any:
    t = http_fetch([f"{host}:{port}"], resolver=static_resolver({host: ["127.0.0.1"]}),
                   verify=ssl.create_default_context(cafile=str(cert)))
    return await t.handler(t.validate({"url": f"https://{host}:{port}/"}),
                           ToolContext(Principal("a"), "s", "c", t.name))


@pytest.mark.anyio
@pytest.mark.usefixtures("loopback_counts_as_public")
async def test_https_to_a_pinned_address_verifies_the_certificate_for_the_name(
        tls_server: tuple[int, Path]) -> None:
    port, cert = tls_server
    result = await fetch(port, cert, "secure.test")
    assert result["text"] == f"hello secure.test:{port}"


@pytest.mark.anyio
@pytest.mark.usefixtures("loopback_counts_as_public")
async def test_a_certificate_for_another_name_is_refused(
        tls_server: tuple[int, Path]) -> None:
    port, cert = tls_server
    with pytest.raises(ToolError, match=r"ConnectError.*(?i:certificate verify failed)"):
        await fetch(port, cert, "impostor.test")
