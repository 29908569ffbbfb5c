"""Helpers shared by the MCP tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anfitrion.principal import Principal

MALICIOUS = str(Path(__file__).parent / "servers" / "malicious.py")
MISBEHAVING = str(Path(__file__).parent / "servers" / "misbehaving.py")


async def _ignore(event: Any) -> None:
    return None


async def through_gate(tools: Any, name: str, arguments: dict[str, Any], store: Any, *,
                       approver: Any = None, pending: str | None = None,
                       call_id: str = "call-1") -> Any:
    """One call through the real gate (approving every ask unless told otherwise)."""
    from anfitrion.approvals import CallbackApprover
    from anfitrion.conversation import ToolCall
    from anfitrion.gate import CallScope, Gate
    from anfitrion.policy import Policy

    gate = Gate(policy=Policy.default(), approver=approver or CallbackApprover(lambda r: True),
                store=store, emit=_ignore)
    scope = CallScope(Principal("tester"), "session-1", 1, pending_request_id=pending)
    return await gate.process(ToolCall.from_object(call_id, name, arguments),
                              {t.name: t for t in tools}, scope)
