"""Delivery through SMTP, to a minimal local SMTP server speaking RFC 5321."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from email import message_from_bytes
from typing import Any, ClassVar

import pytest

from anfitrion import Principal, ToolContext
from anfitrion.store import MemoryStore
from anfitrion.toolkits import SmtpSettings, mail


class SmtpHandler(socketserver.StreamRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def handle(self) -> None:
        envelope: dict[str, Any] = {"rcpt": []}
        self.wfile.write(b"220 localhost ESMTP test\r\n")
        while line := self.rfile.readline():
            command = line.decode("ascii", "replace").strip()
            verb = command.split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self.wfile.write(b"250 localhost\r\n")
            elif verb == "MAIL":
                envelope["from"] = command.split(":", 1)[1].strip().strip("<>").split(">")[0]
                self.wfile.write(b"250 OK\r\n")
            elif verb == "RCPT":
                envelope["rcpt"].append(command.split(":", 1)[1].strip().strip("<>"))
                self.wfile.write(b"250 OK\r\n")
            elif verb == "DATA":
                self.wfile.write(b"354 go ahead\r\n")
                data = b""
                while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                    data += chunk
                envelope["data"] = data
                self.received.append(envelope)
                envelope = {"rcpt": []}
                self.wfile.write(b"250 queued\r\n")
            elif verb == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 OK\r\n")


@pytest.fixture
def smtp_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), SmtpHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.anyio
async def test_a_confirmed_draft_is_sent_through_smtp_to_exactly_its_recipients(
        smtp_port: int) -> None:
    tools = mail(MemoryStore(), sender="host@example.org",
                 smtp=SmtpSettings("127.0.0.1", smtp_port, starttls=False, timeout=5))
    email = {"to": ["ana@example.com", "rui@example.com"], "subject": "Olá",
             "body": "Bom dia."}
    context = ToolContext(Principal("alice"), "s", "c1", "draft_email")
    drafted = await tools.get("draft_email").handler(dict(email), context)
    SmtpHandler.received.clear()
    sent = await tools.get("send_email").handler(
        {"draft_id": drafted["draft_id"], **email},
        ToolContext(Principal("alice"), "s", "c2", "send_email"))
    assert sent["to"] == email["to"]
    [envelope] = SmtpHandler.received
    assert envelope["from"] == "host@example.org"
    assert envelope["rcpt"] == ["ana@example.com", "rui@example.com"]
    message = message_from_bytes(envelope["data"])
    assert message["To"] == "ana@example.com, rui@example.com"
    assert str(message["Subject"]) == "=?utf-8?q?Ol=C3=A1?="
