"""The approval queue is never offered through a gateway: the check the gateway calls.

Kept apart from :mod:`anfitrion.mcp._approval_queue` so a gateway (and any MCP toolset) can run
it without importing the queue's server.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from ..exceptions import ConfigError

__all__ = ["QUEUE_SERVER_NAME", "approval_queue_refusal", "refuse_approval_queue",
           "refuse_approval_queue_command", "refuse_approval_queue_in"]

QUEUE_SERVER_NAME = "anfitrion-approvals"
"""The name the queue reports in ``initialize``; a gateway refuses an upstream reporting it."""


def approval_queue_refusal(server_id: str, server_name: str | None) -> str | None:
    """Why an upstream server that answered ``initialize`` as *server_name* must not be
    offered (it is the approval queue), or ``None``. Called by every MCP toolset."""
    if server_name is not None and server_name.strip().lower() == QUEUE_SERVER_NAME:
        return (f"MCP server {server_id!r} is anfitrion's approval queue: a gateway never "
                "offers it to the agents whose calls it approves")
    return None


def refuse_approval_queue(server_id: str, server_name: str | None) -> None:
    """:func:`approval_queue_refusal`, raising.

    Raises:
        ConfigError: the server is the approval queue.
    """
    refusal = approval_queue_refusal(server_id, server_name)
    if refusal is not None:
        raise ConfigError(refusal)


def refuse_approval_queue_command(server_id: str, command: str | None,
                                  args: Sequence[str]) -> None:
    """Called by a gateway for each configured upstream command, before starting it.

    Raises:
        ConfigError: the command runs ``approvals mcp`` (the queue).
    """
    # split every argument too: ``sh -c "anfitrion approvals mcp"`` runs the queue as well
    words = " ".join([command or "", *args]).lower().split()
    for first, second in itertools.pairwise(words):
        if first == "approvals" and second == "mcp":
            refuse_approval_queue(server_id, QUEUE_SERVER_NAME)


def refuse_approval_queue_in(servers: Iterable[Any]) -> None:
    """:func:`refuse_approval_queue_command` for every server of an MCP config
    (``ServerConfig``: ``id``, ``command``, ``args``), before any is started.

    Raises:
        ConfigError: one of them is the approval queue.
    """
    for server in servers:
        refuse_approval_queue_command(server.id, server.command, server.args)
