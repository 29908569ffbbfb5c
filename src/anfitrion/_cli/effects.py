"""``anfitrion effects``: side effects whose outcome is unknown, and settling them.

``list [--all] [--json]``, ``show KEY [--json]``, ``resolve KEY --done|--failed [--note]``,
``reconcile KEY|--all [--tools MODULE:ATTR]``. KEY may be the first 8 or more characters of
the key. A resolution is audited with who and why; the model is told it the next time it
proposes that effect.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import click

from .. import _resolutions as resolutions
from .._apps import DEMO_APP, FRAMEWORK_RESUMES, GATEWAY_APP
from .._tools import OfferContext, Tool, ToolSource
from ..exceptions import ConflictError, UserError
from ..store import EffectEntry, LedgerStore, ResolutionStore, Store
from ._common import (
    approver_name,
    import_reference,
    load_policy_option,
    policy_option,
    resolve_url,
    run_with_store,
    shown,
    shown_store,
    store_option,
)


@click.group("effects")
def command() -> None:
    """Side effects: list the unsettled ones, show one, resolve what happened."""


async def _find(store: LedgerStore, key: str) -> EffectEntry:
    found = await resolutions.find_effect(store, key)
    if isinstance(found, list):
        raise click.ClickException(f"{key!r} is the start of {len(found)} effect keys: "
                                   "give more of it")
    if found is None:
        raise click.ClickException(f"no effect {key!r}")
    return found


def _line(entry: EffectEntry) -> str:
    state = resolutions.effect_state_name(entry)
    since = entry.updated_at.strftime("%Y-%m-%d %H:%M") if entry.updated_at else "?"
    return (f"{entry.key[:16]}  {state:<15} {shown(entry.display)}  session "
            f"{shown(entry.session_id)} call {shown(entry.call_id)}  since {since} UTC")


@command.command("list")
@store_option
@click.option("--all", "show_all", is_flag=True, help="Include settled effects.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(store_url: str | None, show_all: bool, as_json: bool) -> None:
    """List effects a person must resolve (running with nobody settling them, or unknown)."""
    async def work(store: LedgerStore) -> list[EffectEntry]:
        return list(await store.list_effects(unsettled_only=not show_all))

    found = run_with_store(store_url, work)
    if as_json:
        click.echo(json.dumps({"effects": [resolutions.effect_json(e) for e in found]},
                              indent=2, ensure_ascii=False))
        return
    if not found:
        what = "effect is unsettled" if not show_all else "effect is recorded"
        click.echo(f"no {what} in {shown_store(resolve_url(store_url))}")
    for entry in found:
        click.echo(_line(entry))


@command.command("show")
@click.argument("key")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(key: str, store_url: str | None, as_json: bool) -> None:
    """Show one effect: what it is, which call holds it, how it stands."""
    entry = run_with_store(store_url, lambda store: _find(store, key))
    if as_json:
        click.echo(json.dumps(resolutions.effect_json(entry), indent=2, ensure_ascii=False))
        return
    click.echo(_line(entry))
    click.echo(f"key     {entry.key}")
    click.echo(f"scope   {entry.scope}   tool {shown(entry.tool)}   repeats {entry.repeats}")
    if entry.resolved_by:
        click.echo(f"resolved by {shown(entry.resolved_by)}: {shown(entry.resolution_note or '')}")
    if entry.result is not None:
        click.echo(f"result  {shown(entry.result.content[:500])}")
    preview = resolutions.arguments_preview(entry)
    if preview is not None:  # redacted, as the audit log keeps them
        click.echo(f"arguments {shown(json.dumps(preview, ensure_ascii=False))}")


@command.command("resolve")
@click.argument("key")
@click.option("--done", "outcome", flag_value="done", help="It happened.")
@click.option("--failed", "outcome", flag_value="failed", help="It did not happen.")
@click.option("--note", default="", help="Why you know (kept in the audit log).")
@store_option
def resolve(key: str, outcome: str | None, note: str, store_url: str | None) -> None:
    """Say what happened to an effect whose outcome is unknown (--done or --failed)."""
    if outcome is None:
        raise click.UsageError("say what happened: --done or --failed")
    who = f"cli:{approver_name(None)}"

    async def work(store: ResolutionStore) -> EffectEntry | None:
        entry = await _find(store, key)
        try:
            return await resolutions.resolve(store, entry.key, done=outcome == "done", by=who,
                                             note=note, via="cli")
        except ConflictError as exc:
            raise click.ClickException(str(exc)) from None

    entry = run_with_store(store_url, work)
    if entry is None:  # pragma: no cover - found just before
        raise click.ClickException(f"no effect {key!r}")
    click.echo(f"resolved {entry.key[:16]} as {outcome} by {who}")


def _takes_store(factory: Callable[..., Any]) -> bool:
    """Whether *factory* is an app's ``(store) -> Host`` (as ``anfitrion resume`` takes it),
    given the command's store, rather than a function of no arguments."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return "store" in parameters


class _Tools:
    """The tools each effect's session belongs to: ``--tools`` for all (a Toolbox, a Host,
    or a function returning one, as ``anfitrion chat --tools`` loads it), else the demo's
    when its session is a demo session; each loaded once.

    Like ``anfitrion resume``, it never imports a module a store row names: a row is data,
    and whoever can write the store must not choose the code an operator's command runs. A
    session recording another app is refused, naming the ``--tools`` to pass."""

    def __init__(self, store: Store, reference: str | None) -> None:
        self.store, self.reference = store, reference
        self._given: ToolSource | None = None
        self._demo: ToolSource | None = None

    async def source(self, session_id: str) -> ToolSource:
        if self.reference is not None:
            if self._given is None:
                self._given = self._imported(self.reference)
            return self._given
        state = await self.store.load_session(session_id)
        app = state.data.get("app") if state is not None else None
        if app == GATEWAY_APP:
            raise UserError(f"session {session_id} belongs to the MCP gateway: pass --tools "
                            "naming tools that declare a reconcile hook")
        if app in FRAMEWORK_RESUMES:
            raise UserError(f"session {session_id} belongs to a framework integration "
                            f"({shown(str(app))}): pass --tools MODULE:ATTR naming its tools")
        if not isinstance(app, str) or not app:
            raise UserError(f"session {session_id} records no app: pass --tools MODULE:ATTR")
        if app != DEMO_APP:  # never imported on a row's word (see the class)
            raise UserError(f"session {session_id} belongs to app {shown(app)!r}: pass "
                            f"--tools {shown(app)} if that is its code (a module a store row "
                            "names is never imported on its own)")
        if self._demo is None:
            from .._demo import demo_parts

            self._demo = demo_parts(self.store)[1]
        return self._demo

    def _imported(self, reference: str) -> ToolSource:
        from .._host import Host

        found: Any = import_reference(reference)
        if callable(found) and not isinstance(found, (Host, ToolSource)):
            found = found(store=self.store) if _takes_store(found) else found()
        if isinstance(found, Host):
            found = found.tools
        if not isinstance(found, ToolSource):
            raise UserError(f"--tools {reference!r} is not a Host, a Toolbox or a tool source")
        return found

    async def tool(self, entry: EffectEntry, context: OfferContext) -> Tool | None:
        source = await self.source(entry.session_id)
        get = getattr(source, "get", None)
        if callable(get):  # a Toolbox: no offer needed
            found = get(entry.tool)
            return found if isinstance(found, Tool) else None
        for tool in await source.list_tools(context):
            if tool.name == entry.tool:
                return tool
        return None


@command.command("reconcile")
@click.argument("key", required=False)
@click.option("--all", "every", is_flag=True, help="Every unsettled effect instead of KEY.")
@click.option("--tools", "tools_ref", default=None, metavar="MODULE:ATTR",
              help="The tools (a Toolbox, a Host, or a function returning one, given store=… "
                   "if it takes it), importable "
                   "from the current folder. Default: the demo's tools, for a demo "
                   "session; any other app must be named here (a store row never names "
                   "the code to import).")
@click.option("--note", default="", help="Why you ran it (kept in the audit log).")
@policy_option
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def reconcile(key: str | None, every: bool, tools_ref: str | None, note: str,
              policy_path: str | None, store_url: str | None, as_json: bool) -> None:
    """Ask the tools' reconcile hooks what happened to unsettled effects, and settle them.

    Each hook gets the exact arguments of the call holding the effect; what it answers is
    recorded as a resolution by its tool's hook, run by you (audited with who and why). An
    effect whose hook cannot tell, or that has none, stays for a person
    (anfitrion effects resolve).
    """
    if (key is None) is not every:
        raise click.UsageError("give either KEY or --all")
    policy = load_policy_option(policy_path)
    who = f"cli:{approver_name(None)}"

    async def work(store: Store) -> list[resolutions.Reconciled]:
        tools = _Tools(store, tools_ref)
        entries = [await _find(store, key)] if key is not None else \
            list(await store.list_effects(unsettled_only=True))
        done = []
        for entry in entries:
            state = await store.load_session(entry.session_id)
            principal = policy.principal(state.principal_id if state else "unknown")
            try:
                tool = await tools.tool(entry, OfferContext(principal, entry.session_id))
            except UserError as exc:
                if key is not None:
                    raise
                done.append(resolutions.Reconciled(entry, "no_tool", str(exc)))
                continue
            done.append(await resolutions.reconcile(store, entry, tool, principal=principal,
                                                    by=who, note=note, via="cli"))
        return done

    outcomes = run_with_store(store_url, work)
    if as_json:
        click.echo(json.dumps({"reconciled": [
            {**resolutions.effect_json(r.entry), "outcome": r.outcome, "detail": r.detail}
            for r in outcomes]}, indent=2, ensure_ascii=False))
    else:
        if not outcomes:
            click.echo(f"no effect is unsettled in {shown_store(resolve_url(store_url))}")
        for r in outcomes:
            click.echo(f"{r.entry.key[:16]}  {r.outcome:<12} {shown(r.entry.display)}: "
                       f"{shown(r.detail)}")
    if key is not None and outcomes and outcomes[0].outcome not in ("done", "failed"):
        raise click.ClickException(f"not reconciled: {outcomes[0].detail}")
