"""A server on the path that answers STARTTLS with a certificate of its own must not receive the
SMTP password: the TLS upgrade verifies the certificate and the name before AUTH."""

from __future__ import annotations

import shutil
import socketserver
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from anfitrion import Principal, ToolContext, ToolNotExecuted
from anfitrion.exceptions import ToolDefinitionError
from anfitrion.store import MemoryStore
from anfitrion.toolkits import SmtpSettings, mail

EMAIL = {"to": ["ana@example.com"], "subject": "Minutes", "body": "See you."}


class _Impostor(socketserver.StreamRequestHandler):
    """Speaks just enough SMTP to offer STARTTLS and record whatever the client sends."""

    context: ClassVar[ssl.SSLContext]
    lines: ClassVar[list[str]] = []

    def handle(self) -> None:
        self.tls: ssl.SSLSocket | None = None
        try:
            self._converse()
        finally:
            if self.tls is not None:
                self.rfile.close()
                self.wfile.close()
                self.tls.close()

    def _converse(self) -> None:
        self.wfile.write(b"220 mail.example.com ESMTP\r\n")
        while line := self.rfile.readline():
            command = line.decode("ascii", "replace").strip()
            self.lines.append(command)
            verb = command.split(" ", 1)[0].upper()
            if verb == "EHLO":
                self.wfile.write(b"250-mail.example.com\r\n250-STARTTLS\r\n250 AUTH PLAIN\r\n")
            elif verb == "STARTTLS":
                self.wfile.write(b"220 go ahead\r\n")
                try:
                    self.tls = self.context.wrap_socket(self.connection, server_side=True)
                except (ssl.SSLError, OSError):
                    return
                self.rfile = self.tls.makefile("rb")
                self.wfile = self.tls.makefile("wb", buffering=0)
            elif verb == "AUTH":
                self.wfile.write(b"235 ok\r\n")
            elif verb == "DATA":
                self.wfile.write(b"354 go\r\n")
                while self.rfile.readline() not in (b".\r\n", b""):
                    pass
                self.wfile.write(b"250 queued\r\n")
            elif verb == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 OK\r\n")


@pytest.fixture(scope="module")
def impostor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    folder = tmp_path_factory.mktemp("smtp-tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    _Impostor.context = context
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Impostor)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), cert
    finally:
        server.shutdown()
        server.server_close()


async def _send(settings: SmtpSettings) -> Any:
    tools = mail(MemoryStore(), sender="host@example.org", smtp=settings)
    draft, send = tools.get("draft_email"), tools.get("send_email")
    assert draft is not None and send is not None
    context = ToolContext(Principal("alice"), "s", "c", "x")
    drafted = await draft.handler(draft.validate(EMAIL), context)
    return await send.handler(send.validate({"draft_id": drafted["draft_id"], **EMAIL}),
                              context)


@pytest.mark.anyio
async def test_a_server_with_an_unverifiable_certificate_never_receives_the_password(
        impostor: tuple[int, Path]) -> None:
    port, _ = impostor
    _Impostor.lines.clear()
    # refused before the message (and the password) went out: the call failed, nothing was sent
    with pytest.raises(ToolNotExecuted, match="SSLCertVerificationError"):
        await _send(SmtpSettings("127.0.0.1", port, username="app", password="hunter2-smtp",
                                 timeout=5))
    assert not any(line.upper().startswith("AUTH") for line in _Impostor.lines)


@pytest.mark.anyio
async def test_a_private_ca_given_by_the_operator_is_trusted(
        impostor: tuple[int, Path]) -> None:
    port, cert = impostor
    _Impostor.lines.clear()
    trusted = ssl.create_default_context(cafile=str(cert))
    result = await _send(SmtpSettings("127.0.0.1", port, username="app", password="pw",
                                      timeout=5, tls_context=trusted))
    assert result["to"] == EMAIL["to"]
    assert any(line.upper().startswith("AUTH") for line in _Impostor.lines)


def test_smtp_credentials_without_starttls_are_refused_at_configuration(tmp_path: Path) -> None:
    with pytest.raises(ToolDefinitionError, match="starttls"):
        mail(MemoryStore(), sender="host@example.org",
             smtp=SmtpSettings("127.0.0.1", 25, starttls=False, username="app", password="pw"))
