"""Approvals: a person's yes or no, bound to exactly one call.

An :class:`ApprovalRequest` carries a *digest* — SHA-256 over the canonical JSON of session id,
principal, call id, tool name, tool definition hash and arguments — and a description rendered
from that same canonical object. An :class:`ApprovalAnswer` names the approver and is bound to
the digest; the gate executes only when the answer's digest equals the digest of the call it is
about to run, the request has not expired, and the answer has not been used.

Approvers answer now (``ApprovalAnswer``) or not now (``None``: the session suspends and the
answer comes later through the store — the inbox or ``anfitrion approvals``).
"""

from __future__ import annotations

import inspect
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeAlias, runtime_checkable

import anyio.to_thread

from ._canonical import canonical_json, digest
from .conversation import JsonValue

__all__ = [
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "CallbackApprover",
    "DeferredApprover",
    "DenyAllApprover",
    "TerminalApprover",
    "approval_digest",
    "make_visible",
]

DEFAULT_APPROVAL_TTL = timedelta(minutes=15)


def approval_digest(*, session_id: str, principal_id: str, call_id: str, tool_name: str,
                    tool_definition_hash: str, arguments: Mapping[str, JsonValue]) -> str:
    """The digest an approval is bound to."""
    return digest({"session_id": session_id, "principal_id": principal_id, "call_id": call_id,
                   "tool": tool_name, "tool_definition_hash": tool_definition_hash,
                   "arguments": arguments})


_INVISIBLE = {
    "\u200b": "ZWSP", "\u200c": "ZWNJ", "\u200d": "ZWJ", "\u2060": "WJ", "\ufeff": "BOM",
    "\u202a": "LRE", "\u202b": "RLE", "\u202c": "PDF", "\u202d": "LRO", "\u202e": "RLO",
    "\u2066": "LRI", "\u2067": "RLI", "\u2068": "FSI", "\u2069": "PDI", "\u200e": "LRM",
    "\u200f": "RLM", "\u061c": "ALM", "\u00ad": "SHY",
}


def make_visible(text: str) -> str:
    """Show what a person could not see: control, bidi, zero-width and format characters.

    Newlines and tabs are kept as layout but marked; ANSI escape sequences lose their ESC.

    Example:
        >>> make_visible("bob\u202e@evil.com")
        'bob⟨U+202E RLO⟩@evil.com'
    """
    out: list[str] = []
    for ch in text:
        if ch == "\n":
            out.append("⏎\n")
        elif ch == "\t":
            out.append("⇥")
        elif ch in _INVISIBLE:
            out.append(f"⟨U+{ord(ch):04X} {_INVISIBLE[ch]}⟩")
        elif ch == "\x1b":
            out.append("⟨ESC⟩")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"):
            out.append(f"⟨U+{ord(ch):04X}⟩")
        else:
            out.append(ch)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A request for a person to approve one exact call."""

    id: str
    digest: str
    session_id: str
    principal_id: str
    call_id: str
    tool_name: str
    tool_definition_hash: str
    arguments: Mapping[str, JsonValue]
    effect: str
    reason: str
    rule_id: str
    warnings: tuple[str, ...] = ()
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    expires_at: datetime = field(default_factory=lambda: datetime.now(UTC) + DEFAULT_APPROVAL_TTL)

    @classmethod
    def for_call(cls, *, session_id: str, principal_id: str, call_id: str, tool_name: str,
                 tool_definition_hash: str, arguments: Mapping[str, JsonValue], effect: str,
                 reason: str, rule_id: str, warnings: tuple[str, ...] = (),
                 now: datetime | None = None,
                 ttl: timedelta = DEFAULT_APPROVAL_TTL) -> ApprovalRequest:
        created = now or datetime.now(UTC)
        return cls(
            id=uuid.uuid4().hex, session_id=session_id, principal_id=principal_id,
            call_id=call_id, tool_name=tool_name, tool_definition_hash=tool_definition_hash,
            arguments=arguments, effect=effect, reason=reason, rule_id=rule_id,
            warnings=warnings, created_at=created, expires_at=created + ttl,
            digest=approval_digest(session_id=session_id, principal_id=principal_id,
                                   call_id=call_id, tool_name=tool_name,
                                   tool_definition_hash=tool_definition_hash,
                                   arguments=arguments))

    def expired(self, now: datetime | None = None) -> bool:
        return (now or datetime.now(UTC)) >= self.expires_at

    def describe(self) -> str:
        """Plain-language text for a person, rendered from the canonical arguments."""
        lines = [f"Tool: {make_visible(self.tool_name)} ({self.effect})",
                 f"For: {make_visible(self.principal_id)}  session {self.session_id}",
                 f"Why asked: {self.reason} [{self.rule_id}]"]
        lines += [f"Warning: {make_visible(w)}" for w in self.warnings]
        lines.append("Arguments:")
        for key in sorted(self.arguments):
            value = self.arguments[key]
            text = value if isinstance(value, str) else canonical_json(value)
            lines.append(f"  {make_visible(key)} = {make_visible(text)}"
                         + (f"   ({len(text)} characters)" if len(text) > 80 else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "digest": self.digest, "session_id": self.session_id,
                "principal_id": self.principal_id, "call_id": self.call_id,
                "tool_name": self.tool_name, "tool_definition_hash": self.tool_definition_hash,
                "arguments": dict(self.arguments), "effect": self.effect, "reason": self.reason,
                "rule_id": self.rule_id, "warnings": list(self.warnings),
                "created_at": self.created_at.isoformat(),
                "expires_at": self.expires_at.isoformat()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ApprovalRequest:
        return cls(id=d["id"], digest=d["digest"], session_id=d["session_id"],
                   principal_id=d["principal_id"], call_id=d["call_id"],
                   tool_name=d["tool_name"], tool_definition_hash=d["tool_definition_hash"],
                   arguments=d["arguments"], effect=d["effect"], reason=d["reason"],
                   rule_id=d["rule_id"], warnings=tuple(d.get("warnings", ())),
                   created_at=datetime.fromisoformat(d["created_at"]),
                   expires_at=datetime.fromisoformat(d["expires_at"]))


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """A person's answer to one request; valid only for the request's digest."""

    request_id: str
    digest: str
    approved: bool
    approver: str
    note: str = ""
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @classmethod
    def to(cls, request: ApprovalRequest, approved: bool, approver: str,
           note: str = "") -> ApprovalAnswer:
        return cls(request.id, request.digest, approved, approver, note)

    def to_dict(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "digest": self.digest, "approved": self.approved,
                "approver": self.approver, "note": self.note, "at": self.at.isoformat()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ApprovalAnswer:
        return cls(d["request_id"], d["digest"], bool(d["approved"]), d["approver"],
                   d.get("note", ""), datetime.fromisoformat(d["at"]))


@runtime_checkable
class Approver(Protocol):
    """Answers approval requests now, or returns ``None`` to answer later (suspend)."""

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer | None: ...


class DenyAllApprover:
    """The default: nobody is there to approve, so every ``ask`` is denied, saying why."""

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer.to(request, False, "deny-all",
                                 "a person must approve this call and no approver is configured")


class DeferredApprover:
    """Answers later: the session suspends; a person decides in the inbox or the CLI."""

    async def decide(self, request: ApprovalRequest) -> None:
        return None


CallbackResult: TypeAlias = "bool | ApprovalAnswer | None"


class CallbackApprover:
    """Asks a function ``(request) -> bool | ApprovalAnswer | None`` (sync or async).

    Example:
        >>> approver = CallbackApprover(lambda request: request.tool_name == "write_draft")
    """

    def __init__(self, callback: Callable[[ApprovalRequest], Any], *,
                 name: str = "callback") -> None:
        self._callback = callback
        self._name = name

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        result = self._callback(request)
        if inspect.isawaitable(result):
            result = await result
        if result is None or isinstance(result, ApprovalAnswer):
            return result
        return ApprovalAnswer.to(request, bool(result), self._name)


class TerminalApprover:
    """Shows the request on the terminal and waits for y/n. Ctrl-C or end of input = deny."""

    def __init__(self, *, approver: str = "terminal",
                 prompt: Callable[[str], str] = input,
                 show: Callable[[str], None] = print) -> None:
        self._approver = approver
        self._prompt = prompt
        self._show = show

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer:
        self._show("\n── approval needed " + "─" * 40 + "\n" + request.describe())

        def ask() -> str:
            try:
                return self._prompt("Approve this exact call? [y/N] ")
            except (EOFError, KeyboardInterrupt):
                return ""

        answer = (await anyio.to_thread.run_sync(ask)).strip().lower()
        approved = answer in ("y", "yes")
        return ApprovalAnswer.to(request, approved, self._approver,
                                 "" if approved else "declined at the terminal")


def with_expiry(request: ApprovalRequest, expires_at: datetime) -> ApprovalRequest:
    """A copy of *request* expiring at *expires_at* (tests, operators)."""
    return replace(request, expires_at=expires_at)


ApproverCallback: TypeAlias = Callable[[ApprovalRequest], Awaitable[ApprovalAnswer | None]]
