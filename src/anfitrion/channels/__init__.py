"""Approval channels: the ways a request reaches people and their answers come back.

- :mod:`~anfitrion.channels._reviewers`: people who approve, each with their own token and roles
  (the two-person rule counts people, so it needs to know who is who);
- :mod:`~anfitrion.channels._webhooks`: signed webhooks out (:func:`webhook_listeners`, the
  runtime's listeners for a policy's targets), signed callbacks in (:class:`CallbackVerifier`);
- :mod:`anfitrion.mcp._approval_queue`: the queue as an MCP server for a reviewer's assistant.

Every answer, whichever channel it comes through, goes through :func:`anfitrion._answers.answer`.
"""

from __future__ import annotations

from ._reviewers import Reviewers, load_reviewers, token_sha256
from ._webhooks import CallbackVerifier, signature_header, verify_signature, webhook_listeners

__all__ = ["CallbackVerifier", "Reviewers", "load_reviewers", "signature_header", "token_sha256",
           "verify_signature", "webhook_listeners"]
