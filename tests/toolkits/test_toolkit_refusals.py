"""A toolkit's write refused before it acted simply failed (``ToolNotExecuted``): through the
gate it is a ``tool_error``, its effect is free again and no person is asked whether it
happened. A failure after acting stays ``outcome_unknown``."""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from anfitrion import DenyAllApprover, Policy, Principal, ToolContext, ToolNotExecuted
from anfitrion._conversation import ToolCall
from anfitrion._gate import Gate, _silent
from anfitrion._tools import Tool
from anfitrion.policy import Decision
from anfitrion.store import LedgerState, MemoryStore, Store
from anfitrion.testing import gate_session
from anfitrion.toolkits import SmtpSettings, files, mail

pytestmark = pytest.mark.anyio


def _gate(store: Store) -> Gate:
    return Gate(policy=Policy([lambda c, ctx: Decision.allow("test", "allow")]),
                approver=DenyAllApprover(), store=store, emit=_silent)


async def _propose(gate: Gate, tool: Tool, call_id: str, arguments: dict[str, Any]) -> Any:
    outcome = await gate.process(ToolCall.from_raw(call_id, tool.name, json.dumps(arguments)),
                                 {tool.name: tool}, gate_session("alice", "s1", turn=1))
    assert outcome.result is not None
    return outcome.result


def _folder_swapped_for_a_link(root: Path, outside: Path) -> None:
    os.rename(root / "drafts", root / "drafts.old")
    (root / "drafts").symlink_to(outside, target_is_directory=True)


REFUSALS = [  # (tool, arguments, how the workspace is spoiled before the call)
    ("write_draft", {"path": "drafts/x.md", "text": "x"}, _folder_swapped_for_a_link),
    ("write_draft", {"path": "drafts/sub", "text": "x"},
     lambda root, _: (root / "drafts" / "sub").mkdir()),
    ("write_draft", {"path": "drafts/fifo", "text": "x"},
     lambda root, _: os.mkfifo(root / "drafts" / "fifo")),
    ("write_draft", {"path": "drafts/note.md/x", "text": "x"}, lambda root, _: None),
    ("delete_file", {"path": "drafts/missing.md"}, lambda root, _: None),
    ("delete_file", {"path": "drafts/sub"}, lambda root, _: (root / "drafts" / "sub").mkdir()),
    ("delete_file", {"path": "drafts/link"},
     lambda root, outside: (root / "drafts" / "link").symlink_to(outside / "secret.txt")),
    ("delete_file", {"path": "drafts/x.md"}, _folder_swapped_for_a_link),
]


@pytest.mark.parametrize(("name", "arguments", "spoil"), REFUSALS)
async def test_a_files_write_refused_before_acting_fails_and_leaves_the_effect_free(
        tmp_path: Path, name: str, arguments: dict[str, Any], spoil: Any) -> None:
    root, outside = tmp_path / "proj", tmp_path / "outside"
    (root / "drafts").mkdir(parents=True)
    (root / "drafts" / "note.md").write_text("hello")
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET")
    tool = files(root, allow_delete=True).get(name)
    assert tool is not None
    spoil(root, outside)
    store = MemoryStore()
    gate = _gate(store)
    converted = tool.validate(arguments)  # the refusal is the handler's, not validation's
    context = ToolContext(Principal("alice"), "s1", "c0", name)
    with pytest.raises(ToolNotExecuted):
        await tool.handler(converted, context)
    result = await _propose(gate, tool, "c1", arguments)
    assert result.is_error and result.error_kind == "tool_error", result.content
    assert "unknown" not in result.content
    assert (outside / "secret.txt").read_text() == "TOP SECRET"
    assert await store.list_effects(unsettled_only=True) == []
    entry = await store.execution_state("s1", "c1")
    assert entry is not None and entry.state is LedgerState.FAILED
    # the effect did not happen: proposed again it is run again (and refused again), not
    # answered "outcome unknown"
    again = await _propose(gate, tool, "c2", arguments)
    assert again.error_kind == "tool_error"


class _Smtp(socketserver.StreamRequestHandler):
    """A minimal SMTP server: ``mode`` says where it refuses or hangs up."""

    mode: ClassVar[str] = "ok"
    received: ClassVar[list[bytes]] = []

    def handle(self) -> None:
        self.wfile.write(b"220 localhost ESMTP test\r\n")
        while line := self.rfile.readline():
            verb = line.decode("ascii", "replace").strip().split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self.wfile.write(b"250 localhost\r\n")
            elif verb == "MAIL":
                self.wfile.write(b"553 sender refused\r\n" if self.mode == "sender"
                                 else b"250 OK\r\n")
            elif verb == "RCPT":
                self.wfile.write(b"550 no such user\r\n" if self.mode == "rcpt"
                                 else b"250 OK\r\n")
            elif verb == "DATA":
                self.wfile.write(b"354 go ahead\r\n")
                data = b""
                while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                    data += chunk
                self.received.append(data)
                if self.mode == "lost_reply":  # accepted, and the reply never comes
                    return
                self.wfile.write(b"250 queued\r\n")
            elif verb == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 OK\r\n")


@pytest.fixture
def smtp_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Smtp)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _send(port: int, store: Store) -> Any:
    box = mail(store, sender="host@example.org",
               smtp=SmtpSettings("127.0.0.1", port, starttls=False, timeout=5))
    email = {"to": ["ana@example.com"], "subject": "Hi", "body": "Hello."}
    gate = _gate(store)
    draft_tool, send_tool = box.get("draft_email"), box.get("send_email")
    assert draft_tool is not None and send_tool is not None
    drafted = await _propose(gate, draft_tool, "d1", email)
    draft_id = json.loads(drafted.content)["draft_id"]
    return await _propose(gate, send_tool, "c1", {"draft_id": draft_id, **email})


@pytest.mark.parametrize("mode", ["sender", "rcpt", "closed"])
async def test_an_smtp_refusal_before_the_message_is_handed_over_is_not_executed(
        smtp_port: int, mode: str) -> None:
    _Smtp.mode, _Smtp.received[:] = mode, []
    store = MemoryStore()
    result = await _send(_closed_port() if mode == "closed" else smtp_port, store)
    assert result.is_error and result.error_kind == "tool_error", result.content
    assert "nothing was sent" in result.content
    assert _Smtp.received == []
    assert await store.list_effects(unsettled_only=True) == []


async def test_an_smtp_reply_lost_after_the_message_is_handed_over_is_unknown(
        smtp_port: int) -> None:
    _Smtp.mode, _Smtp.received[:] = "lost_reply", []
    store = MemoryStore()
    result = await _send(smtp_port, store)
    assert result.error_kind == "outcome_unknown", result.content
    assert len(_Smtp.received) == 1
    [unsettled] = await store.list_effects(unsettled_only=True)
    assert unsettled.state is LedgerState.UNKNOWN
