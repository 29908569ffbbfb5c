"""``anfitrion approvals``: decide waiting calls from any terminal.

``list [--unknown] [--all] [--json]``, ``show ID``, ``approve ID [--note]``, ``deny ID [--note]``.
An answer is bound to the request's digest (the exact call) and recorded once: if two people
answer at the same instant, the first one counts and the second is told so.
"""

from __future__ import annotations

import getpass
import json
from datetime import UTC
from typing import Any

import click

from .. import answers
from .._apps import DEMO_APP, GATEWAY_APP
from ..approvals import ApprovalAnswer, ApprovalRequest
from ..store import Store
from ._common import resolve_url, run_with_store, shown, shown_store, store_option


@click.group("approvals")
def command() -> None:
    """Approval requests: list them, show one, approve or deny it."""


MIN_PREFIX = 6
"""The fewest characters of an id that ``show``, ``approve`` and ``deny`` accept for it."""


def _api_state(answer: ApprovalAnswer | None, request: ApprovalRequest) -> str:
    """The request's state as the inbox API names it (pending, approved, denied, edited,
    withdrawn, expired)."""
    return answers.state_of(request, answer).value


def _state(answer: ApprovalAnswer | None, used: bool, request: ApprovalRequest) -> str:
    word = _api_state(answer, request)
    return f"{word} (used)" if used and answer is not None else word


def _approval_json(request: ApprovalRequest, answer: ApprovalAnswer | None,
                   used: bool) -> dict[str, Any]:
    """One request in the inbox API's shape (``GET /api/v1/approvals``)."""
    return {"request": request.to_dict(), "state": _api_state(answer, request),
            "answer": answer.to_dict() if answer else None, "used": used}


async def _find(store: Store, request_id: str, where: str = ""
                ) -> tuple[ApprovalRequest, ApprovalAnswer | None, bool]:
    """The request with this id, or with this unique prefix of at least 6 characters."""
    found = await store.get_approval(request_id)
    in_store = f" in {where}" if where else ""
    if found is None and len(request_id) >= MIN_PREFIX:  # a unique prefix, as people type them
        matches = [r for r in await store.list_approvals(pending_only=False)
                   if r.id.startswith(request_id)]
        if len(matches) > 1:
            raise click.ClickException(
                f"{request_id!r} is the start of {len(matches)} approval requests{in_store}: "
                "give more of the id")
        if len(matches) == 1:
            found = await store.get_approval(matches[0].id)
    if found is None:
        hint = "" if len(request_id) >= MIN_PREFIX else (
            f" (a shortened id needs at least {MIN_PREFIX} characters)")
        raise click.ClickException(f"no approval request {request_id!r}{in_store}{hint}")
    return found


@command.command("list")
@store_option
@click.option("--all", "show_all", is_flag=True, help="Include answered requests.")
@click.option("--session", "session_id", default=None, help="Only this session's requests.")
@click.option("--unknown", is_flag=True,
              help="List executions whose outcome is unknown (claimed, never settled).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(store_url: str | None, show_all: bool, session_id: str | None, unknown: bool,
          as_json: bool) -> None:
    """List approval requests waiting for a person (or unknown outcomes).

    --json prints the inbox API's shape: {"approvals": [{"request", "state", "answer",
    "used"}, …]}.
    """
    where = shown_store(resolve_url(store_url))
    if unknown:
        async def unknowns(store: Store) -> list[dict[str, Any]]:
            rows = []
            for sid, call_id in await store.list_unknown_executions():
                entry = await store.execution_state(sid, call_id)
                rows.append({"session_id": sid, "call_id": call_id,
                             "state": entry.state.value if entry else "unknown",
                             "since": entry.updated_at.isoformat()
                             if entry and entry.updated_at else None})
            return rows

        rows = run_with_store(store_url, unknowns)
        if as_json:
            click.echo(json.dumps(rows, indent=2))
        elif not rows:
            click.echo(f"no execution has an unknown outcome in {where}")
        for row in [] if as_json else rows:
            click.echo(f"{row['session_id']}  call {shown(row['call_id'])}  {row['state']} "
                       f"since {row['since']}  — the action may have happened: check it")
        return

    async def requests(store: Store
                       ) -> list[tuple[ApprovalRequest, ApprovalAnswer | None, bool]]:
        out = []
        for request in await store.list_approvals(pending_only=not show_all,
                                                  session_id=session_id):
            found = await store.get_approval(request.id)
            answer, used = (found[1], found[2]) if found else (None, False)
            out.append((request, answer, used))
        return out

    found = run_with_store(store_url, requests)
    if as_json:
        click.echo(json.dumps({"approvals": [_approval_json(*item) for item in found]},
                              indent=2, ensure_ascii=False))
        return
    if not found:
        what = "approval request is waiting" if not show_all else "approval request"
        click.echo(f"no {what}{' for session ' + session_id if session_id else ''} in {where}")
    for request, answer, used in found:
        state = _state(answer, used, request)
        click.echo(f"{request.id}  {state:<8} {shown(request.tool_name)} for "
                   f"{shown(request.principal_id)}  session {request.session_id}  "
                   f"expires {request.expires_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC")


@command.command("show")
@click.argument("request_id")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(request_id: str, store_url: str | None, as_json: bool) -> None:
    """Show one request: the exact call, in plain language, and its answer.

    ID may be the first 6 or more characters of the id. --json prints the inbox API's shape
    ({"request", "state", "answer", "used", "description"}).
    """
    where = shown_store(resolve_url(store_url))
    request, answer, used = run_with_store(store_url, lambda s: _find(s, request_id, where))
    if as_json:
        click.echo(json.dumps({**_approval_json(request, answer, used),
                               "description": request.describe()},
                              indent=2, ensure_ascii=False))
        return
    click.echo(f"request {request.id}  ({_state(answer, used, request)})")
    for line in request.render_lines():
        if not line.startswith("Digest: "):  # shown once, in full, below
            click.echo(line)
    click.echo(f"Digest: {request.digest}")
    click.echo(f"Expires: {request.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC")
    if answer is not None:
        word = "approved" if answer.approved else "denied"
        click.echo(f"Answer: {word} by {shown(answer.approver)} at {answer.at.isoformat()}"
                   + (f" — {shown(answer.note)}" if answer.note else ""))


def _answer(request_id: str, store_url: str | None, approved: bool, note: str,
            approver: str | None) -> None:
    who = approver or getpass.getuser()

    async def work(store: Store) -> tuple[ApprovalRequest, answers.Outcome, str]:
        request, _, _ = await _find(store, request_id)
        outcome = await answers.answer(store, request.id, None, approved=approved,
                                       approver=who, note=note, via="cli")
        state = await store.load_session(request.session_id)
        return request, outcome, resume_hint(request.session_id,
                                             state.data.get("app") if state else None,
                                             store_url)

    request, outcome, hint = run_with_store(store_url, work)
    if outcome.answer is None:
        if outcome.refusal is answers.Refusal.EXPIRED:
            raise click.ClickException(f"request {request.id} expired at "
                                       f"{request.expires_at.isoformat()}; it can no longer "
                                       "be answered")
        detail = f" ({outcome.detail})" if outcome.detail else ""
        raise click.ClickException(f"request {request.id} was already answered{detail}; "
                                   "this answer was not recorded")
    word = "approved" if approved else "denied"
    click.echo(f"{word} {request.id} ({shown(request.tool_name)}) as {shown(who)}")
    click.echo(hint)


def resume_hint(session_id: str, app: object, store_url: str | None) -> str:
    """How the session of an answered request continues, by who may resume it."""
    store = f" --store {store_url}" if store_url else ""
    if app == DEMO_APP:
        return f"continue the session with:  anfitrion resume {session_id}{store}"
    if app == GATEWAY_APP:
        return ("the MCP client continues by calling the tool again with the same arguments "
                "(the gateway runs the approved call)")
    if isinstance(app, str) and ":" in app:
        return f"continue the session with:  anfitrion resume {session_id} --app {app}{store}"
    return (f"continue the session from the application that started it: "
            f"host.resume({session_id!r}) — or anfitrion resume {session_id} --app "
            f"module:attr{store}")


_note = click.option("--note", default="", help="Why: kept with the answer and in the audit.")
_who = click.option("--as", "approver", default=None,
                    help="Who answers (default: the login name).")


@command.command("approve")
@click.argument("request_id")
@store_option
@_note
@_who
def approve(request_id: str, store_url: str | None, note: str, approver: str | None) -> None:
    """Approve exactly the call of request ID (once)."""
    _answer(request_id, store_url, True, note, approver)


@command.command("deny")
@click.argument("request_id")
@store_option
@_note
@_who
def deny(request_id: str, store_url: str | None, note: str, approver: str | None) -> None:
    """Deny the call of request ID; the model is told why."""
    _answer(request_id, store_url, False, note, approver)
