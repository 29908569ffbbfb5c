"""Helpers shared by the MCP tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MALICIOUS = str(Path(__file__).parent / "servers" / "malicious.py")
MISBEHAVING = str(Path(__file__).parent / "servers" / "misbehaving.py")


async def _ignore(event: Any) -> None:
    return None


async def through_gate(tools: Any, name: str, arguments: dict[str, Any], store: Any, *,
                       approver: Any = None, pending: str | None = None,
                       call_id: str = "call-1", turn: int = 1, policy: Any = None) -> Any:
    """One call through the real gate (approving every ask unless told otherwise), in *turn*
    of ``session-1``."""
    from anfitrion._approvals import CallbackApprover
    from anfitrion._conversation import ToolCall
    from anfitrion._gate import Gate
    from anfitrion.policy import Policy
    from anfitrion.testing import gate_session

    gate = Gate(policy=policy or Policy.default(),
                approver=approver or CallbackApprover(lambda r: True), store=store, emit=_ignore)
    scope = gate_session("tester", "session-1", turn=turn,
                         waiting={call_id: pending} if pending else None)
    return await gate.process(ToolCall.from_object(call_id, name, arguments),
                              {t.name: t for t in tools}, scope)
