"""Server-rendered HTML. Every value from the store passes through :func:`h` (escape) and, when a
person must read it, through :func:`~anfitrion.approvals.make_visible` first."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .._canonical import canonical_json
from ..approvals import ApprovalAnswer, ApprovalRequest, make_visible
from ..store import AuditRecord, SessionState
from ._decisions import RequestState, state_of
from ._render import argument_views

__all__ = ["Row", "detail_page", "history_page", "layout", "login_page", "message_page",
           "pending_page", "pending_rows", "session_page", "sessions_page"]


def h(value: object) -> str:
    """Escape for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


def v(value: str) -> str:
    """Make invisible characters visible, then escape."""
    return h(make_visible(value))


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


def layout(title: str, body: str, *, csrf: str | None = None, user: str | None = None) -> str:
    nav = ""
    if csrf is not None:
        nav = (f'<nav><a href="/">Pending</a> <a href="/history">History</a> '
               f'<a href="/sessions">Sessions</a> <span class="who">signed in as {v(user or "")}'
               f'</span><form method="post" action="/logout" class="inline">'
               f'<input type="hidden" name="csrf" value="{h(csrf)}">'
               f'<button type="submit">Sign out</button></form></nav>')
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{h(title)} — anfitrion inbox</title>'
            f'<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
            f'<link rel="stylesheet" href="/static/inbox.css">'
            f'<script src="/static/inbox.js" defer></script></head>'
            f'<body><header><strong>anfitrion</strong> approval inbox{nav}</header>'
            f'<main>{body}</main></body></html>')


def login_page(problem: str = "") -> str:
    error = f'<p class="error" role="alert">{h(problem)}</p>' if problem else ""
    body = (f'<h1>Sign in</h1>{error}<form method="post" action="/login" class="login">'
            f'<label>Token <input type="password" name="token" autocomplete="off" required '
            f'autofocus></label><label>Your name (recorded with every decision) '
            f'<input type="text" name="name" maxlength="80" required></label>'
            f'<button type="submit">Sign in</button></form>'
            f'<p class="hint">The token was printed by <code>anfitrion serve</code>.</p>')
    return layout("Sign in", body)


def message_page(title: str, message: str, *, csrf: str, user: str,
                 back: str = "/") -> str:
    body = (f'<h1>{h(title)}</h1><p class="error" role="alert">{h(message)}</p>'
            f'<p><a href="{h(back)}">Back</a></p>')
    return layout(title, body, csrf=csrf, user=user)


@dataclass(frozen=True, slots=True)
class Row:
    """One pending request with what the list shows beside it."""

    request: ApprovalRequest
    warnings: Sequence[str] = ()


def _warning_list(warnings: Sequence[str]) -> str:
    if not warnings:
        return ""
    return '<ul class="warnings">' + "".join(f"<li>{v(w)}</li>" for w in warnings) + "</ul>"


def pending_rows(rows: Sequence[Row], now: datetime) -> str:
    if not rows:
        return '<tr><td colspan="7" class="empty">No request waits for a decision.</td></tr>'
    out = []
    for row in rows:
        r = row.request
        out.append(
            f'<tr data-request="{h(r.id)}"><td><a href="/approvals/{h(r.id)}">'
            f'{v(r.tool_name)}</a></td><td><span class="effect {h(r.effect)}">{h(r.effect)}'
            f'</span></td><td>{v(r.principal_id)}</td><td>{h(age(r, now))}</td>'
            f'<td>{h(expiry(r, now))}</td><td>{v(r.reason)}</td>'
            f'<td>{_warning_list(row.warnings)}</td></tr>')
    return "".join(out)


def pending_page(rows: Sequence[Row], now: datetime, *, csrf: str, user: str) -> str:
    body = ('<h1>Pending approvals</h1><p class="hint">Newest first; this list updates by '
            'itself.</p><table class="list"><thead><tr><th>Tool</th><th>Effect</th>'
            '<th>Principal</th><th>Asked</th><th>Expires</th><th>Why asked</th>'
            '<th>Warnings</th></tr></thead>'
            f'<tbody id="pending" data-source="/pending.html">{pending_rows(rows, now)}'
            '</tbody></table>')
    return layout("Pending", body, csrf=csrf, user=user)


def _answer_text(answer: ApprovalAnswer) -> str:
    word = "Approved" if answer.approved else "Denied"
    note = f" — {v(answer.note)}" if answer.note else ""
    return f"{word} by {v(answer.approver)} at {h(answer.at.isoformat(timespec='seconds'))}{note}"


@dataclass
class Detail:
    """Everything the detail page shows of one request."""

    request: ApprovalRequest
    answer: ApprovalAnswer | None
    used: bool
    warnings: Sequence[str] = ()
    diff: str | None = None
    email: str | None = None
    edit: Mapping[str, Any] | None = None


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        kind = ("add" if line.startswith("+") and not line.startswith("+++") else
                "del" if line.startswith("-") and not line.startswith("---") else
                "hunk" if line.startswith("@@") else "ctx")
        lines.append(f'<span class="{kind}">{v(line)}</span>')
    return "\n".join(lines)


def _decision_forms(r: ApprovalRequest, csrf: str) -> str:
    hidden = (f'<input type="hidden" name="csrf" value="{h(csrf)}">'
              f'<input type="hidden" name="digest" value="{h(r.digest)}">')
    # ASCII-escaped, so that an invisible character in the proposal stays visible in the editor
    edit_text = json.dumps(dict(r.arguments), indent=2, ensure_ascii=True, sort_keys=True)
    return (
        f'<section class="decide"><h2>Decide</h2>'
        f'<form method="post" action="/approvals/{h(r.id)}/decide" class="decision">{hidden}'
        f'<label>Note (optional) <textarea name="note" rows="2" maxlength="2000"></textarea>'
        f'</label><div class="buttons">'
        f'<button type="submit" name="decision" value="approve" class="approve">'
        f'Approve this exact call</button>'
        f'<button type="submit" name="decision" value="deny" class="deny">Deny</button>'
        f'</div></form>'
        f'<details class="edit"><summary>Approve with edits…</summary>'
        f'<p class="hint">The proposed call is denied and your arguments are approved in its '
        f'place. When the host resumes, they pass validation and the policy again before they '
        f'run; the model is told that a reviewer edited them.</p>'
        f'<form method="post" action="/approvals/{h(r.id)}/edit">{hidden}'
        f'<label>Arguments (JSON object) <textarea name="arguments" rows="10" '
        f'class="code">{h(edit_text)}</textarea></label>'
        f'<label>Note (optional) <textarea name="note" rows="2" maxlength="2000"></textarea>'
        f'</label><button type="submit" class="edit">Approve the edited call</button>'
        f'</form></details></section>')


def detail_page(d: Detail, now: datetime, *, csrf: str, user: str) -> str:
    r = d.request
    state = state_of(r, d.answer, now)
    rows = [("State", f'<span class="state {h(state.value)}">{h(state.value)}</span>'),
            ("Principal", v(r.principal_id)),
            ("Session", f'<a href="/sessions/{h(r.session_id)}">{h(r.session_id)}</a>'),
            ("Call id", v(r.call_id)), ("Effect", h(r.effect)),
            ("Why asked", f"{v(r.reason)} <code>[{v(r.rule_id)}]</code>"),
            ("Asked", f"{h(r.created_at.isoformat(timespec='seconds'))} ({h(age(r, now))})"),
            ("Expires", f"{h(r.expires_at.isoformat(timespec='seconds'))} "
                        f"({h(expiry(r, now))})"),
            ("Digest", f'<code class="digest">{h(r.digest)}</code>'),
            ("Tool definition", f"<code>{h(r.tool_definition_hash)}</code>")]
    if d.answer is not None:
        rows.append(("Decision", _answer_text(d.answer)
                     + (" (used by the host)" if d.used else "")))
    table = "".join(f"<tr><th>{k}</th><td>{val}</td></tr>" for k, val in rows)
    parts = [f'<h1>{v(r.tool_name)} <span class="effect {h(r.effect)}">{h(r.effect)}</span>'
             f'</h1><table class="meta">{table}</table>']
    if d.warnings:
        parts.append('<section><h2>Warnings</h2>' + _warning_list(d.warnings) + '</section>')
    args = "".join(
        f'<div class="argument"><h3><code>{h(a.name)}</code> <span class="length">'
        f'{a.length} characters</span></h3><pre class="value">{h(a.text)}</pre></div>'
        for a in argument_views(r.arguments))
    parts.append(f'<section><h2>Arguments</h2>{args or "<p>No arguments.</p>"}</section>')
    exact = json.dumps(dict(r.arguments), indent=2, ensure_ascii=True, sort_keys=True)
    parts.append(f'<section><h2>Exact arguments</h2><p class="hint">Canonical JSON with every '
                 f'non-ASCII character escaped; {len(canonical_json(dict(r.arguments)))} '
                 f'characters in canonical form.</p><pre class="value">{h(exact)}</pre>'
                 f'</section>')
    if d.diff is not None:
        parts.append(f'<section><h2>File change</h2><pre class="diff">{_diff_html(d.diff)}</pre>'
                     f'</section>')
    if d.email is not None:
        parts.append(f'<section><h2>The message as it will be sent</h2>'
                     f'<pre class="value email">{v(d.email)}</pre></section>')
    if d.edit is not None:
        replacement = d.edit.get("replacement_id")
        became = (f'the <a href="/approvals/{h(replacement)}">edited call</a>' if replacement
                  else "an edited call (the host creates it when the session resumes)")
        parts.append(f'<section><h2>Edited proposal</h2><p>{v(str(d.edit.get("editor")))} '
                     f'replaced the arguments with {became}; the host validates it and asks '
                     f'the policy again before it runs:</p><pre class="value">'
                     f'{v(json.dumps(d.edit.get("arguments"), indent=2, ensure_ascii=False))}'
                     f'</pre></section>')
    if state is RequestState.PENDING:
        parts.append(_decision_forms(r, csrf))
    return layout(f"{make_visible(r.tool_name)} — approval", "".join(parts), csrf=csrf,
                  user=user)


def history_page(items: Sequence[tuple[ApprovalRequest, ApprovalAnswer | None]], now: datetime,
                 *, csrf: str, user: str) -> str:
    rows = "".join(
        f'<tr><td><a href="/approvals/{h(r.id)}">{v(r.tool_name)}</a></td>'
        f'<td>{v(r.principal_id)}</td><td><a href="/sessions/{h(r.session_id)}">'
        f'{h(r.session_id[:12])}</a></td><td>{h(state_of(r, a, now).value)}</td>'
        f'<td>{v(a.approver) if a else ""}</td><td>{v(a.note) if a else ""}</td>'
        f'<td>{h((a.at if a else r.expires_at).isoformat(timespec="seconds"))}</td></tr>'
        for r, a in items)
    body = ('<h1>History</h1><table class="list"><thead><tr><th>Tool</th><th>Principal</th>'
            '<th>Session</th><th>Outcome</th><th>By</th><th>Note</th><th>At</th></tr></thead>'
            f'<tbody>{rows or "<tr><td colspan=7>Nothing decided yet.</td></tr>"}</tbody>'
            '</table>')
    return layout("History", body, csrf=csrf, user=user)


def sessions_page(sessions: Sequence[SessionState], *, csrf: str, user: str) -> str:
    ordered = sorted(sessions, key=lambda s: s.updated_at or datetime.min.replace(tzinfo=UTC),
                     reverse=True)
    rows = "".join(
        f'<tr><td><a href="/sessions/{h(s.session_id)}">{h(s.session_id)}</a></td>'
        f'<td>{v(s.principal_id)}</td><td>{h(s.status)}</td>'
        f'<td>{h(s.updated_at.isoformat(timespec="seconds") if s.updated_at else "")}</td></tr>'
        for s in ordered)
    body = ('<h1>Sessions</h1><table class="list"><thead><tr><th>Session</th><th>Principal</th>'
            '<th>Status</th><th>Updated</th></tr></thead>'
            f'<tbody>{rows or "<tr><td colspan=4>No sessions.</td></tr>"}</tbody></table>')
    return layout("Sessions", body, csrf=csrf, user=user)


def session_page(session_id: str, state: SessionState | None,
                 approvals: Sequence[tuple[ApprovalRequest, ApprovalAnswer | None]],
                 records: Sequence[AuditRecord], now: datetime, *, csrf: str,
                 user: str) -> str:
    head = f"<h1>Session <code>{h(session_id)}</code></h1>"
    if state is not None:
        untrusted = state.data.get("untrusted_sources") or []
        head += (f'<table class="meta"><tr><th>Principal</th><td>{v(state.principal_id)}</td>'
                 f'</tr><tr><th>Status</th><td>{h(state.status)}</td></tr>'
                 f'<tr><th>Untrusted sources read</th><td>'
                 f'{v(", ".join(map(str, untrusted))) or "none"}</td></tr></table>')
    approval_rows = "".join(
        f'<tr><td><a href="/approvals/{h(r.id)}">{v(r.tool_name)}</a></td>'
        f'<td>{h(state_of(r, a, now).value)}</td><td>{v(a.approver) if a else ""}</td></tr>'
        for r, a in approvals)
    audit_rows = "".join(
        f'<tr><td>{rec.seq}</td><td>{h(datetime.fromtimestamp(rec.at, UTC).isoformat())}</td>'
        f'<td>{h(rec.type)}</td><td><pre class="audit">'
        f'{h(json.dumps(dict(rec.data), indent=1, ensure_ascii=True, sort_keys=True))}'
        f'</pre></td></tr>' for rec in records)
    body = (head + '<h2>Approvals</h2><table class="list"><thead><tr><th>Tool</th>'
            '<th>State</th><th>By</th></tr></thead>'
            f'<tbody>{approval_rows or "<tr><td colspan=3>None.</td></tr>"}</tbody></table>'
            '<h2>Audit trail</h2><p class="hint">As stored: redacted previews and digests, '
            'never raw arguments.</p><table class="list audit"><thead><tr><th>#</th><th>At</th>'
            '<th>Event</th><th>Data</th></tr></thead>'
            f'<tbody>{audit_rows or "<tr><td colspan=4>No records.</td></tr>"}</tbody></table>')
    return layout(f"Session {session_id}", body, csrf=csrf, user=user)
