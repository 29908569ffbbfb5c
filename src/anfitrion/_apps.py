"""Names of the apps a session can belong to (who may resume it), shared by the doors."""

from __future__ import annotations

__all__ = ["DEMO_APP", "GATEWAY_APP"]

DEMO_APP = "anfitrion:demo"
"""Sessions of ``anfitrion demo``: ``anfitrion resume`` continues them with the demo's parts."""
GATEWAY_APP = "anfitrion:gateway"
"""Sessions of the MCP gateway: its client continues them by calling again."""
