"""``anfitrion demo``: the offline scenario, with every proposal, decision and result shown."""

from __future__ import annotations

import sys
import tempfile
from typing import Any

import anyio
import click

from .._demo import SCENES, demo_model, demo_toolbox
from ..approvals import Approver, DenyAllApprover, TerminalApprover
from ..events import EventType, HostEvent
from ..host import Host


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
        elif event.type is EventType.APPROVAL_ANSWERED and event.answer is not None:
            a = event.answer
            word = "approved" if a.approved else "denied"
            out(f"  person {word} ({a.approver}{': ' + a.note if a.note else ''})")
        elif event.type is EventType.RESULT_RETURNED and event.result is not None:
            r = event.result
            if r.is_error:
                out(click.style(f"  host returned an error ({r.error_kind}): {r.content}",
                                fg="yellow"))
            else:
                args = self._arguments.get(r.call_id, {})
                out(f"host ran {r.name}({args!r}) -> {r.content}")


@click.command("demo")
@click.option("--store", "store_url", default="memory://", show_default=True,
              help="Store URL (memory://, sqlite:///PATH, postgresql://…).")
@click.option("--approve/--no-approve", default=None,
              help="Ask on the terminal (default when stdin is a TTY) or deny writes.")
def command(store_url: str, approve: bool | None) -> None:
    """Run the offline demo: no network, no key, a scripted model."""
    interactive = sys.stdin.isatty() if approve is None else approve
    approver: Approver = TerminalApprover() if interactive else DenyAllApprover()
    with tempfile.TemporaryDirectory(prefix="anfitrion-demo-") as workdir:
        host = Host(model=demo_model(), tools=demo_toolbox(workdir), store=store_url,
                    approver=approver, listeners=[DemoPrinter()], max_turns=4)
        anyio.run(_scenes, host)


async def _scenes(host: Host) -> None:
    session_id: str | None = None
    for number, (title, prompt) in enumerate(SCENES, 1):
        click.echo(click.style(f"\n{number}. {title}", bold=True))
        click.echo(f"user: {prompt}")
        run = await host.run(prompt, principal="demo-user", session_id=session_id)
        session_id = run.session_id
        click.echo(f"final: {run.output}" if run.output else f"status: {run.status.value}")
