"""``anfitrion approvals``: decide waiting calls from any terminal.

``list [--unknown] [--all] [--json]``, ``show ID``, ``approve ID [--note]``, ``deny ID [--note]``,
``mcp`` (the queue as an MCP server for a reviewer's assistant), ``reviewer-token``.
An answer is bound to the request's digest (the exact call) and recorded once: if two people
answer at the same instant, the first one counts and the second is told so. On a request that
needs several approvers, ``approve`` is one vote and needs ``--reviewers FILE`` with your own
token in ``ANFITRION_REVIEWER_TOKEN``.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC
from typing import Any

import click

from .. import _answers as answers
from .._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote, Reviewer, declined_text
from .._apps import DEMO_APP, FRAMEWORK_RESUMES, GATEWAY_APP
from .._home import environment, store_flag
from .._identity import identity_problem
from ..exceptions import AnfitrionError
from ..store import ApprovalStore, LedgerStore, Store, StoredApproval
from ._common import (
    APPROVER_HELP,
    approver_name,
    resolve_url,
    run_with_store,
    shown,
    shown_store,
    store_option,
)


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
                   used: bool, votes: tuple[ApprovalVote, ...] = ()) -> dict[str, Any]:
    """One request in the inbox API's shape (``GET /api/v1/approvals``)."""
    out = {"request": request.to_dict(), "state": _api_state(answer, request),
           "answer": answer.to_dict() if answer else None, "used": used}
    if request.quorum is not None:
        out["quorum"] = answers.votes_json(request, votes)
    return out


def _votes_line(request: ApprovalRequest, votes: tuple[ApprovalVote, ...]) -> str:
    """Who has approved so far, for a request that needs several approvers."""
    assert request.quorum is not None
    roles = f" holding {', '.join(request.quorum.roles)}" if request.quorum.roles else ""
    said = ", ".join(f"{shown(v.voter)} {'approved' if v.approved else 'rejected'} "
                     f"(via {v.via})" for v in votes) or "nobody yet"
    return (f"Votes: {said} — needs {request.quorum.required} distinct approvers{roles}, "
            f"{answers.votes_needed(request, votes)} more")


async def _find(store: ApprovalStore, request_id: str, where: str = "") -> StoredApproval:
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
    "used"}, …]} (no extra needed: the web extra is only for `anfitrion serve`).
    """
    where = shown_store(resolve_url(store_url))
    if unknown:
        async def unknowns(store: LedgerStore) -> list[dict[str, Any]]:
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

    async def requests(store: ApprovalStore) -> list[tuple[ApprovalRequest, ApprovalAnswer | None,
                                                           bool, tuple[ApprovalVote, ...]]]:
        out = []
        for request in await store.list_approvals(pending_only=not show_all,
                                                  session_id=session_id):
            found = await store.get_approval(request.id)
            answer, used = (found.answer, found.used) if found else (None, False)
            votes = tuple(await store.list_approval_votes(request.id)) if request.quorum else ()
            out.append((request, answer, used, votes))
        return out

    found = run_with_store(store_url, requests)
    if as_json:
        click.echo(json.dumps({"approvals": [_approval_json(*item) for item in found]},
                              indent=2, ensure_ascii=False))
        return
    expired = [] if show_all else [item for item in found
                                   if _api_state(item[1], item[0]) == "expired"]
    found = [item for item in found if not any(item is e for e in expired)]
    if not found:
        what = "approval request is waiting" if not show_all else "approval request"
        click.echo(f"no {what}{' for session ' + session_id if session_id else ''} in {where}")
    if expired:  # unanswered but past their expiry: nobody can answer them any more
        click.echo(f"{len(expired)} expired request(s) not listed: they can no longer be "
                   "answered (--all lists them)")
    for request, answer, used, votes in found:
        state = _state(answer, used, request)
        if request.quorum is not None and answer is None:
            approved = sum(v.approved for v in votes)
            state = f"{state} {approved}/{request.quorum.required}"
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

    async def load(store: Store) -> tuple[ApprovalRequest, ApprovalAnswer | None, bool,
                                          tuple[ApprovalVote, ...]]:
        found = await _find(store, request_id, where)
        request, answer, used = found.request, found.answer, found.used
        votes = tuple(await store.list_approval_votes(request.id)) if request.quorum else ()
        return request, answer, used, votes

    request, answer, used, votes = run_with_store(store_url, load)
    if as_json:
        click.echo(json.dumps({**_approval_json(request, answer, used, votes),
                               "description": request.describe()},
                              indent=2, ensure_ascii=False))
        return
    click.echo(f"request {request.id}  ({_state(answer, used, request)})")
    for line in request.render_lines():
        if not line.startswith("Digest: "):  # shown once, in full, below
            click.echo(line)
    click.echo(f"Digest: {request.digest}")
    click.echo(f"Expires: {request.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC")
    if request.quorum is not None:
        click.echo(_votes_line(request, votes))
    if answer is not None:
        word = "approved" if answer.approved else "declined"
        click.echo(f"Answer: {word} by {shown(answer.approver)} at {answer.at.isoformat()}"
                   + (f" — {shown(answer.note)}" if answer.note else ""))


def _reviewer(reviewers_path: str | None) -> Reviewer | None:
    """The reviewer whose own token is in ANFITRION_REVIEWER_TOKEN (with --reviewers)."""
    if reviewers_path is None:
        return None
    from ..channels import load_reviewers
    from ..mcp import reviewer_from_environment

    try:
        return reviewer_from_environment(environment(), load_reviewers(reviewers_path))
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc


def _answer(request_id: str, store_url: str | None, approved: bool, note: str,
            approver: str | None, reviewers_path: str | None = None) -> None:
    reviewer = _reviewer(reviewers_path)
    if reviewer is not None and approver is not None and approver != reviewer.name:
        raise click.ClickException(f"your reviewer token is {reviewer.name}'s: --as cannot "
                                   "name someone else")
    who = reviewer.name if reviewer is not None else approver_name(approver)

    async def work(store: Store) -> tuple[ApprovalRequest, answers.Outcome, str]:
        request = (await _find(store, request_id)).request
        outcome = await answers.answer(store, request.id, None, approved=approved,
                                       approver=who, note=note, via="cli", reviewer=reviewer)
        state = await store.load_session(request.session_id)
        return request, outcome, resume_hint(request.session_id,
                                             state.data.get("app") if state else None,
                                             resolve_url(store_url))

    request, outcome, hint = run_with_store(store_url, work)
    if not outcome.recorded:
        if outcome.refusal in (answers.Refusal.ALREADY_VOTED, answers.Refusal.UNQUALIFIED,
                               answers.Refusal.UNIDENTIFIED, answers.Refusal.SELF_APPROVAL,
                               answers.Refusal.NOT_ENTITLED):
            extra = (" (pass --reviewers FILE and set ANFITRION_REVIEWER_TOKEN)"
                     if outcome.refusal is answers.Refusal.UNIDENTIFIED else "")
            detail = f": {outcome.detail}" if outcome.detail else ""
            raise click.ClickException(f"request {request.id}: "
                                       f"{outcome.refusal.value}{detail}{extra}")
        if outcome.refusal is answers.Refusal.EXPIRED:
            raise click.ClickException(f"request {request.id} expired at "
                                       f"{request.expires_at.isoformat()}; it can no longer "
                                       "be answered")
        detail = f" ({outcome.detail})" if outcome.detail else ""
        raise click.ClickException(f"request {request.id} was already answered{detail}; "
                                   "this answer was not recorded")
    if outcome.answer is None:  # a vote counted: the request waits for more approvers
        click.echo(f"voted to approve {request.id} ({shown(request.tool_name)}) as {shown(who)}; "
                   f"{answers.votes_needed(request, outcome.votes)} more approval(s) needed")
        return
    if outcome.answer.approved:
        click.echo(f"approved {request.id} ({shown(request.tool_name)}) as {shown(who)}")
    else:
        click.echo(f"declined {request.id} ({shown(request.tool_name)}) as {shown(who)}; "
                   f"the model will be told: {shown(declined_text(note))}")
    click.echo(hint)


def resume_hint(session_id: str, app: object, store_url: str) -> str:
    """How the session of an answered request continues, by who may resume it (naming the
    store when ``anfitrion resume`` would not find it by itself)."""
    store = store_flag(store_url)
    if app == DEMO_APP:
        return f"continue the session with:  anfitrion resume {session_id}{store}"
    if app == GATEWAY_APP:
        return ("the MCP client continues by calling the tool again with the same arguments "
                "(the gateway runs the approved call)")
    if isinstance(app, str) and app in FRAMEWORK_RESUMES:
        return f"continue the session in its application, {FRAMEWORK_RESUMES[app]}"
    if isinstance(app, str) and ":" in app:
        return f"continue the session with:  anfitrion resume {session_id} --app {app}{store}"
    return (f"continue the session from the application that started it: "
            f"host.resume({session_id!r}) — or anfitrion resume {session_id} --app "
            f"module:attr{store}")


_note = click.option("--note", default="", help="Why: kept with the answer and in the audit.")
_who = click.option("--as", "approver", default=None, help=APPROVER_HELP)
_reviewers = click.option("--reviewers", "reviewers_path", default=None,
                          type=click.Path(dir_okay=False),
                          help="The reviewers file; you are the reviewer whose own token is in "
                               "ANFITRION_REVIEWER_TOKEN (needed to vote on a request that "
                               "needs several approvers).")


@command.command("approve")
@click.argument("request_id")
@store_option
@_note
@_who
@_reviewers
def approve(request_id: str, store_url: str | None, note: str, approver: str | None,
            reviewers_path: str | None) -> None:
    """Approve exactly the call of request ID (once; on a request that needs several
    approvers, your vote)."""
    _answer(request_id, store_url, True, note, approver, reviewers_path)


@command.command("deny")
@click.argument("request_id")
@store_option
@_note
@_who
@_reviewers
def deny(request_id: str, store_url: str | None, note: str, approver: str | None,
         reviewers_path: str | None) -> None:
    """Deny the call of request ID; the model is told why."""
    _answer(request_id, store_url, False, note, approver, reviewers_path)


@command.command("mcp")
@store_option
@click.option("--reviewers", "reviewers_path", required=True, type=click.Path(dir_okay=False),
              help="The reviewers file (names, roles, token digests).")
@click.option("--not-for", "not_for", multiple=True, metavar="PRINCIPAL",
              help="A principal whose requests this reviewer may not answer (the agents your "
                   "assistant runs as; repeatable). Compared case- and form-insensitively.")
def mcp_(store_url: str | None, reviewers_path: str, not_for: tuple[str, ...]) -> None:
    """Serve the approval queue over stdio to your own assistant, as you.

    Tools: list_pending, show_approval, approve and deny (each bound to the digest). The queue
    acts as the reviewer whose own token is in ANFITRION_REVIEWER_TOKEN; it refuses requests
    made under that reviewer's name (and, with --not-for, under the principals named), and a
    gateway refuses to offer it. Never give it to the agent whose calls it approves.
    """
    reviewer = _reviewer(reviewers_path)
    assert reviewer is not None
    from ..mcp import approval_queue

    for name in not_for:
        if (problem := identity_problem(name)) is not None:
            raise click.ClickException(f"--not-for {name!r} is ambiguous: {problem}")

    async def serve(store: Store) -> None:
        queue = approval_queue(store, reviewer, principals=not_for)
        await queue.run_stdio_async()

    run_with_store(store_url, serve)


@command.command("reviewer-token")
@click.argument("name")
@click.option("--role", "roles", multiple=True, help="A role the reviewer holds (repeatable).")
def reviewer_token(name: str, roles: tuple[str, ...]) -> None:
    """Make a new personal token for reviewer NAME: prints the token (give it to that person
    only) and the entry for the reviewers file (which keeps its SHA-256, never the token)."""
    from ..channels import token_sha256

    token = secrets.token_urlsafe(32)
    click.echo(f"token for {name} (shown once): {token}", err=True)
    role_list = ", ".join(json.dumps(r) for r in roles)
    click.echo(f"[reviewers.{json.dumps(name)}]\nroles = [{role_list}]\n"
               f"token_sha256 = \"{token_sha256(token)}\"")
