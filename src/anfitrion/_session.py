"""The session: the one owner of everything the gate remembers between calls.

A :class:`Session` holds the principal, the transcript, the turn, the counters, the recent
proposals (for the repeated-call guard), invalid-call counts, provenance (the taint index),
the open approval requests, the settled results of the open turn and the lease it is run
under. The gate asks it for what it needs (:meth:`Session.policy_context`,
:meth:`Session.pending_request`) and tells it what happened (:meth:`Session.record_proposal`,
:meth:`Session.record_invalid`, :meth:`Session.record_result`, …); no other code writes its
fields, and readers use its accessors.

It does no I/O. It is persisted through the store in one versioned shape
(:data:`SESSION_SCHEMA`); :func:`migrate_session_data` upgrades sessions stored by earlier
releases, one named step at a time, so they still resume.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import MappingProxyType
from typing import Any

from ._conversation import (
    Message,
    Reply,
    Text,
    ToolCall,
    ToolResult,
    Transcript,
    UserMessage,
    dump_messages,
    load_messages,
    message_to_dict,
)
from ._principal import Principal
from ._provenance import TaintIndex
from .exceptions import StoreError
from .policy import PolicyContext
from .store import SessionState

__all__ = ["RECENT_PROPOSALS_KEPT", "SESSION_MIGRATIONS", "SESSION_SCHEMA", "Session",
           "migrate_session_data", "untrusted_sources_of"]

log = logging.getLogger("anfitrion.session")

SESSION_SCHEMA = 2
"""The version of the stored shape :meth:`Session.to_state` writes."""

RECENT_PROPOSALS_KEPT = 20
"""Proposals remembered for the repeated-call guard (its ``max_repeats`` is at most this)."""

MAX_RETRIES_REMEMBERED = 1000
"""Calls a door remembers for a retry after their approval (the gateway): oldest forgotten."""


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """``session-1-to-2``: the shape of release 0.1 (no ``schema`` key) to the runtime's.

    ``untrusted_sources`` is no longer stored (the taint index, rebuilt from the transcript,
    is its one owner); ``app`` (who may resume it) and ``retries`` are new.
    """
    out = {k: v for k, v in data.items() if k != "untrusted_sources"}
    out.setdefault("app", None)
    out.setdefault("retries", [])
    out["schema"] = 2
    return out


SESSION_MIGRATIONS: tuple[tuple[str, int, Callable[[dict[str, Any]], dict[str, Any]]], ...] = (
    ("session-1-to-2", 1, _v1_to_v2),
)
"""Named steps ``(name, from_version, step)``, applied in order when a session loads."""


def migrate_session_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """Stored session data of any known version, upgraded to :data:`SESSION_SCHEMA`.

    Raises:
        StoreError: the data is of a newer or unknown version.
    """
    out = dict(data)
    version = out.get("schema", 1)
    for _, source, step in SESSION_MIGRATIONS:
        if version == source:
            out = step(out)
            version = out["schema"]
    if version != SESSION_SCHEMA:
        raise StoreError(f"a stored session has shape version {version!r}; this release "
                         f"reads version {SESSION_SCHEMA} and earlier")
    return out


class Session:
    """The state of one session. Built by the session runtime; read through accessors.

    Args:
        id: the session id.
        principal: who the session acts for.
        app: who may resume it — ``"anfitrion:demo"``, ``"anfitrion:gateway"``, an import
            reference ``"module:attr"``, or ``None`` (the application's own code).
    """

    __slots__ = ("_born", "_call_ids", "_counters", "_dumped", "_invalid_by_tool", "_pending",
                 "_recent",
                 "_retries", "_saved_messages", "_settled", "_taint", "_transcript", "_turn",
                 "_version", "app", "id", "lease_expires", "lease_owner", "principal", "status")

    def __init__(self, id: str, principal: Principal, *, app: str | None = None) -> None:
        self.id = id
        self.principal = principal
        self.app = app
        self.status = "running"
        self.lease_owner: str | None = None
        self.lease_expires: float | None = None
        self._transcript = Transcript()
        self._turn = 0
        self._counters: dict[str, int] = {}
        self._invalid_by_tool: dict[str, int] = {}
        self._recent: list[tuple[str, str]] = []
        self._pending: dict[str, str] = {}  # call id -> approval request id
        self._settled: dict[str, ToolResult] = {}  # results of the open turn
        self._retries: dict[tuple[str, str], str] = {}  # (tool, arguments digest) -> call id
        self._taint = TaintIndex()
        self._dumped: list[dict[str, Any]] = []  # the transcript as data, one message at a time
        self._saved_messages = 0
        self._call_ids: set[str] = set()
        self._version = 0
        self._born: str | None = secrets.token_hex(8)
        """This session's own mark, stored with it: a session stored again under the same id
        (pruned, then opened anew) is another one (:meth:`catch_up`)."""

    # -- reading -----------------------------------------------------------------------------

    @property
    def transcript(self) -> Transcript:
        return self._transcript

    @property
    def turn(self) -> int:
        return self._turn

    @property
    def version(self) -> int:
        return self._version

    @property
    def counters(self) -> Mapping[str, int]:
        """``tool_calls`` (executed), ``approvals_asked``, ``invalid_calls``."""
        return MappingProxyType(self._counters)

    @property
    def tool_calls(self) -> int:
        return self._counters.get("tool_calls", 0)

    @property
    def untrusted_sources(self) -> tuple[str, ...]:
        """Tools whose untrusted results entered the conversation, first seen first."""
        return self._taint.sources

    @property
    def tainted(self) -> bool:
        return self._taint.tainted

    @property
    def pending(self) -> Mapping[str, str]:
        """Call id → approval request id of the calls waiting for a person."""
        return MappingProxyType(self._pending)

    def pending_request(self, call_id: str) -> str | None:
        return self._pending.get(call_id)

    def settled(self, call_id: str) -> ToolResult | None:
        """The result of *call_id* in the open turn, if it has one yet."""
        return self._settled.get(call_id)

    def used_call_id(self, call_id: str) -> bool:
        return call_id in self._call_ids

    def last_reply(self) -> Reply | None:
        last = self._transcript[-1] if len(self._transcript) else None
        return last if isinstance(last, Reply) else None

    def flag(self, arguments: Mapping[str, Any]) -> dict[str, str]:
        """Argument paths whose values came only from untrusted content (see taint)."""
        return self._taint.flag(arguments)

    def policy_context(self, now: datetime, rate_counts: Mapping[str, int],
                       flags: Mapping[str, str]) -> PolicyContext:
        """What the policy may see of this session for one decision."""
        return PolicyContext(principal=self.principal, session_id=self.id, turn=self._turn,
                             now=now, counters=dict(self._counters),
                             recent_calls=tuple(self._recent),
                             untrusted_sources=self.untrusted_sources,
                             rate_counts=rate_counts, flagged_arguments=dict(flags),
                             provenance=self._taint)

    # -- what happened -----------------------------------------------------------------------

    def add(self, message: Message) -> None:
        """Append to the transcript; the message is serialised once, here."""
        self._transcript.append(message)
        self._dumped.append(message_to_dict(message))
        if isinstance(message, Reply):
            self._call_ids.update(c.id for c in message.tool_calls)
            self._taint.add_reply(message)

    def narrow_plan(self, globs: Iterable[str]) -> tuple[str, ...]:
        """Narrow the plan of this session to the tools matching *globs* (stored with it:
        the narrowing holds after a resume); see :meth:`TaintIndex.narrow_plan`."""
        return self._taint.narrow_plan(globs)

    def add_principal_text(self, text: str) -> None:
        """The principal's own words: a user message, and what provenance trusts."""
        self.add(UserMessage((Text(text),)))
        self._taint.add_principal_text(text)

    def begin_turn(self) -> int:
        self._turn += 1
        return self._turn

    def record_proposal(self, tool: str, arguments_digest: str) -> None:
        """A new proposal (not a resume, not an edit): it feeds the repeated-call guard."""
        self._recent.append((tool, arguments_digest))
        del self._recent[:-RECENT_PROPOSALS_KEPT]

    def record_invalid(self, tool: str) -> tuple[int, int]:
        """An invalid call: (invalid calls of *tool*, invalid calls of the session)."""
        count = self._invalid_by_tool[tool] = self._invalid_by_tool.get(tool, 0) + 1
        total = self._counters["invalid_calls"] = self._counters.get("invalid_calls", 0) + 1
        return count, total

    def record_approval_asked(self) -> None:
        self._counters["approvals_asked"] = self._counters.get("approvals_asked", 0) + 1

    def record_waiting(self, call_id: str, request_id: str) -> None:
        self._pending[call_id] = request_id

    def record_result(self, result: ToolResult, *, executed: bool) -> bool:
        """A call of the open turn settled; True when it brought untrusted content in."""
        self._pending.pop(result.call_id, None)
        self._settled[result.call_id] = result
        if executed:
            self._counters["tool_calls"] = self._counters.get("tool_calls", 0) + 1
        return self._taint.add_result(result, self._turn)

    def record_outside_result(self, result: ToolResult) -> bool:
        """A result the caller obtained itself, outside any call of this session."""
        self.add(UserMessage((result,)))
        return self._taint.add_result(result, self._turn)

    def close_turn(self, calls: Sequence[ToolCall]) -> UserMessage:
        """Every call of *calls* settled: their results join the transcript, in call order."""
        message = UserMessage(tuple(self._settled.pop(c.id) for c in calls))
        self.add(message)
        return message

    def remember_retry(self, tool: str, arguments_digest: str, call_id: str) -> None:
        """A door whose client repeats a call after approval (the gateway) finds its id."""
        self._retries.pop((tool, arguments_digest), None)
        if len(self._retries) >= MAX_RETRIES_REMEMBERED:
            self._retries.pop(next(iter(self._retries)))
        self._retries[(tool, arguments_digest)] = call_id

    def retry_of(self, tool: str, arguments_digest: str) -> str | None:
        return self._retries.get((tool, arguments_digest))

    def forget_retry(self, tool: str, arguments_digest: str) -> None:
        self._retries.pop((tool, arguments_digest), None)

    # -- persistence -------------------------------------------------------------------------

    def to_state(self) -> SessionState:
        data = {
            "schema": SESSION_SCHEMA, "principal": self.principal.to_dict(), "app": self.app,
            "turn": self._turn, "counters": self._counters,
            "invalid_by_tool": self._invalid_by_tool,
            "recent_calls": [list(c) for c in self._recent], "pending": self._pending,
            "settled": dump_messages([UserMessage(tuple(self._settled.values()))])[0]["parts"],
            "retries": [[t, d, c] for (t, d), c in self._retries.items()],
            "plan_limits": [list(g) for g in self._taint.plan_limits],
        }
        if self._born is not None:
            data["born"] = self._born
        return SessionState(self.id, self.principal.id, self.status, data, self._version,
                            messages=self._dumped[:], saved_messages=self._saved_messages,
                            lease_owner=self.lease_owner, lease_expires=self.lease_expires)

    def saved(self, state: SessionState) -> None:
        """The store holds *state* now (its version and messages)."""
        self._version = state.version
        self._saved_messages = state.saved_messages

    @classmethod
    def from_state(cls, state: SessionState) -> Session:
        """Rebuild a stored session (any known shape version).

        Raises:
            StoreError: the stored data is not a session this release can read.
        """
        with _as_stored(state.session_id):
            d = migrate_session_data(state.data)
            session = cls(state.session_id, Principal.from_dict(d["principal"]),
                          app=d.get("app"))
            session._dumped = [dict(m) for m in state.messages]
            session._transcript = Transcript(load_messages(session._dumped))
            session._take_fields(_stored_fields(d))
        session._take_row(state, state.saved_messages)
        transcript = session._transcript
        session._call_ids = {c.id for m in transcript if isinstance(m, Reply)
                             for c in m.tool_calls}
        session._taint = TaintIndex.from_messages(transcript, session._settled.values(),
                                                  turn=session._turn,
                                                  plan_limits=_plan_limits(d))
        return session

    def _take_fields(self, fields: Mapping[str, Any]) -> None:
        """The attributes :func:`_stored_fields` read from stored data."""
        for name, value in fields.items():
            setattr(self, name, value)

    def _take_row(self, state: SessionState, messages: int) -> None:
        self.status = state.status
        self._version = state.version
        self._saved_messages = messages
        self.lease_owner, self.lease_expires = state.lease_owner, state.lease_expires

    # -- continuing a session kept in the process --------------------------------------------

    @property
    def message_count(self) -> int:
        return len(self._dumped)

    def continuable(self) -> bool:
        """Whether :meth:`catch_up` may continue this object: it knows its own mark, every
        message of it is stored, and no call of an open turn has settled (a settled result
        is indexed ahead of the transcript, where a rebuild indexes it after)."""
        return self._born is not None and not self._settled \
            and len(self._dumped) == self._saved_messages

    def catch_up(self, state: SessionState, tail: Sequence[Mapping[str, Any]],
                 total: int) -> bool:
        """Bring this session — as this process stored it last — up to the stored *state*
        (no messages) and *tail*, its messages from :attr:`message_count` on, of *total*.

        Done (True) only if the stored session is this one since (the same mark, principal,
        app and plan narrowings, a later version, *total* = what it held plus the tail);
        then the tail is indexed as :meth:`from_state` indexes a transcript, and the rest
        read as it reads it. Otherwise nothing changes (False): read it whole.

        Raises:
            StoreError: the stored data is not a session this release can read.
        """
        known = len(self._dumped)
        if not self.continuable() or total != known + len(tail) \
                or state.version <= self._version:
            return False
        with _as_stored(self.id):
            d = migrate_session_data(state.data)
            if d.get("born") != self._born or d.get("app") != self.app \
                    or Principal.from_dict(d["principal"]) != self.principal \
                    or _plan_limits(d) != [list(g) for g in self._taint.plan_limits]:
                return False
            dumped = [dict(m) for m in tail]
            messages = load_messages(dumped)
            fields = _stored_fields(d)  # all read before anything changes
        self._index_tail(messages)
        self._dumped.extend(dumped)
        self._take_fields(fields)
        for result in self._settled.values():
            self._taint.add_result(result, self._turn)
        self._take_row(state, total)
        return True

    def _index_tail(self, messages: Sequence[Message]) -> None:
        """Append *messages* to the transcript, indexed as :meth:`TaintIndex.from_messages`
        indexes them (a result by the number of replies before it)."""
        replies = sum(1 for m in self._transcript if isinstance(m, Reply))
        for message in messages:
            self._transcript.append(message)
            if isinstance(message, Reply):
                replies += 1
                self._call_ids.update(c.id for c in message.tool_calls)
                self._taint.add_reply(message)
            elif isinstance(message, UserMessage):
                for part in message.parts:
                    if isinstance(part, ToolResult):
                        self._taint.add_result(part, replies)
                    else:
                        self._taint.add_principal_text(part.text)


@contextmanager
def _as_stored(session_id: str) -> Iterator[None]:
    """Reading the stored session *session_id*: what does not read as one is a StoreError."""
    try:
        yield
    except StoreError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StoreError(f"session {session_id!r}: the stored session cannot be read "
                         f"({type(exc).__name__}: {exc})") from exc


def _stored_fields(d: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes a session takes from its stored data *d* (migrated), but the
    transcript's, by attribute name."""
    settled = load_messages([{"kind": "user", "parts": d.get("settled", [])}])[0]
    born = d.get("born")
    return {
        "_turn": int(d.get("turn", 0)),
        "_counters": {str(k): int(v) for k, v in d.get("counters", {}).items()},
        "_invalid_by_tool": {str(k): int(v) for k, v in d.get("invalid_by_tool", {}).items()},
        "_recent": [(str(a), str(b)) for a, b in d.get("recent_calls", [])],
        "_pending": {str(k): str(v) for k, v in d.get("pending", {}).items()},
        "_retries": {(str(t), str(g)): str(c) for t, g, c in d.get("retries", [])},
        "_settled": {p.call_id: p for p in settled.parts if isinstance(p, ToolResult)},
        "_born": born if isinstance(born, str) and born else None,
    }


def _plan_limits(d: Mapping[str, Any]) -> list[list[str]]:
    return [[str(g) for g in globs] for globs in d.get("plan_limits", [])]


def untrusted_sources_of(state: SessionState) -> tuple[str, ...]:
    """The tools whose untrusted results a stored session read (for pages and listings);
    none for a session that cannot be read (the store says which row)."""
    try:
        return Session.from_state(state).untrusted_sources
    except StoreError as exc:
        log.warning("%s", exc)
        return ()

