"""``anfitrion demo``: the offline scenario, with every proposal, decision and result shown."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import click

from .._approvals import NO_APPROVER, Approver, DeferredApprover, DenyAllApprover
from .._apps import DEMO_APP
from .._demo import SCENES, demo_parts
from .._events import EventType, HostEvent
from .._home import store_flag
from .._host import Host, RunStatus
from .._principal import Principal
from ..store import Store, open_store
from ._common import (
    load_policy_option,
    policy_option,
    principal_option,
    resolve_url,
    shown_store,
    store_option,
)
from .terminal import TerminalApprover


class DemoPrinter:
    """Prints what the host does, one line per step."""

    def __init__(self) -> None:
        self._arguments: dict[str, Any] = {}

    def __call__(self, event: HostEvent) -> None:
        out = click.echo
        if event.type is EventType.CALL_PROPOSED and event.call is not None:
            out(f"  model proposes {event.call.name}({event.call.raw_arguments})")
        elif event.type is EventType.CALL_REJECTED:
            out(click.style(f"  host refused: {event.detail}", fg="red"))
        elif event.type is EventType.CALL_VALIDATED and event.call_id is not None:
            self._arguments[event.call_id] = dict(event.arguments or {})
        elif event.type is EventType.CALL_DECIDED and event.decision is not None:
            d = event.decision
            out(f"  host decided: {d.verdict.value} — {d.reason} [{d.rule_id}]")
        elif event.type in (EventType.APPROVAL_ANSWERED, EventType.APPROVAL_RESUMED) and \
                event.answer is not None:
            a = event.answer
            note = f": {a.note}" if a.note else ""
            if a.approver == NO_APPROVER:  # nobody was asked: the host's refusal
                out("  no approver configured: denied")
            else:
                out(f"  person {'approved' if a.approved else 'declined'} ({a.approver}{note})")
        elif event.type is EventType.RESULT_RETURNED and event.result is not None:
            r = event.result
            if r.is_error:
                out(click.style(f"  host returned an error ({r.error_kind}): {r.content}",
                                fg="yellow"))
            else:
                args = self._arguments.get(r.call_id, {})
                out(f"host ran {r.name}({args!r}) -> {r.content}")


@click.command("demo")
@store_option
@policy_option
@principal_option("demo-user")
@click.option("--approve/--no-approve", default=None,
              help="Ask on the terminal (default when stdin is a TTY) or deny writes.")
@click.option("--defer", is_flag=True,
              help="Suspend on approvals: answer later with `anfitrion approvals approve`, "
                   "then `anfitrion resume`.")
def command(store_url: str | None, policy_path: str | None, principal_id: str,
            approve: bool | None, defer: bool) -> None:
    """Run the offline demo: no network, no key, a scripted model."""
    interactive = sys.stdin.isatty() if approve is None else approve
    approver: Approver
    if defer:
        approver = DeferredApprover()
    else:
        approver = TerminalApprover() if interactive else DenyAllApprover()
    policy = load_policy_option(policy_path)
    url = resolve_url(store_url)
    store = open_store(url)
    model, tools = demo_parts(store)
    host = Host(model=model, tools=tools, store=store, policy=policy,
                approver=approver, listeners=[DemoPrinter()], max_turns=4, app=DEMO_APP)
    hint = store_flag(url)
    if policy_path:
        hint += f" --policy '{policy_path}'"
    anyio.run(_scenes, host, store, hint, policy.principal(principal_id), shown_store(url))
    click.echo(click.style("\nnext:", bold=True))
    if not defer:
        click.echo(f"  see a person approve a write:  anfitrion demo --defer{hint}")
    click.echo(f"  answer approvals in the browser:  anfitrion serve{store_flag(url)}")


async def _scenes(host: Host, store: Store, hint: str, principal: Principal,
                  where: str) -> None:
    session_id: str | None = None
    try:
        for number, (title, prompt) in enumerate(SCENES, 1):
            click.echo(click.style(f"\n{number}. {title}", bold=True))
            click.echo(f"user: {prompt}")
            run = await host.run(prompt, principal=principal, session_id=session_id)
            session_id = run.session_id
            click.echo(f"final: {run.output}" if run.output else f"status: {run.status.value}")
            if run.report():
                click.echo(run.report())
            if run.status is RunStatus.SUSPENDED:
                for request in run.pending:
                    click.echo(f"  waiting for approval {request.id} (kept in {where})\n"
                               f"  approve from any terminal:  anfitrion approvals "
                               f"approve {request.id}{hint}")
                click.echo(f"  then continue:  anfitrion resume {run.session_id}{hint}")
                return
    finally:
        await store.close()
