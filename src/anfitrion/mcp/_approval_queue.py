"""The approval queue as an MCP server, for a reviewer's own assistant.

``anfitrion approvals mcp`` serves four tools over stdio — ``list_pending``, ``show_approval``,
``approve`` and ``deny`` — to the assistant of *a person who reviews*, acting as that person:
every answer goes through :func:`anfitrion._answers.answer` (``via="mcp"``), bound to the digest
the tool call names, and counts as that reviewer's vote on a request that needs several.

It is guarded so that the agent being approved can never reach it:

- **a separate principal and token**: the queue acts only as the :class:`Reviewer` whose own
  token is in ``ANFITRION_REVIEWER_TOKEN`` (a reviewers file names them); it does not start
  without one, and the token is never a gateway's or an agent's;
- **never through the gateway it guards**: :func:`refuse_approval_queue` refuses an upstream
  server that is this queue — by its command line (``approvals mcp``) when the servers file is
  loaded, and by the name it reports (:data:`QUEUE_SERVER_NAME`) when it answers
  ``initialize`` — so no MCP client of the gateway is ever offered these tools;
- **no self-approval**: a request whose principal is the reviewer (an agent holding a reviewer
  token under its own name) is refused, listed as not answerable by this reviewer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .. import _answers as answers
from .._approvals import ApprovalRequest, Reviewer
from .._identity import identity_key, identity_problem, same_identity
from ..exceptions import ConfigError, MissingDependencyError, UserError
from ..store import AnswerStore
from ._queue_guard import (
    QUEUE_SERVER_NAME,
)

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("mcp", "mcp") from exc

__all__ = ["REVIEWER_TOKEN_ENV", "approval_queue"]

REVIEWER_TOKEN_ENV = "ANFITRION_REVIEWER_TOKEN"
SELF_APPROVAL = ("this request was made by the principal you act as: a call is never approved "
                 "by the one who proposed it")


def _summary(request: ApprovalRequest, reviewer: Reviewer,
             refused_for: frozenset[str] = frozenset()) -> dict[str, Any]:
    return {"id": request.id, "digest": request.digest, "tool": request.tool_name,
            "principal": request.principal_id, "session_id": request.session_id,
            "reason": request.reason, "expires_at": request.expires_at.isoformat(),
            "needs_approvers": request.quorum.required if request.quorum else 1,
            "roles": list(request.quorum.roles) if request.quorum else [],
            "answerable": _problem(request, reviewer, refused_for) is None}


def _problem(request: ApprovalRequest, reviewer: Reviewer,
             refused_for: frozenset[str] = frozenset()) -> str | None:
    if identity_key(request.principal_id) in refused_for or \
            same_identity(request.principal_id, reviewer.name):
        return SELF_APPROVAL
    if request.quorum is not None and not request.quorum.qualifies(reviewer.roles):
        return f"{answers.Refusal.UNQUALIFIED.value}: {', '.join(request.quorum.roles)}"
    return None


_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_DECIDES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                           open_world_hint=False)


def approval_queue(store: AnswerStore, reviewer: Reviewer, *,
                   principals: Iterable[str] = ()) -> MCPServer:
    """The queue's MCP server, acting as *reviewer* (module docstring).

    Args:
        principals: more principal ids this reviewer's answers are refused for (the agents
            the reviewer's own assistant runs as, say), besides the reviewer's own name.

    Example:
        >>> from anfitrion.store import MemoryStore
        >>> server = approval_queue(MemoryStore(), Reviewer("alice", frozenset({"finance"})))
        >>> server.name
        'anfitrion-approvals'
    """
    server = MCPServer(QUEUE_SERVER_NAME, instructions=(
        f"Approval requests waiting for a person. You act for {reviewer.name}: show the person "
        "the request (show_approval) and answer only what they decided, with the digest shown."))
    names = [reviewer.name, *principals]
    for name in names:
        if (problem := identity_problem(name)) is not None:
            raise UserError(f"the principal or reviewer name {name!r} is ambiguous: {problem}")
    queue = _Queue(store, reviewer, {identity_key(n) for n in names})
    server.tool(annotations=_READ_ONLY)(queue.list_pending)
    server.tool(annotations=_READ_ONLY)(queue.show_approval)
    server.tool(annotations=_DECIDES)(queue.approve)
    server.tool(annotations=_DECIDES)(queue.deny)
    return server


class _Queue:
    """The queue's four tools, acting as one reviewer."""

    def __init__(self, store: AnswerStore, reviewer: Reviewer, refused_for: set[str]) -> None:
        self.store = store
        self.reviewer = reviewer
        self.refused_for = refused_for

    async def _pending(self) -> list[ApprovalRequest]:
        now = datetime.now(UTC)
        return [r for r in await self.store.list_approvals(pending_only=True)
                if not r.expired(now)]

    async def _one(self, request_id: str) -> tuple[ApprovalRequest, Any]:
        found = await answers.find_request(self.store, request_id)
        if found is None:
            raise ToolError(answers.Refusal.NOT_FOUND.value)
        return found.request, found.answer

    async def list_pending(self) -> dict[str, Any]:
        """List the approval requests waiting for a person, newest first.

        Each names the tool, who asked, why, its digest and whether you may answer it.
        """
        return {"reviewer": self.reviewer.name,
                "pending": [_summary(r, self.reviewer, frozenset(self.refused_for))
                            for r in await self._pending()]}

    async def show_approval(self, request_id: str) -> dict[str, Any]:
        """Show one request in full: the exact arguments, warnings, digest, votes so far.

        Args:
            request_id: the request's id (or a unique prefix of at least 6 characters).
        """
        request, given = await self._one(request_id)
        votes = tuple(await self.store.list_approval_votes(request.id)) if request.quorum \
            else ()
        summary = _summary(request, self.reviewer, frozenset(self.refused_for))
        return {**summary, "description": request.describe(),
                "arguments": dict(request.arguments), "warnings": list(request.warnings),
                "state": answers.state_of(request, given).value,
                "votes": [{"voter": v.voter, "approved": v.approved, "via": v.via}
                          for v in votes],
                "more_approvals_needed": answers.votes_needed(request, votes)}

    async def _decide(self, request_id: str, digest: str, note: str, approved: bool
                      ) -> dict[str, Any]:
        request, _ = await self._one(request_id)
        if _problem(request, self.reviewer, frozenset(self.refused_for)) == SELF_APPROVAL:
            raise ToolError(SELF_APPROVAL)
        outcome = await answers.answer(self.store, request.id, digest, approved=approved,
                                       approver=f"mcp:{self.reviewer.name}", note=note,
                                       via="mcp", reviewer=self.reviewer)
        if not outcome.recorded:
            refusal = outcome.refusal or answers.Refusal.INVALID
            raise ToolError(f"{refusal.value}: {outcome.detail}" if outcome.detail
                            else refusal.value)
        if outcome.answer is None:
            return {"recorded": "vote", "more_approvals_needed":
                    answers.votes_needed(request, outcome.votes)}
        return {"recorded": "answer", "approved": outcome.answer.approved,
                "approver": outcome.answer.approver}

    async def approve(self, request_id: str, digest: str, note: str = "") -> dict[str, Any]:
        """Approve one request, as the person decided, bound to the digest they were shown.

        Args:
            request_id: the request's id.
            digest: the full digest from show_approval; a request that changed is refused.
            note: the person's words, kept in the audit log.
        """
        return await self._decide(request_id, digest, note, True)

    async def deny(self, request_id: str, digest: str, note: str = "") -> dict[str, Any]:
        """Deny one request, as the person decided; the agent sees the note.

        Args:
            request_id: the request's id.
            digest: the full digest from show_approval.
            note: why, in the person's words.
        """
        return await self._decide(request_id, digest, note, False)


def reviewer_from_environment(environ: Mapping[str, str], reviewers: Any) -> Reviewer:
    """The reviewer whose own token is in ``ANFITRION_REVIEWER_TOKEN``.

    Raises:
        ConfigError: no token, or nobody's token.
    """
    token = environ.get(REVIEWER_TOKEN_ENV, "")
    if not token:
        raise ConfigError(f"set {REVIEWER_TOKEN_ENV} to your own reviewer token: the queue "
                          "acts as one person, never as a shared or an agent's credential")
    found: Reviewer | None = reviewers.by_token(token)
    if found is None:
        raise ConfigError(f"{REVIEWER_TOKEN_ENV} is nobody's token in the reviewers file")
    return found
