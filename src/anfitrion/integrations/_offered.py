"""What a framework's agent offers, as anfitrion tools, and the checks its approvals share.

A framework describes its tools (name, description, JSON Schema); :class:`AgentTools` holds
them as :class:`~anfitrion._tools.Tool` values, a :class:`~anfitrion._tools.ToolSource` the
runtime resolves calls against. The tools' own handlers never run: the framework's handler is
given to :meth:`GatedSession.submit` as ``execute=`` each time.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import anyio

from .. import _answers as answers
from .._approvals import ApprovalRequest, approval_digest
from .._apps import framework_app
from .._canonical import canonical_json
from .._conversation import Provenance
from .._json import parse_json_strict
from .._runtime import GatedSession, Submission
from .._tools import Effect, OfferContext, Tool, Toolbox
from ..exceptions import JsonError, ToolError, UserError

__all__ = ["AgentTools", "Effects", "approve_in_framework", "belongs_to", "pending_request",
           "presented_digest", "submit", "would_ask"]

Effects = Mapping[str, Effect | str]

_attached: weakref.WeakKeyDictionary[Toolbox, AgentTools] = weakref.WeakKeyDictionary()


def belongs_to(session: GatedSession, via: str) -> GatedSession:
    """Tag *session* as the framework's (``anfitrion:<via>``), unless its app is set already:
    the CLI's hints then name the framework's own way to continue it."""
    if session.session.app is None:
        session.session.app = framework_app(via)
    return session


def _runs_elsewhere(arguments: dict[str, Any]) -> Any:
    raise ToolError("this tool runs only through its agent framework")


class AgentTools:
    """The framework tools a runtime resolves calls against (a :class:`ToolSource`).

    Args:
        effects: tool name → effect; a tool not named is a write (asks a person by default).
        trusted: names of tools whose results only the operator can write; the others'
            results are untrusted (taint).
    """

    def __init__(self, effects: Effects | None = None, trusted: Sequence[str] = ()) -> None:
        self.effects = {k: Effect(v) for k, v in (effects or {}).items()}
        self.trusted = frozenset(trusted)
        self._tools: dict[str, Tool] = {}
        self._keys: dict[str, tuple[str, str, Effect, bool]] = {}

    @classmethod
    def of(cls, session: GatedSession) -> AgentTools:
        """The :class:`AgentTools` of *session*'s runtime, included in its toolbox once."""
        source = session.runtime.tools
        if isinstance(source, AgentTools):
            return source
        if not isinstance(source, Toolbox):
            raise UserError("a framework integration needs a Runtime whose tools are a Toolbox "
                            "or an AgentTools")
        found = _attached.get(source)
        if found is None:
            found = _attached[source] = cls()
            source.include(found)
        return found

    def describe(self, name: str, description: str, schema: Mapping[str, Any], *,
                 effect: Effect | str | None = None, trusted: bool | None = None) -> Tool:
        """Offer the framework tool *name* (replacing its earlier definition if it changed)."""
        chosen = Effect(effect) if effect is not None else self.effects.get(name, Effect.WRITE)
        is_trusted = trusted if trusted is not None else name in self.trusted
        key = (description, canonical_json(dict(schema)), chosen, is_trusted)
        current = self._tools.get(name)
        if current is not None and self._keys.get(name) == key:
            return current  # unchanged: building a Tool compiles its schema, once is enough
        self._keys[name] = key
        tool = Tool.from_schema(name, dict(schema), _runs_elsewhere, description=description,
                                effect=chosen, provenance=Provenance.TRUSTED if is_trusted
                                else Provenance.UNTRUSTED)
        if current is not None and current.definition_hash == tool.definition_hash:
            return current
        self._tools[name] = tool
        return tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    async def list_tools(self, context: OfferContext) -> list[Tool]:
        return list(self._tools.values())


def presented_digest(session: GatedSession, tool: Tool | None, call_id: str,
                     arguments: str | Mapping[str, Any] | None) -> str | None:
    """The approval digest of the call as the framework presents it now (``None``: unparsable)."""
    if tool is None:
        return None
    try:
        parsed = parse_json_strict(arguments or "{}") if isinstance(arguments, str | None) \
            else dict(arguments)
    except JsonError:
        return None
    if not isinstance(parsed, dict):
        return None
    return approval_digest(session_id=session.id, principal_id=session.principal.id,
                           call_id=call_id, tool_name=tool.name,
                           tool_definition_hash=tool.definition_hash, arguments=parsed)


async def pending_request(session: GatedSession, call_id: str
                          ) -> tuple[ApprovalRequest, bool] | None:
    """The request *call_id* waits on, and whether it was answered already."""
    request_id = session.pending.get(call_id)
    if request_id is None:
        return None
    found = await session.runtime.store.get_approval(request_id)
    if found is None:
        return None
    return found.request, found.answer is not None


async def approve_in_framework(session: GatedSession, tool: Tool | None, call_id: str,
                               arguments: str | Mapping[str, Any] | None, *, approver: str,
                               via: str, seen_digest: str | None = None,
                               approved: bool = True, note: str = "") -> str | None:
    """Record a framework's answer to the request *call_id* waits on, bound to the call it
    presents now. Returns why it was refused, or ``None`` (recorded, answered elsewhere
    before, or nothing waits).

    An approval is recorded only if the arguments presented now have the digest the request
    was raised for (and *seen_digest*, the one the person was shown, if the framework carried
    it): approving in the framework a call whose arguments changed since it was asked is
    refused, and the gate then refuses the changed call too.
    """
    found = await pending_request(session, call_id)
    if found is None or found[1]:
        return None
    request = found[0]
    if seen_digest is not None and seen_digest != request.digest:
        return ("the approval names another call than the one that waits (digest mismatch); "
                "nothing was run")
    if approved and presented_digest(session, tool, call_id, arguments) != request.digest:
        return ("the call's arguments changed after approval was asked; the approval does not "
                "cover them and nothing was run")
    outcome = await answers.answer(session.runtime.store, request.id, request.digest,
                                   approved=approved, approver=approver, note=note, via=via)
    if outcome.answer is None and outcome.refusal is not answers.Refusal.ANSWERED:
        assert outcome.refusal is not None
        return f"the approval was not recorded: {outcome.refusal.value}"
    return None


async def would_ask(session: GatedSession, tool: Tool | None, call_id: str,
                    arguments: Mapping[str, Any]) -> bool:
    """Whether the gate's policy would ask a person for this call now — for frameworks that
    decide about an interruption before the call is executed. The gate decides again when the
    call is submitted; this only chooses whether the framework interrupts its run first."""
    from .._tools import BoundCall
    from ..exceptions import ArgumentError
    from ..policy import Verdict

    if session.pending.get(call_id) is not None:
        return True
    if tool is None:
        return False
    try:
        tool.validate(dict(arguments))
    except ArgumentError:
        return False
    runtime, state = session.runtime, session.session
    now = runtime.policy.now()
    rate_counts: dict[str, int] = {}
    for key in runtime.policy.rate_keys(tool.name):
        rate_counts[key.id] = await runtime.store.count_calls(
            state.principal.id, key.tool, (now - timedelta(seconds=key.seconds)).timestamp())
    flags = state.flag(dict(arguments))
    bound = BoundCall(call_id, tool, dict(arguments))
    context = await runtime.policy.consult(bound, state.policy_context(now, rate_counts, flags))
    decision = runtime.policy.decide(bound, context)
    return decision.verdict is Verdict.ASK


_locks: weakref.WeakKeyDictionary[GatedSession, anyio.Lock] = weakref.WeakKeyDictionary()


async def submit(session: GatedSession, name: str, arguments: str | Mapping[str, Any] | None,
                 call_id: str | None, *, execute: Callable[..., Any]) -> Submission:
    """:meth:`GatedSession.submit`, one call of a session at a time.

    Frameworks run a reply's calls concurrently; a session records and saves each call's outcome
    (compare-and-set on its version), so two submits interleaving would conflict. Calls of one
    session pass the gate — and run — one after the other; calls of different sessions do not
    wait for each other."""
    lock = _locks.get(session)
    if lock is None:
        lock = _locks[session] = anyio.Lock()
    async with lock:
        return await session.submit(name, arguments, call_id, execute=execute)
