"""Propose, then confirm: a write split into a free *proposal* and a *commit* a person approves.

The model may draft an e-mail; sending it is a step the host controls. :class:`Drafts` keeps
pending actions in the store's records (namespace ``drafts`` by default). Each draft has an id, a
*digest* (SHA-256 of the canonical JSON of its kind and content) and the principal that proposed
it.

The commit tool repeats the draft's content in its own arguments next to the draft id. That is
deliberate: the approval request the gate shows a person is rendered from the call's arguments,
and its digest covers them, so the person sees — and approves — the exact final content, and the
policy can constrain it (recipient domains, lengths) like any other argument. The commit runs only
when those arguments hash to the stored draft's digest, the draft belongs to the calling
principal, and it was never committed: the once-only claim uses the store's execution ledger, an
atomic compare-and-set, so two commits of one draft cannot both run, even in two processes.

Example:
    >>> from anfitrion.store import MemoryStore
    >>> drafts = Drafts(MemoryStore(), kind="note")
    >>> draft_digest("note", {"text": "hi"})[:12]
    'c0b03ba02994'
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio.to_thread

from ._canonical import digest
from ._conversation import JsonValue, Provenance, ToolResult
from ._tools import Effect, Tool, ToolContext
from .exceptions import ToolDefinitionError, ToolNotExecuted
from .store import ClaimState, DraftStore

__all__ = ["Draft", "Drafts", "draft_digest", "draft_tools"]

T = TypeVar("T")


def draft_digest(kind: str, content: Mapping[str, JsonValue]) -> str:
    """The digest a draft is known by: SHA-256 over the canonical JSON of kind and content."""
    return digest({"kind": kind, "content": dict(content)})


@dataclass(frozen=True, slots=True)
class Draft:
    """A pending action: what would be done, by whom, and its digest."""

    id: str
    kind: str
    content: Mapping[str, JsonValue]
    digest: str
    principal_id: str
    session_id: str
    created_at: str
    status: str = "pending"
    committed_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "content": dict(self.content),
                "digest": self.digest, "principal_id": self.principal_id,
                "session_id": self.session_id, "created_at": self.created_at,
                "status": self.status, "committed_at": self.committed_at}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Draft:
        return cls(id=d["id"], kind=d["kind"], content=dict(d["content"]), digest=d["digest"],
                   principal_id=d["principal_id"], session_id=d["session_id"],
                   created_at=d["created_at"], status=d.get("status", "pending"),
                   committed_at=d.get("committed_at"))


class Drafts:
    """Drafts of one kind in a store: :meth:`propose` records one, :meth:`commit` runs it once.

    Args:
        store: where drafts live (any :class:`~anfitrion.store.Store`; the host's or another).
        kind: what the drafts are, e.g. ``"email"``; part of every digest.
        namespace: the records namespace.
    """

    def __init__(self, store: DraftStore, *, kind: str, namespace: str = "drafts") -> None:
        self.store = store
        self.kind = kind
        self.namespace = namespace

    async def propose(self, content: Mapping[str, JsonValue], context: ToolContext) -> Draft:
        """Record a pending draft for the calling principal; nothing else happens."""
        draft = Draft(id=f"{self.kind}-{uuid.uuid4().hex[:16]}", kind=self.kind,
                      content=dict(content), digest=draft_digest(self.kind, content),
                      principal_id=context.principal.id, session_id=context.session_id,
                      created_at=datetime.now(UTC).isoformat())
        await self.store.put_record(self.namespace, draft.id, draft.to_dict())
        return draft

    async def get(self, draft_id: str) -> Draft | None:
        record = await self.store.get_record(self.namespace, draft_id)
        return None if record is None else Draft.from_dict(record)

    async def list(self, *, principal_id: str | None = None,
                   status: str | None = None) -> Sequence[Draft]:
        """Drafts of this kind, oldest first, optionally for one principal or status."""
        drafts = [Draft.from_dict(v) for _, v in await self.store.list_records(self.namespace)]
        return sorted((d for d in drafts if d.kind == self.kind
                       and (principal_id is None or d.principal_id == principal_id)
                       and (status is None or d.status == status)),
                      key=lambda d: d.created_at)

    async def problem(self, draft_id: str, content: Mapping[str, JsonValue],
                      principal_id: str) -> str | None:
        """Why committing *content* as draft *draft_id* would be refused, or ``None``."""
        draft = await self.get(draft_id)
        if draft is None or draft.kind != self.kind or draft.principal_id != principal_id:
            return f"no pending {self.kind} draft with id {draft_id!r}"
        if draft_digest(self.kind, content) != draft.digest:
            return (f"the arguments differ from draft {draft_id!r}: repeat the draft's content "
                    "exactly, or propose a new draft")
        if draft.status != "pending":
            return f"draft {draft_id!r} was already {draft.status}; propose a new one"
        return None

    async def commit(self, draft_id: str, content: Mapping[str, JsonValue], context: ToolContext,
                     action: Callable[[Draft], Awaitable[T]]) -> T:
        """Run *action* on the draft, once, if *content* is exactly the draft's content.

        Raises:
            ToolNotExecuted: no such draft (or another principal's), the content differs from the
                draft, or the draft was already committed (or its commit's outcome is unknown).
        """
        draft = await self.get(draft_id)
        if draft is None or draft.kind != self.kind \
                or draft.principal_id != context.principal.id:
            raise ToolNotExecuted(f"no pending {self.kind} draft with id {draft_id!r}")
        if draft_digest(self.kind, content) != draft.digest:
            raise ToolNotExecuted(f"the arguments differ from draft {draft_id!r}: repeat the "
                                  "draft's content exactly, or propose a new draft")
        claim = await self.store.claim_execution(f"draft:{self.namespace}:{draft.id}",
                                                 "commit", draft.digest)
        if claim.state is ClaimState.UNKNOWN:
            raise ToolNotExecuted(f"draft {draft_id!r} was being committed when the host "
                                  "stopped; its outcome is unknown and it is not run again. "
                                  "Ask the operator.")
        if claim.state is not ClaimState.CLAIMED or claim.token is None:
            raise ToolNotExecuted(f"draft {draft_id!r} was already committed; propose a new one")
        try:
            value = await action(draft)
        except Exception as exc:  # BLE001 - re-raised: a failed commit is settled, never retried
            await self._settle(draft, context, f"failed: {exc}", claim.token, failed=True)
            raise
        await self._settle(draft, context, "committed", claim.token, failed=False)
        return value

    async def _settle(self, draft: Draft, context: ToolContext, text: str, token: str, *,
                      failed: bool) -> None:
        await self.store.settle_execution(
            f"draft:{self.namespace}:{draft.id}", "commit",
            ToolResult(context.call_id, context.tool_name, text[:500], is_error=failed), token)
        status = "failed" if failed else "committed"
        await self.store.put_record(self.namespace, draft.id, {
            **draft.to_dict(), "status": status, "committed_at": datetime.now(UTC).isoformat()})


def draft_tools(store: DraftStore, *, kind: str, input_schema: Mapping[str, Any],
                action: Callable[[Draft, ToolContext], Any], propose_name: str | None = None,
                commit_name: str | None = None, propose_description: str = "",
                commit_description: str = "",
                validator: Callable[[Mapping[str, Any]], None] | None = None,
                namespace: str = "drafts", **commit_options: Any) -> tuple[Tool, Tool]:
    """A propose tool and a commit tool for any action, built from one input schema.

    The propose tool (``Effect.READ``: it only records a draft) takes *input_schema*; the commit
    tool (``Effect.WRITE``: the default policy asks) takes the same properties plus
    ``draft_id`` and runs ``action(draft, context)`` (sync or async) once, after approval, if the
    arguments are exactly the draft's.

    Raises:
        ToolDefinitionError: the schema already has a ``draft_id`` property.

    Example:
        >>> from anfitrion.store import MemoryStore
        >>> schema = {"type": "object", "properties": {"amount": {"type": "integer"}},
        ...           "required": ["amount"]}
        >>> propose, commit = draft_tools(MemoryStore(), kind="refund", input_schema=schema,
        ...                               action=lambda draft, context: "refunded")
        >>> propose.name, commit.name, commit.input_schema["required"]
        ('draft_refund', 'commit_refund', ['draft_id', 'amount'])
    """
    properties = dict(input_schema.get("properties", {}))  # type: ignore[call-overload]
    if "draft_id" in properties:
        raise ToolDefinitionError(f"draft tools for {kind!r}: 'draft_id' is reserved")
    propose_name = propose_name or f"draft_{kind}"
    commit_name = commit_name or f"commit_{kind}"
    commit_schema = {**input_schema,
                     "properties": {"draft_id": {"type": "string", "maxLength": 100},
                                    **properties},
                     "required": ["draft_id", *input_schema.get("required", [])]}
    drafts = Drafts(store, kind=kind, namespace=namespace)

    def content_of(arguments: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in arguments.items() if k != "draft_id"}

    def validate_commit(arguments: Mapping[str, Any]) -> None:
        if validator is not None:
            validator(content_of(arguments))

    async def propose(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        draft = await drafts.propose(arguments, context)
        return {"draft_id": draft.id, "digest": draft.digest, "status": "drafted, not done",
                "next": f"to carry it out, call {commit_name} with this draft_id and the same "
                        "arguments; a person may be asked to approve"}

    async def commit(arguments: dict[str, Any], context: ToolContext) -> Any:
        async def run(draft: Draft) -> Any:
            if inspect.iscoroutinefunction(action):
                return await action(draft, context)
            return await anyio.to_thread.run_sync(action, draft, context)

        return await drafts.commit(arguments["draft_id"], content_of(arguments), context, run)

    propose_tool = Tool.from_schema(
        propose_name, input_schema, propose, effect=Effect.READ, provenance=Provenance.TRUSTED,
        validator=validator, metadata={"draft": "propose"},
        description=propose_description or f"Propose a {kind}: records a draft, does nothing "
        f"else. Returns a draft_id for {commit_name}.")
    async def precheck(arguments: dict[str, Any], context: ToolContext) -> str | None:
        # refused before a person is asked, not after their yes (checked again at commit)
        return await drafts.problem(arguments["draft_id"], content_of(arguments),
                                    context.principal.id)

    commit_tool = Tool.from_schema(
        commit_name, commit_schema, commit, effect=Effect.WRITE,
        validator=validate_commit, metadata={"draft": "commit"}, precheck=precheck,
        description=commit_description or f"Carry out a {kind} drafted with {propose_name}: "
        "give its draft_id and exactly the same arguments. Needs a person's approval.",
        # sending a draft is one effect, keyed by the draft: a draft is carried out once, by
        # whichever call of whichever session gets there first
        **{"provenance": Provenance.TRUSTED, "effect_key": "draft:{draft_id}",
           "effect_scope": "principal", **commit_options})
    return propose_tool, commit_tool
