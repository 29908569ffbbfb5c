"""``anfitrion resume SESSION``: continue a suspended session, in this or any process.

A store keeps transcripts, not code: the session must be continued with the tools (and
policy) of the app it belongs to, which it records. Demo sessions (``anfitrion:demo``) resume
with the demo's parts; an application's session with ``--app module:attr`` naming its
:class:`~anfitrion.Host` (or a function ``(store) -> Host``); a session of the MCP gateway is
continued by its client, never here. A session that records no app is refused unless
``--app`` is given: resuming it with the wrong tools would answer its calls "unknown tool".
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from pathlib import Path

import anyio
import click

from .._approvals import DeferredApprover
from .._apps import DEMO_APP, FRAMEWORK_RESUMES, GATEWAY_APP
from .._demo import demo_parts
from .._events import Listener
from .._host import Host, RunResult
from .._owners import mint_owner
from .._runtime import reap_dead_leases
from ..exceptions import AnfitrionError, SessionNotFound
from ..policy import Policy
from ..store import SessionState, Store, open_store
from ._common import (
    existing_store,
    load_policy_option,
    resolve_url,
    shown,
    shown_store,
    store_option,
)

_MODELS = ("scripted:demo",)


def load_app(reference: str) -> object:
    """The object *reference* (``module:attr``) names, importing from the current folder too.

    Raises:
        click.BadParameter: malformed, or nothing there.
    """
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"{reference!r} is not module:attr", param_hint="--app")
    if str(Path.cwd()) not in sys.path:  # as uvicorn and flask do
        sys.path.insert(0, str(Path.cwd()))
    try:
        target: object = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot load {reference!r}: {exc}", param_hint="--app") \
            from None
    return target


def _host_for(app: str, recorded: object, store: Store, policy: Policy,
              listeners: list[Listener]) -> Host:
    if app == DEMO_APP:
        model, tools = demo_parts(store)
        return Host(model=model, tools=tools, store=store, policy=policy,
                    approver=DeferredApprover(), listeners=listeners, max_turns=4, app=DEMO_APP)
    target = load_app(app)
    if isinstance(target, Host):
        return target
    shape = f"{app!r} must be a Host or a function (store) -> Host"
    if callable(target):
        try:
            built = target(store=store)
        except TypeError as exc:  # a factory of another shape: one line, never a traceback
            raise click.BadParameter(f"{shape}; calling it with store=… failed: {exc}",
                                     param_hint="--app") from None
        if isinstance(built, Host):
            return built
        raise click.BadParameter(f"{shape}; it returned {type(built).__name__}",
                                 param_hint="--app")
    raise click.BadParameter(f"{shape}, not {type(target).__name__}", param_hint="--app")


def _check_app(session_id: str, recorded: object, given: str | None) -> str:
    """The app to resume *session_id* with, or a clear refusal."""
    if recorded == GATEWAY_APP:
        raise click.ClickException(
            f"session {session_id} belongs to the MCP gateway: its client continues it by "
            "calling the tool again with the same arguments")
    if isinstance(recorded, str) and recorded in FRAMEWORK_RESUMES:
        raise click.ClickException(
            f"session {session_id} belongs to a framework integration; anfitrion resume cannot "
            f"run its agent. Continue it in its application, {FRAMEWORK_RESUMES[recorded]}")
    if given is not None:
        if isinstance(recorded, str) and recorded != given:
            raise click.ClickException(
                f"session {session_id} belongs to app {shown(recorded)!r}, not {given!r}: "
                f"pass --app {shown(recorded)}")
        return given
    if isinstance(recorded, str) and recorded:
        if recorded == DEMO_APP:
            return recorded
        raise click.ClickException(
            f"session {session_id} belongs to app {shown(recorded)!r}: run "
            f"`anfitrion resume {session_id} --app {shown(recorded)}`")
    raise click.ClickException(
        f"session {session_id} records no app (it was started by an application's own code): "
        "continue it there with host.resume(...), or pass --app module:attr naming its Host "
        "(--app anfitrion:demo for a demo session)")


@click.command("resume")
@click.argument("session_id", required=False)
@store_option
@click.option("--app", "app", default=None, metavar="MODULE:ATTR",
              help="The app the session belongs to: a Host, or a function (store) -> Host "
                   "(anfitrion:demo for the demo). Default: the demo, for a demo session; any "
                   "other app must be named here (a store row never names the code to "
                   "import).")
@click.option("--model", default=None, help="Deprecated: --model scripted:demo is "
              "--app anfitrion:demo.")
@click.option("--ready", is_flag=True,
              help="Instead of SESSION: resume every session ready to continue — suspended "
                   "with all approvals answered, or left running by a process that died "
                   "(safe to run on many workers at once).")
@click.option("--force", is_flag=True,
              help="Resume a session left 'running' by a process that died. Unsettled "
                   "side effects are reported as 'outcome unknown', never run again.")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), default=None,
              help="Policy file (TOML) for a demo session (app anfitrion:demo), the same as "
                   "the suspended run's; default ./anfitrion.toml if present, else the default "
                   "policy. Any other app's session — named by --app or recorded with the "
                   "session — resumes under its Host's own policy, and --policy is refused.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def command(session_id: str | None, store_url: str | None, app: str | None,
            model: str | None, ready: bool, force: bool, policy_path: str | None,
            as_json: bool) -> None:
    """Continue SESSION after its approvals were answered."""
    from .demo import DemoPrinter

    if (session_id is None) is not ready:
        raise click.UsageError("give either SESSION or --ready")
    if model is not None:
        if model not in _MODELS:
            raise click.BadParameter(f"unknown model {model!r}; known: {', '.join(_MODELS)}",
                                     param_hint="--model")
        app = app or DEMO_APP
    if policy_path is not None and app is not None and app != DEMO_APP:
        raise click.UsageError(f"--policy is for demo sessions: the Host {app} brings its own "
                               "policy")
    policy = load_policy_option(policy_path)
    listeners: list[Listener] = [] if as_json else [DemoPrinter()]

    async def one(store: Store, sid: str, forced: bool, hosts: dict[str, Host],
                  lease_from: str | None = None) -> RunResult:
        state = await store.load_session(sid)
        if state is None:
            raise SessionNotFound(sid)
        chosen = _check_app(sid, state.data.get("app"), app)
        host = hosts.get(chosen)
        if host is None:
            host = hosts[chosen] = _host_for(chosen, state.data.get("app"), store, policy,
                                             listeners)
        return await host.resume(sid, force=forced, lease_from=lease_from)

    async def main() -> list[RunResult]:
        store = open_store(existing_store(resolve_url(store_url)))
        hosts: dict[str, Host] = {}
        try:
            if session_id is not None:
                return [await one(store, session_id, force, hosts)]
            runs = []
            owner = mint_owner("ready-")
            await reap_dead_leases(store)  # sessions whose process died here: ready now
            refused: list[SessionState] = []
            while (taken := await store.claim_resumable(owner)) is not None:
                try:
                    runs.append(await one(store, taken.session_id, True, hosts, owner))
                except click.ClickException as exc:
                    click.echo(f"session {taken.session_id}: not resumed: {exc.message}",
                               err=True)
                    refused.append(taken)
            for state in refused:  # kept leased until now, so the loop does not take them again
                await store.save_session(dataclasses.replace(
                    state, status="suspended", lease_owner=None, lease_expires=None,
                    messages=(), saved_messages=0))
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
        click.echo(f"no session is ready to resume in {shown_store(resolve_url(store_url))}")
    for run in runs:
        if ready:
            click.echo(f"session {run.session_id}:")
        click.echo(f"final: {run.output}" if run.output else f"status: {run.status.value}")
        for request in run.pending:
            click.echo(f"waiting for approval {request.id} ({shown(request.tool_name)}): "
                       f"anfitrion approvals approve {request.id}")
