"""Server-rendered HTML from the Jinja2 templates in ``templates/``, autoescaped.

Every value from the store is hostile: a model or a tool wrote it. Templates never mark a value
safe; they show it through the ``visible`` filter, which escapes it and turns each hidden
character into a ``<mark class="hidden-char">`` badge. The badges come from
:func:`~anfitrion.web._render.visible_pieces`, character by character — never from reading the
text back — so an argument that spells out ``⟨U+202E RLO⟩`` stays plain text and cannot create
markup. The CSP allows no inline script or style: all of it is in ``static/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jinja2
from markupsafe import Markup, escape

from .._answers import state_of
from .._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote, make_visible
from .._canonical import canonical_json
from .._redaction import redact
from .._session import untrusted_sources_of
from ..store import AuditRecord, SessionState
from ._render import Intent, Notice, Piece, argument_views, plural, visible_pieces

__all__ = ["Detail", "Row", "approvals_so_far", "detail_page", "history_page", "login_page",
           "message_page", "pending_page", "pending_rows", "pending_title", "render_pieces",
           "session_page", "sessions_page", "visible_html"]


def render_pieces(pieces: Sequence[Piece]) -> Markup:
    """Pieces as HTML: plain text escaped, each marker a ``<mark class="hidden-char">``."""
    out = []
    for piece in pieces:
        if piece.hidden is None:
            out.append(escape(piece.text))
        else:
            out.append(Markup('<mark class="hidden-char" title="{}">{}</mark>').format(
                piece.hidden, piece.text))
    return Markup("").join(out)


def visible_html(text: object, *, layout_newlines: bool = False) -> Markup:
    """Hostile *text* as HTML: escaped, its hidden characters shown as marked badges."""
    return render_pieces(visible_pieces(str(text), layout_newlines=layout_newlines))


def _span(seconds: float) -> str:
    seconds = abs(int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d"


def age(request: ApprovalRequest, now: datetime) -> str:
    return _span((now - request.created_at).total_seconds()) + " ago"


def expiry(request: ApprovalRequest, now: datetime) -> str:
    left = (request.expires_at - now).total_seconds()
    return "expired" if left <= 0 else "in " + _span(left)


def _clip(text: str, limit: int) -> str:
    """A one-line preview; the page behind it shows the text in full."""
    # only spaces, newlines and tabs fold: every other hidden character stays, to be marked
    line = re.sub(r"[ \n\t]+", " ", str(text)).strip()
    return line if len(line) <= limit else line[:limit - 1] + "…"


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("anfitrion.web", "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_ENV.filters.update(
    visible=visible_html,
    visible_layout=lambda text: visible_html(text, layout_newlines=True),
    pieces=render_pieces,
    visible_text=make_visible,  # where no markup may go: <title>
    clip=_clip,
    # an approver's note is free text a person typed: a token pasted into it is masked like
    # in the audit log (issue 35)
    masked=lambda text: redact(str(text), 2000),
    iso=lambda moment: moment.isoformat(timespec="seconds"),
    timestamp=lambda at: datetime.fromtimestamp(at, UTC).isoformat(),
    audit_json=lambda data: json.dumps(dict(data), indent=1, ensure_ascii=True,
                                       sort_keys=True))
def approvals_so_far(request: ApprovalRequest, votes: Sequence[ApprovalVote]) -> str:
    """``1 of 2 approvals (alice)`` for a request that needs several approvers."""
    if request.quorum is None:
        return ""
    approving = [v.voter for v in votes if v.approved]
    who = f" ({', '.join(approving)})" if approving else ""
    return f"{len(approving)} of {request.quorum.required} approvals{who}"


_ENV.globals.update(age=age, expiry=expiry, plural=plural, state_of=state_of,
                    approvals_so_far=approvals_so_far)


def _render(template: str, title: str, *, csrf: str | None = None, user: str | None = None,
            section: str = "", **context: Any) -> str:
    return _ENV.get_template(template).render(title=title, csrf=csrf, user=user,
                                               section=section, **context)


def login_page(problem: str = "", *, auto_sign_in: bool = False,
               provider: str | None = None) -> str:
    """The sign-in form; with *auto_sign_in* its script may submit a token from the link;
    with *provider* (its host name) a button signing in there with OpenID Connect."""
    return _render("login.html", "Sign in", problem=problem, auto_sign_in=auto_sign_in,
                   provider=provider)


def message_page(title: str, message: str, *, csrf: str, user: str, back: str = "/") -> str:
    return _render("message.html", title, csrf=csrf, user=user, message=message, back=back)


def connect_failed(reason: str) -> str:
    """A refused connect callback (shown without the navigation: the browser came back from
    another site, so the session cookie may not be sent)."""
    return _render("message.html", "Not connected", message=reason, back="/connect")


def connect_page(servers: Sequence[tuple[str, Any]], *, csrf: str, user: str,
                 problem: str = "") -> str:
    """The servers a person may connect their own account to, and whether they have."""
    return _render("connect.html", "Connected accounts", csrf=csrf, user=user,
                   servers=servers, problem=problem)


@dataclass(frozen=True, slots=True)
class Row:
    """One pending request with what the list shows beside it."""

    request: ApprovalRequest
    notices: Sequence[Notice] = ()
    intent: Intent = field(default_factory=Intent)
    votes: tuple[ApprovalVote, ...] = ()
    """On a request that needs several approvers: who has voted so far."""


def pending_title(count: int) -> str:
    """The pending page's title, with the count first (seen in a tab bar)."""
    return f"({count}) Pending" if count else "Pending"


def pending_rows(rows: Sequence[Row], now: datetime) -> str:
    return _ENV.get_template("pending_rows.html").render(rows=rows, now=now)


def pending_page(rows: Sequence[Row], now: datetime, *, csrf: str, user: str) -> str:
    return _render("pending.html", pending_title(len(rows)), csrf=csrf, user=user,
                   section="pending", rows=rows, now=now)


@dataclass
class Detail:
    """Everything the detail page shows of one request."""

    request: ApprovalRequest
    answer: ApprovalAnswer | None
    used: bool
    notices: Sequence[Notice] = ()
    diff: str | None = None
    email: str | None = None
    edit: Mapping[str, Any] | None = None
    intent: Intent = field(default_factory=Intent)
    votes: tuple[ApprovalVote, ...] = ()


def _diff_lines(diff: str) -> list[tuple[str, str]]:
    lines = []
    for line in diff.splitlines():
        kind = ("add" if line.startswith("+") and not line.startswith("+++") else
                "del" if line.startswith("-") and not line.startswith("---") else
                "hunk" if line.startswith("@@") else "ctx")
        lines.append((kind, line))
    return lines


def detail_page(d: Detail, now: datetime, *, csrf: str, user: str) -> str:
    r = d.request
    arguments = dict(r.arguments)
    return _render(
        "detail.html", f"{r.tool_name} — approval", csrf=csrf, user=user, d=d, now=now,
        state=state_of(r, d.answer, now).value,
        arguments=argument_views(r.arguments, d.intent.written_numbers),
        # ASCII-escaped, so that an invisible character in the proposal stays visible
        exact=json.dumps(arguments, indent=2, ensure_ascii=True, sort_keys=True),
        edit_text=json.dumps(arguments, indent=2, ensure_ascii=True, sort_keys=True),
        canonical_length=len(canonical_json(arguments)),
        diff_lines=_diff_lines(d.diff) if d.diff is not None else [],
        edit_shown=json.dumps(d.edit.get("arguments"), indent=2, ensure_ascii=False)
        if d.edit is not None else "")


def history_page(items: Sequence[tuple[ApprovalRequest, ApprovalAnswer | None]], now: datetime,
                 *, csrf: str, user: str) -> str:
    return _render("history.html", "History", csrf=csrf, user=user, section="history",
                   items=items, now=now)


def sessions_page(sessions: Sequence[SessionState], *, csrf: str, user: str) -> str:
    ordered = sorted(sessions, key=lambda s: s.updated_at or datetime.min.replace(tzinfo=UTC),
                     reverse=True)
    return _render("sessions.html", "Sessions", csrf=csrf, user=user, section="sessions",
                   sessions=ordered)


def session_page(session_id: str, state: SessionState | None,
                 approvals: Sequence[tuple[ApprovalRequest, ApprovalAnswer | None]],
                 records: Sequence[AuditRecord], now: datetime, *, csrf: str,
                 user: str) -> str:
    untrusted = list(untrusted_sources_of(state)) if state is not None else []
    from .._host import audit_outcomes

    return _render("session.html", f"Session {session_id}", csrf=csrf, user=user,
                   section="sessions", session_id=session_id, state=state, untrusted=untrusted,
                   approvals=approvals, records=records, now=now,
                   outcomes=audit_outcomes(records))
