"""``anfitrion resume SESSION``: continue a suspended session, in this or any process.

A store keeps transcripts, not code: the resuming process must configure the same tools (and
policy) as the one that suspended. This command uses the demo's scripted model and toolbox
(``--model scripted:demo``); applications resume with ``Host.resume`` and their own tools.
"""

from __future__ import annotations

import json

import anyio
import click

from .._demo import demo_parts
from ..approvals import DeferredApprover
from ..exceptions import AnfitrionError
from ..host import Host, RunResult
from ..models._base import Model
from ..policy import find_policy
from ..store import Store, open_store
from ..tools import Toolbox
from ._common import resolve_url, shown, store_option

_MODELS = ("scripted:demo",)


def _host_parts(model: str, store: Store) -> tuple[Model, Toolbox]:
    if model == "scripted:demo":
        return demo_parts(store)
    raise click.BadParameter(f"unknown model {model!r}; known: {', '.join(_MODELS)}",
                             param_hint="--model")


@click.command("resume")
@click.argument("session_id", required=False)
@store_option
@click.option("--model", default="scripted:demo", show_default=True,
              help="The model and toolbox to resume with (they must match the session's).")
@click.option("--ready", is_flag=True,
              help="Instead of SESSION: resume every suspended session whose approvals are "
                   "all answered (safe to run on many workers at once).")
@click.option("--force", is_flag=True,
              help="Resume a session left 'running' by a process that died. Unsettled "
                   "side effects are reported as 'outcome unknown', never run again.")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), default=None,
              help="Policy file (TOML), the same as the suspended run's; default "
                   "./anfitrion.toml if present, else the default policy.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def command(session_id: str | None, store_url: str | None, model: str, ready: bool,
            force: bool, policy_path: str | None, as_json: bool) -> None:
    """Continue SESSION after its approvals were answered."""
    from .demo import DemoPrinter

    if (session_id is None) is not ready:
        raise click.UsageError("give either SESSION or --ready")
    if model not in _MODELS:
        raise click.BadParameter(f"unknown model {model!r}; known: {', '.join(_MODELS)}",
                                 param_hint="--model")
    policy = find_policy(policy_path)

    async def main() -> list[RunResult]:
        store = open_store(resolve_url(store_url))
        the_model, tools = _host_parts(model, store)
        try:
            host = Host(model=the_model, tools=tools, store=store, policy=policy,
                        approver=DeferredApprover(),
                        listeners=[] if as_json else [DemoPrinter()], max_turns=4)
            if session_id is not None:
                return [await host.resume(session_id, force=force)]
            runs = []
            while (taken := await store.claim_resumable()) is not None:
                runs.append(await host.resume(taken.session_id, force=True))
            return runs
        finally:
            await store.close()

    try:
        runs = anyio.run(main)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        outcomes = [{"session_id": run.session_id, "status": run.status.value,
                     "output": run.output, "error": run.error,
                     "pending": [r.id for r in run.pending]} for run in runs]
        click.echo(json.dumps(outcomes if ready else outcomes[0], ensure_ascii=False))
        return
    if ready and not runs:
        click.echo("no session is ready to resume")
    for run in runs:
        if ready:
            click.echo(f"session {run.session_id}:")
        click.echo(f"final: {run.output}" if run.output else f"status: {run.status.value}")
        for request in run.pending:
            click.echo(f"waiting for approval {request.id} ({shown(request.tool_name)}): "
                       f"anfitrion approvals approve {request.id}")
