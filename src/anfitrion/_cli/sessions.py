"""``anfitrion sessions``: the sessions in a store — ``list [--state S] [--principal P]
[--json]`` and ``show ID [--json]`` (what was asked, each call and its result, the answer, and
how a suspended session continues). Reads only: a missing store is refused."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import click

from ..store import SessionState, SessionStore
from ._common import resolve_url, run_with_store, shown, store_option

STATES = ("running", "suspended", "completed", "failed")


@click.group("sessions")
def command() -> None:
    """The sessions in the store: list them, show one."""


def _when(state: SessionState) -> str:
    return state.updated_at.strftime("%Y-%m-%d %H:%M:%S") if state.updated_at else "-"


def _row(state: SessionState) -> dict[str, Any]:
    return {"session_id": state.session_id, "principal": state.principal_id,
            "state": state.status, "app": state.data.get("app"),
            "updated_at": state.updated_at.isoformat() if state.updated_at else None,
            "waiting": sorted(dict(state.data.get("pending") or {}).values())}


@command.command("list")
@store_option
@click.option("--state", type=click.Choice(STATES), default=None,
              help="Only the sessions in this state.")
@click.option("--principal", "principal_id", default=None, help="Only this principal's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_sessions(store_url: str | None, state: str | None, principal_id: str | None,
                  as_json: bool) -> None:
    """List the sessions, newest first."""
    async def work(store: SessionStore) -> Sequence[SessionState]:
        return await store.list_sessions(state)

    found = [s for s in run_with_store(store_url, work)
             if principal_id is None or s.principal_id == principal_id]
    found.sort(key=lambda s: s.updated_at.timestamp() if s.updated_at else 0, reverse=True)
    if as_json:
        click.echo(json.dumps({"sessions": [_row(s) for s in found]}, indent=2))
        return
    if not found:
        click.echo("no session" + (f" {state}" if state else ""))
    for s in found:
        waiting = len(dict(s.data.get("pending") or {}))
        extra = f"  {waiting} approval(s) waiting" if waiting else ""
        click.echo(f"{shown(s.session_id)}  {s.status:<9}  {_when(s)}  {shown(s.principal_id)}"
                   f"{extra}")


def _transcript_lines(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The transcript as a person reads it: the request, each call and its result, the
    answers."""
    lines: list[str] = []
    for message in messages:
        for part in message.get("parts", ()):
            kind = part.get("kind")
            if kind == "text" and message.get("kind") == "user":
                lines.append(f"asked: {part.get('text', '')}")
            elif kind == "text":
                lines.append(f"model: {part.get('text', '')}")
            elif kind == "tool_call":
                arguments = json.dumps(part.get("arguments"), ensure_ascii=False)
                lines.append(f"  call {part.get('name')} {arguments[:200]}")
            elif kind == "tool_result":
                head = f"error ({part.get('error_kind')})" if part.get("is_error") else "ok"
                text = " ".join(str(part.get("content", "")).split())
                lines.append(f"  -> {head}: {text[:200]}")
    return lines


@command.command("show")
@click.argument("session_id")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the transcript as stored).")
def show(session_id: str, store_url: str | None, as_json: bool) -> None:
    """Show one session (ID or a unique prefix): its state, what waits, its transcript."""
    async def work(store: SessionStore) -> SessionState:
        matches = [s.session_id for s in await store.list_sessions()
                   if s.session_id.startswith(session_id)]
        if len(matches) != 1:
            raise click.ClickException(
                f"no session {session_id!r}" if not matches else
                f"{session_id!r} names {len(matches)} sessions: give more of the id")
        state = await store.load_session(matches[0])
        if state is None:
            raise click.ClickException(f"no session {session_id!r}")
        return state

    state = run_with_store(store_url, work)
    if as_json:
        click.echo(json.dumps({**_row(state), "messages": list(state.messages)}, indent=2,
                              ensure_ascii=True))
        return
    click.echo(f"session {shown(state.session_id)}  {state.status}  (principal "
               f"{shown(state.principal_id)}, updated {_when(state)} UTC)")
    for line in _transcript_lines(state.messages):
        click.echo(shown(line))
    waiting = sorted(dict(state.data.get("pending") or {}).values())
    if waiting:
        from .._home import store_flag
        from .approvals import resume_hint

        url = resolve_url(store_url)
        for request_id in waiting:
            click.echo(shown(f"waiting for approval {request_id}:  anfitrion approvals show "
                             f"{request_id}{store_flag(url)}"))
        click.echo(shown(resume_hint(state.session_id, state.data.get("app"), url)))
