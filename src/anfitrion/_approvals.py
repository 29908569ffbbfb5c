"""Approvals: a person's yes or no, bound to exactly one call.

An :class:`ApprovalRequest` carries a *digest* — SHA-256 over the canonical JSON of session id,
principal, call id, tool name, tool definition hash and arguments — and a description rendered
from that same canonical object. An :class:`ApprovalAnswer` names the approver and is bound to
the digest; the gate executes only when the answer's digest equals the digest of the call it is
about to run, the request has not expired, and the answer has not been used.

Approvers answer now (``ApprovalAnswer``) or not now (``None``: the session suspends and the
answer comes later through the store — the inbox or ``anfitrion approvals``).

An approver may also *edit* the arguments (:meth:`ApprovalAnswer.edit`). The edit never approves
the original: the gate treats it as a new proposal for the same call id, which goes through
validate and decide again and needs its own approval (a new request with ``edit_of`` naming the
one it came from) — asked anew, or given by the same approver with the edit ("approve with
edits"). An approval never covers a session, a tool, or future calls.
"""

from __future__ import annotations

import inspect
import re
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeAlias, runtime_checkable

from ._canonical import canonical_json, digest
from ._conversation import JsonValue
from ._json import as_written
from .exceptions import UserError

__all__ = [
    "NO_APPROVER",
    "PREVIEW_KINDS",
    "ApprovalAnswer",
    "ApprovalRequest",
    "ApprovalVote",
    "Approver",
    "CallbackApprover",
    "DeferredApprover",
    "DenyAllApprover",
    "Quorum",
    "Reviewer",
    "approval_digest",
    "declined_text",
    "make_visible",
    "show_value",
]

DEFAULT_APPROVAL_TTL = timedelta(minutes=15)
PREVIEW_KINDS = frozenset({"email"})
"""What a tool may declare in ``metadata["preview"]`` (or ``preview =`` in the policy file's
``[tools."<name>"]``): ``"email"`` — the call sends the e-mail its ``to``, ``cc``, ``bcc``,
``reply_to``, ``subject`` and ``body`` arguments describe, and the inbox shows the message as
it will be sent. An undeclared tool gets no such panel, whatever its arguments are called."""


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


# a run of characters that could be a host name: no spaces, separators or URL punctuation
_HOSTISH = re.compile(r"[^\s@/\\:?#<>\"'()\[\],;=&|]+")
_DOTS = (".", "\u3002", "\uff0e", "\uff61")


def show_value(text: str) -> str:
    """:func:`make_visible`, plus non-ASCII domain names shown in punycode.

    A person cannot tell ``exаmple.com`` (Cyrillic ``а``) from ``example.com``; the punycode
    ``xn--exmple-4nf.com`` makes the difference plain, and the name as written follows.

    Example:
        >>> show_value("bob@exаmple.com")
        'bob@xn--exmple-4nf.com ⟨non-ASCII domain; as written: exаmple.com⟩'
    """
    out: list[str] = []
    last = 0
    for m in _HOSTISH.finditer(text):
        # a full stop (or "!", "?") after a word ends a sentence: ``Grüße.`` is no domain
        token = m.group(0).rstrip("".join(_DOTS) + "!?…")
        if token.isascii() or not any(d in token for d in _DOTS):
            continue
        try:
            ascii_name = token.lower().encode("idna").decode("ascii")
        except UnicodeError:
            ascii_name = token.encode("ascii", "backslashreplace").decode("ascii")
        out.append(make_visible(text[last:m.start()]))
        out.append(f"{ascii_name} ⟨non-ASCII domain; as written: {make_visible(token)}⟩")
        last = m.start() + len(token)
    out.append(make_visible(text[last:]))
    return "".join(out)


def _wrap(text: str, width: int) -> list[str]:
    """Break *text* into lines of at most *width* characters, never dropping any and, where
    possible, not inside a ``⟨…⟩`` marker."""
    lines: list[str] = []
    for raw in text.split("\n"):
        current = ""
        depth = 0
        for ch in raw:
            current += ch
            depth += (ch == "⟨") - (ch == "⟩")
            if (len(current) >= width and depth <= 0) or len(current) >= 2 * width:
                lines.append(current)
                current = ""
                depth = 0
        lines.append(current)
    return lines


MAX_QUORUM = 10
"""The most distinct approvers a quorum may require."""


@dataclass(frozen=True, slots=True)
class Quorum:
    """The two-person rule: *required* distinct people must approve, each holding one of
    *roles* (any role when empty). A rejection by one qualified person rejects the call; the
    request's expiry applies to all the votes together.

    Example:
        >>> Quorum(2, ("finance",)).qualifies(frozenset({"finance", "ops"}))
        True
    """

    required: int
    roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.required, bool) or not isinstance(self.required, int) \
                or not 1 <= self.required <= MAX_QUORUM:
            raise UserError(f"a quorum needs between 1 and {MAX_QUORUM} approvers")
        if any(not isinstance(r, str) or not r for r in self.roles):
            raise UserError("quorum roles must be non-empty strings")

    def qualifies(self, roles: frozenset[str]) -> bool:
        """Whether a person holding *roles* may vote."""
        return not self.roles or bool(roles.intersection(self.roles))

    def stricter(self, other: Quorum | None) -> Quorum:
        """The stricter of two quorums (more approvers; on a tie, the one naming roles)."""
        if other is None:
            return self
        return max(self, other, key=lambda q: (q.required, bool(q.roles)))

    def to_dict(self) -> dict[str, Any]:
        return {"required": self.required, "roles": list(self.roles)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Quorum:
        return cls(int(d["required"]), tuple(d.get("roles", ())))


@dataclass(frozen=True, slots=True)
class Reviewer:
    """A person a door has authenticated (their own token or signed-in session), and the
    roles they hold. Only a reviewer may vote on a request that needs a :class:`Quorum`: a name
    typed beside a shared token is not an identity two people could not share.

    A reviewer signed in with OpenID Connect also carries who the provider said they are:
    ``issuer`` and ``subject`` (the ID token's ``iss`` and ``sub``) and ``display_name``;
    answers and votes record them (:meth:`identity`)."""

    name: str
    roles: frozenset[str] = frozenset()
    issuer: str = ""
    subject: str = ""
    display_name: str = ""

    def identity(self) -> dict[str, str] | None:
        """What an answer's audit record keeps of an identity provider's word (``None``
        for a reviewer no provider vouched for)."""
        if not self.issuer:
            return None
        return {"issuer": self.issuer, "subject": self.subject, "name": self.display_name}


@dataclass(frozen=True, slots=True)
class ApprovalVote:
    """One person's vote on a request that needs a :class:`Quorum`, bound to its digest.

    Attributes:
        voter: the person (without the door: ``alice`` through the inbox and the CLI is
            one person, who votes once).
        roles: the roles the door found the person holding when they voted.
        via: the door the vote came through (``inbox``, ``api``, ``webhook``, ``mcp``, ``cli``).
    """

    request_id: str
    digest: str
    voter: str
    approved: bool
    roles: tuple[str, ...] = ()
    note: str = ""
    via: str = ""
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def to_dict(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "digest": self.digest, "voter": self.voter,
                "approved": self.approved, "roles": list(self.roles), "note": self.note,
                "via": self.via, "at": self.at.isoformat()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ApprovalVote:
        return cls(d["request_id"], d["digest"], d["voter"], bool(d["approved"]),
                   tuple(d.get("roles", ())), d.get("note", ""), d.get("via", ""),
                   datetime.fromisoformat(d["at"]))


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
    edit_of: str | None = None
    """The request whose answer proposed these arguments as an edit (``None``: the model's)."""
    tool_description: str | None = None
    """The tool's description as the model saw it, for display only: not part of the digest
    (the tool definition hash covers it). ``None``: not recorded (requests made before it was)."""
    quorum: Quorum | None = None
    """Several distinct people must approve (the two-person rule); ``None``: one answer."""
    preview: str | None = None
    """How a reviewer is shown what the call does besides its arguments: ``"email"`` for a
    tool that declares it sends the e-mail its arguments describe (:data:`PREVIEW_KINDS`,
    ``Tool.metadata["preview"]``). Display only, like the description: not in the digest."""

    @classmethod
    def for_call(cls, *, session_id: str, principal_id: str, call_id: str, tool_name: str,
                 tool_definition_hash: str, arguments: Mapping[str, JsonValue], effect: str,
                 reason: str, rule_id: str, warnings: tuple[str, ...] = (),
                 now: datetime | None = None, ttl: timedelta = DEFAULT_APPROVAL_TTL,
                 edit_of: str | None = None, tool_description: str | None = None,
                 quorum: Quorum | None = None, preview: str | None = None
                 ) -> ApprovalRequest:
        created = now or datetime.now(UTC)
        return cls(
            id=uuid.uuid4().hex, session_id=session_id, principal_id=principal_id,
            call_id=call_id, tool_name=tool_name, tool_definition_hash=tool_definition_hash,
            arguments=arguments, effect=effect, reason=reason, rule_id=rule_id,
            warnings=warnings, created_at=created, expires_at=created + ttl, edit_of=edit_of,
            tool_description=tool_description, quorum=quorum,
            preview=preview if preview in PREVIEW_KINDS else None,
            digest=approval_digest(session_id=session_id, principal_id=principal_id,
                                   call_id=call_id, tool_name=tool_name,
                                   tool_definition_hash=tool_definition_hash,
                                   arguments=arguments))

    def expired(self, now: datetime | None = None) -> bool:
        return (now or datetime.now(UTC)) >= self.expires_at

    def describe(self, width: int = 100) -> str:
        """Plain-language text for a person, rendered from the canonical arguments.

        Every value is shown in full — long ones over several lines, never cut — with
        invisible characters (control, ANSI escapes, bidi overrides, zero-width) made visible
        and non-ASCII domains shown in punycode (:func:`show_value`).
        """
        return "\n".join(self.render_lines(width))

    def render_lines(self, width: int = 100) -> list[str]:
        """The lines of :meth:`describe`, each at most about *width* characters."""
        width = max(width, 40)
        lines = [f"Tool: {make_visible(self.tool_name)} ({self.effect})",
                 f"For: {make_visible(self.principal_id)}  session {self.session_id}",
                 f"Why asked: {make_visible(self.reason)} [{make_visible(self.rule_id)}]"]
        if self.quorum is not None:
            roles = f" holding {', '.join(self.quorum.roles)}" if self.quorum.roles else ""
            lines.append(f"Needs {self.quorum.required} distinct approvers{make_visible(roles)}.")
        if self.edit_of:
            lines.append("These arguments are a person's edit of an earlier proposal.")
        lines += [f"Warning: {show_value(w)}" for w in self.warnings]
        lines.append("Arguments:")
        for key in sorted(self.arguments):
            value = self.arguments[key]
            text = value if isinstance(value, str) else canonical_json(as_written(value))
            head = f"  {make_visible(key)} = "
            body = _wrap(show_value(text), width - len(head))
            lines.append(head + body[0])
            lines += [" " * len(head) + part for part in body[1:]]
            if len(body) > 1:
                lines.append(" " * len(head) + f"[{len(text)} characters over {len(body)} "
                             "lines, shown in full]")
        lines.append(f"Digest: {self.digest[:16]}…  expires {self.expires_at:%Y-%m-%d %H:%M} UTC")
        return lines

    def pages(self, lines_per_page: int = 40, width: int = 100) -> list[str]:
        """:meth:`describe` split into pages for a terminal; all of it, in order."""
        lines = self.render_lines(width)
        size = max(lines_per_page, 5)
        return ["\n".join(lines[i:i + size]) for i in range(0, len(lines), size)]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "digest": self.digest, "session_id": self.session_id,
                "principal_id": self.principal_id, "call_id": self.call_id,
                "tool_name": self.tool_name, "tool_definition_hash": self.tool_definition_hash,
                "arguments": dict(self.arguments), "effect": self.effect, "reason": self.reason,
                "rule_id": self.rule_id, "warnings": list(self.warnings),
                "created_at": self.created_at.isoformat(),
                "expires_at": self.expires_at.isoformat(), "edit_of": self.edit_of,
                "tool_description": self.tool_description,
                **({"quorum": self.quorum.to_dict()} if self.quorum is not None else {}),
                **({"preview": self.preview} if self.preview is not None else {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ApprovalRequest:
        return cls(id=d["id"], digest=d["digest"], session_id=d["session_id"],
                   principal_id=d["principal_id"], call_id=d["call_id"],
                   tool_name=d["tool_name"], tool_definition_hash=d["tool_definition_hash"],
                   arguments=d["arguments"], effect=d["effect"], reason=d["reason"],
                   rule_id=d["rule_id"], warnings=tuple(d.get("warnings", ())),
                   created_at=datetime.fromisoformat(d["created_at"]),
                   expires_at=datetime.fromisoformat(d["expires_at"]),
                   edit_of=d.get("edit_of"), tool_description=d.get("tool_description"),
                   quorum=Quorum.from_dict(d["quorum"]) if d.get("quorum") else None,
                   preview=d["preview"] if d.get("preview") in PREVIEW_KINDS else None)


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """A person's answer to one request; valid only for the request's digest, used once.

    Attributes:
        approver: who answered (a person's name, ``terminal``, ``deny-all``).
        note: the approver's words; on a refusal the model sees them after
            ``declined by a person:`` (the policy's own refusals read ``denied by policy:``).
        edited_arguments: an edit instead of a yes: the request is *not* approved; the gate
            turns the edit into a new proposal that goes through validate and decide again
            and needs its own approval — given here already when *approved* is true
            ("approve with edits"), else asked for anew.
    """

    request_id: str
    digest: str
    approved: bool
    approver: str
    note: str = ""
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    edited_arguments: Mapping[str, JsonValue] | None = None
    withdrawn: bool = False
    """Not a person's answer: the host withdrew the request (the client that proposed the
    call went away), so nobody can approve it for nothing. Never approves."""

    @classmethod
    def withdrawal(cls, request: ApprovalRequest, reason: str) -> ApprovalAnswer:
        """The host withdraws *request*: no person can answer it any more."""
        return cls(request.id, request.digest, False, "anfitrion", f"withdrawn: {reason}",
                   datetime.now(UTC), None, True)

    @classmethod
    def to(cls, request: ApprovalRequest, approved: bool, approver: str,
           note: str = "", *, at: datetime | None = None) -> ApprovalAnswer:
        return cls(request.id, request.digest, approved, approver, note,
                   at or datetime.now(UTC))

    @classmethod
    def edit(cls, request: ApprovalRequest, arguments: Mapping[str, JsonValue], approver: str,
             note: str = "", *, approve: bool = False,
             at: datetime | None = None) -> ApprovalAnswer:
        """Propose *arguments* instead; they go through validate and decide again.

        The request itself is never approved by an edit. With *approve* ("approve with
        edits"), the same approver also approves the edited call — if the policy still asks
        for it after deciding again; without it, the edit waits for its own approval.
        """
        return cls(request.id, request.digest, approve, approver, note,
                   at or datetime.now(UTC), dict(arguments))

    def to_dict(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "digest": self.digest, "approved": self.approved,
                "approver": self.approver, "note": self.note, "at": self.at.isoformat(),
                "edited_arguments": None if self.edited_arguments is None
                else dict(self.edited_arguments), **({"withdrawn": True} if self.withdrawn
                                                     else {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ApprovalAnswer:
        edited = d.get("edited_arguments")
        return cls(d["request_id"], d["digest"], bool(d["approved"]), d["approver"],
                   d.get("note", ""), datetime.fromisoformat(d["at"]),
                   None if edited is None else dict(edited), bool(d.get("withdrawn", False)))


@runtime_checkable
class Approver(Protocol):
    """Answers approval requests now, or returns ``None`` to answer later (suspend)."""

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer | None: ...


NO_APPROVER = "deny-all"
"""The approver name of :class:`DenyAllApprover`: its "no" is the host's rule (nobody is there
to ask), told to the model as ``denied by policy:``; any other approver's "no" is a person's
(``declined by a person:``)."""


def declined_text(note: str) -> str:
    """What the model is told when a person said no to its call, with their note."""
    return f"declined by a person: {note}" if note.strip() else \
        "declined by a person (no reason given)"


class DenyAllApprover:
    """The default: nobody is there to approve, so every ``ask`` is denied, saying why."""

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer.to(request, False, NO_APPROVER,
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


def with_expiry(request: ApprovalRequest, expires_at: datetime) -> ApprovalRequest:
    """A copy of *request* expiring at *expires_at* (tests, operators)."""
    return replace(request, expires_at=expires_at)


ApproverCallback: TypeAlias = Callable[[ApprovalRequest], Awaitable[ApprovalAnswer | None]]
