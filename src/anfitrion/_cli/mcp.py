"""``anfitrion mcp``: review, approve and list the pinned definitions of MCP tools.

    anfitrion mcp review  --config mcp.json           # show what is launched, ask, connect, …
    anfitrion mcp review  --config mcp.json --launch  # … consent given up front (scripts)
    anfitrion mcp approve --config mcp.json git.git_log --digest 3f2a9c1e
    anfitrion mcp approve --config mcp.json 'git.*'   # the server's instructions and every tool
    anfitrion mcp list    --config mcp.json --json
    anfitrion mcp lock    --config mcp.json           # npx/uvx/pipx: pkg → pkg@installed
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import click

from .._approvals import make_visible
from .._home import environment
from ..exceptions import AnfitrionError
from ..mcp import (
    INSTRUCTION_PATTERNS,
    META_SCHEMA,
    McpConfig,
    Pin,
    PinBook,
    PinState,
    ServerConfig,
    describe_profile,
    identity_changes,
    load_config,
    package_spec,
    resolve_program,
    server_identity,
    server_key,
    suspicious_text,
)
from ..policy import LintReport, ToolFacts, facts_of_mcp, lint_tools, visible
from ..store import Store, open_store
from ._common import APPROVER_HELP, STORE_HELP, approver_name, resolve_url

if TYPE_CHECKING:
    from ..mcp import McpToolset

T = TypeVar("T")


def _store_url(option: str | None, config: McpConfig | None) -> str:
    """The store by the one rule (``anfitrion._home``), the config's ``gateway.store`` second."""
    return resolve_url(option, gateway_store=config.gateway.store if config else None)


def with_store(ctx: click.Context, url: str, work: Callable[[Store], Awaitable[T]]) -> T:
    """Run *work* with the store (``ctx.obj["store"]`` when a caller passes one in)."""
    given = (ctx.obj or {}).get("store") if isinstance(ctx.obj, dict) else None

    async def main() -> T:
        store = given if given is not None else open_store(url)
        try:
            return await work(store)
        finally:
            if given is None:
                await store.close()

    try:
        return anyio.run(main)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc


def _config(path: str | None) -> McpConfig | None:
    if path is None:
        return None
    try:
        return load_config(path)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc


_config_option = click.option("--config", "config_path", type=click.Path(dir_okay=False),
                              help="The MCP servers file (mcpServers JSON).")
_store_option = click.option("--store", "store_url", default=None, metavar="URL",
                             help=STORE_HELP)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("mcp")
def command() -> None:
    """Review and approve MCP tool definitions before any model sees them."""


def _highlighted(text: str) -> str:
    shown = make_visible(text)
    for pattern in INSTRUCTION_PATTERNS:
        shown = pattern.sub(lambda m: click.style(f"»{m.group(0)}«", fg="red", bold=True),
                            shown)
    return shown


def _render(value: Any, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{_highlighted(str(key))}:")
                lines.extend(_render(item, indent + 1))
            elif key == "$schema" and isinstance(item, str) and META_SCHEMA.fullmatch(item):
                lines.append(f"{pad}$schema: {item}")  # the JSON Schema dialect, not a message
            else:
                lines.append(f"{pad}{_highlighted(str(key))}: {_scalar(item)}")
        return lines
    if isinstance(value, list):
        return [line for item in value for line in
                ([f"{pad}- {_scalar(item)}"] if not isinstance(item, (dict, list))
                 else [f"{pad}-", *_render(item, indent + 1)])]
    return [f"{pad}{_scalar(value)}"]


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return _highlighted(value)
    return json.dumps(value)


def _review_entry(pin: Pin | None, name: str, state: str, problem: str,
                  other_tools: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "state": state, "problem": problem}
    if pin is not None:
        entry.update(digest=pin.seen_digest, definition=pin.seen_definition,
                     approved_definition=pin.approved_definition,
                     findings=[{"path": f.path, "reason": f.reason, "excerpt": f.excerpt}
                               for f in suspicious_text(_model_facing(pin.seen_definition),
                                                        other_tools)])
    return entry


def _model_facing(definition: Mapping[str, Any]) -> dict[str, Any]:
    """What of a pin a model reads: a server's launch (the operator's own command) is not."""
    return {key: value for key, value in definition.items() if key != "launch"}


_BASE_ENV = "HOME LOGNAME PATH SHELL TERM USER"


async def _launch_states(store: Store, config: McpConfig) -> dict[str, str]:
    """Per server: ``""`` when what it launches was approved as it is, else why to ask."""
    book = PinBook(store)
    states: dict[str, str] = {}
    for server_id, server in config.servers.items():
        pin = await book.get(server_key(server_id))
        approved = pin.approved_definition if pin is not None else None
        if pin is None:
            states[server_id] = "never started by anfitrion"
        elif approved is None:
            states[server_id] = "never approved"
        else:
            changes = identity_changes(approved.get("launch"), server_identity(server))
            states[server_id] = "changed: " + "; ".join(changes) if changes else ""
    return states


def _launch_plan(server: ServerConfig, why: str) -> list[str]:
    state = f"needs your consent: {why}" if why else "approved before, unchanged"
    lines = [f"  {make_visible(server.id)}  [{state}]"]
    if server.command is not None:
        lines += [f"    runs:    {make_visible(server.command)}",
                  f"    args:    {make_visible(json.dumps(list(server.args), ensure_ascii=False))}",
                  f"    cwd:     {make_visible(server.cwd) if server.cwd else '(this directory)'}",
                  f"    env:     {make_visible(' '.join(sorted(server.env))) or '(none)'} "
                  f"(values not shown; plus {_BASE_ENV} from yours)"]
        lines += _sandbox_lines(server)
    else:
        lines += [f"    contacts: {make_visible(server.url or '')}",
                  f"    headers:  {make_visible(' '.join(sorted(server.headers))) or '(none)'}"
                  " (values not shown)"]
    return lines


def auth_lines(server: ServerConfig) -> list[str]:
    """How an HTTP server is authorized, in words: the mode (each person's connected account,
    a service account, token exchange, static headers, none), the issuer and the scopes —
    never a secret."""
    if server.url is None:
        return []
    auth, exchange = server.auth, server.token_exchange
    if exchange is not None:
        asked = make_visible(exchange.scope) or "(those of the caller's token)"
        return [f"    auth:     token exchange (RFC 8693): each caller's own token exchanged at "
                f"{make_visible(exchange.token_endpoint)} as client "
                f"{make_visible(exchange.client_id)}",
                f"              audience {make_visible(exchange.audience)}; scopes {asked}"]
    if auth is None:
        mode = "static headers (the same for every caller)" if server.headers else "none"
        return [f"    auth:     {mode}"]
    if auth.grant == "client_credentials":
        mode = (f"service account (client credentials, client {make_visible(auth.client_id or '')}"
                f"{', private_key_jwt' if auth.private_key else ''}): one identity for everyone")
    else:
        mode = ("connected accounts (authorization code with PKCE): each person's own, "
                "connected in the inbox or with `anfitrion auth login " + make_visible(server.id)
                + "`")
    issuer = make_visible(auth.issuer) if auth.issuer else "the first the server names"
    scopes = make_visible(" ".join(auth.scopes)) if auth.scopes else \
        "what the server asks for (its challenge, else its metadata)"
    return [f"    auth:     {mode}", f"              issuer {issuer}; scopes {scopes}"]


def _sandbox_lines(server: ServerConfig) -> list[str]:
    """The server's sandbox profile in words (``"off"`` in red), and what it runs."""
    words = describe_profile(server.sandbox)
    if not server.sandbox.enabled:
        return ["    " + click.style(f"sandbox: {words[0]}", fg="red", bold=True)]
    lines = [f"    sandbox: {make_visible(words[0])}"]
    lines += [f"             {make_visible(line)}" for line in words[1:]]
    runs = server_identity(server).get("runs") or {}
    if runs.get("package"):
        lines.append(f"    package: {make_visible(str(runs['package']))} "
                     f"{make_visible(str(runs.get('version') or '(not installed here)'))}")
    elif runs.get("sha256"):
        lines.append(f"    file:    {make_visible(str(runs.get('executable')))} "
                     f"sha256:{str(runs['sha256'])[:16]}…")
    return lines


def _approve_hint(config_path: str, store_url: str | None, name: str, digest: str) -> str:
    store = f" --store {shlex.quote(store_url)}" if store_url else ""
    return (f"anfitrion mcp approve --config {shlex.quote(config_path)}{store} "
            f"{shlex.quote(name)} --digest {digest[:12]}")


def _trust_note(server: ServerConfig, config_path: str) -> str:
    return (f"   note: server {make_visible(server.id)!r} is not trusted: its annotations "
            "(readOnlyHint, idempotentHint, openWorldHint) are ignored, so every tool is a "
            "write that asks a person and every result is untrusted. To believe them, set "
            f'"trusted": true in its entry of {config_path}.')


@command.command("review")
@_config_option
@_store_option
@click.option("--all", "show_all", is_flag=True, help="Show approved tools too.")
@click.option("--launch", "consent", is_flag=True,
              help="Consent to starting (or contacting) the configured servers without being "
                   "asked. Without it, review shows what each server runs and asks; when it "
                   "cannot ask (no terminal) it starts nothing.")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False),
              help="The policy file whose argument constraints and [lint] silences the tool "
                   "lint uses (default: ./anfitrion.toml if present).")
@click.option("--fail-on-lint", is_flag=True,
              help="Exit with status 1 when a lint finding stands (for CI).")
@_json_option
@click.pass_context
def review(ctx: click.Context, config_path: str | None, store_url: str | None, show_all: bool,
           consent: bool, policy_path: str | None, fail_on_lint: bool, as_json: bool) -> None:
    """Show what each server runs, then connect, record what it offers and show what needs a
    person.

    First prints the exact command, arguments, working directory and environment variable
    names (or the URL and header names) of every server: starting a server runs its command,
    so a server that is new, or launches something else than when it was approved, is started
    only with your consent (--launch, or yes at the prompt). Then shows each new or changed
    definition in full, with invisible and bidirectional characters made visible and
    instruction-like text marked »like this«, and the tool lint's findings (as
    `anfitrion tools lint`: descriptions, effects, free-form arguments, names).
    """
    from ._common import load_policy_option

    policy = load_policy_option(policy_path)
    silences = policy.lint_silences
    if config_path is None:
        raise click.UsageError("--config FILE is required to reach the servers")
    config = _config(config_path)
    assert config is not None
    url = _store_url(store_url, config)
    states = with_store(ctx, url, lambda store: _launch_states(store, config))
    _ask_launch_consent(config, states, consent=consent, as_json=as_json)
    facts: list[ToolFacts] = []
    everything = with_store(ctx, url, lambda store: _review_entries(store, config, facts,
                                                                    show_all=True))
    entries = [e for e in everything if show_all or e["state"] != PinState.APPROVED.value]
    linted = lint_tools(facts, policy=policy, silenced=silences)
    by_tool: dict[str, list[dict[str, Any]]] = {}
    for finding in linted.findings:
        by_tool.setdefault(finding.tool, []).append(finding.to_dict())
    for entry in entries:
        entry_server = config.servers.get(entry["name"].partition(".")[0])
        entry["trusted"] = bool(entry_server and entry_server.trusted)
        if "definition" in entry and entry["name"] != entry_server_id(entry, config):
            entry["lint"] = by_tool.get(visible(entry["name"]), [])
    fail = fail_on_lint and bool(linted.standing)
    if as_json:
        click.echo(json.dumps(entries, indent=2, ensure_ascii=False))
    else:
        _echo_review(entries, linted, config, config_path, store_url, show_all=show_all)
        _echo_summary(everything, linted, config, config_path, store_url)
    if fail:
        raise SystemExit(1)


def _ask_launch_consent(config: McpConfig, states: dict[str, str], *, consent: bool,
                        as_json: bool) -> None:
    """Print what the review starts or contacts; refuse unless consent is given for what needs
    it (given up front with ``--launch``, or at the prompt)."""
    plan = ["Servers this review starts or contacts:"]
    for server_id, server in config.servers.items():
        plan += _launch_plan(server, states[server_id]) + auth_lines(server)
    click.echo("\n".join(plan), err=as_json)
    unconsented = [sid for sid, why in states.items() if why]
    if unconsented and not consent:
        asking = sys.stdin.isatty() and not as_json
        if not asking or not click.confirm(
                f"Start {', '.join(map(make_visible, unconsented))} as shown above?",
                default=False):
            raise click.ClickException(
                "nothing was started: starting a server runs its command. Read the commands "
                "above and run review again with --launch (or answer yes) to consent.")


async def _review_entries(store: Store, config: McpConfig, facts: list[ToolFacts], *,
                          show_all: bool) -> list[dict[str, Any]]:
    """Connect, refresh the pins, and the entries to show; the lint facts of every pinned tool
    are appended to *facts*."""
    from ..mcp import McpServers

    entries: list[dict[str, Any]] = []
    book = PinBook(store)
    async with McpServers(config, store, launch_changed=True) as servers:
        listed = await servers.refresh()
        names = {sid: {n for s in found for n in (s.name, s.upstream_name)}
                 for sid, found in listed.items() if not isinstance(found, Exception)}
        for server_id, found in listed.items():
            others = sorted(n for sid, ns in names.items() if sid != server_id for n in ns)
            if isinstance(found, Exception):
                entries.append({"name": server_id, "server": server_id,
                                "state": "unreachable", "problem": str(found)})
                continue
            server_pin = await book.get(server_key(server_id))
            if server_pin is not None and (show_all or
                                           server_pin.state is not PinState.APPROVED):
                entries.append(_review_entry(server_pin, server_id,
                                             server_pin.state.value, "", others))
            for status in found:
                if status.pin is not None:
                    facts.append(facts_of_mcp(status.pin.seen_definition,
                                              f"mcp:{server_id}"))
                    facts[-1] = dataclasses.replace(facts[-1], name=status.name)
                if show_all or status.state != PinState.APPROVED.value:
                    entries.append(_review_entry(status.pin, status.name, status.state,
                                                 status.problem, others))
            entries += await _prompt_entries(servers.toolsets[server_id], others,
                                             show_all=show_all)
    return entries


async def _prompt_entries(toolset: McpToolset, others: list[str], *,
                          show_all: bool) -> list[dict[str, Any]]:
    """The server's prompts, pinned now (so one approval serves them through the gateway)."""
    try:
        pins = await toolset.observe_prompts()
    except AnfitrionError as exc:
        return [{"name": f"{toolset.id}.prompts", "server": toolset.id, "state": "unreachable",
                 "problem": str(exc)}]
    return [_review_entry(pin, pin.name, pin.state.value, "", others)
            for pin in pins if show_all or pin.state is not PinState.APPROVED]


def _echo_review(entries: list[dict[str, Any]], linted: LintReport, config: McpConfig,
                 config_path: str, store_url: str | None, *, show_all: bool) -> None:
    """The review for a person: each entry, its definition against the approved one, the
    findings and the lint, and how to approve it."""
    if not entries:
        click.echo("every tool is approved and unchanged")
    if linted.standing and not show_all:
        shown_names = {visible(e["name"]) for e in entries}
        hidden = [f for f in linted.standing if f.tool not in shown_names]
        if hidden:
            click.echo(f"lint: {len(hidden)} finding(s) on approved tools (--all shows them)")
    noted: set[str] = set()
    for entry in entries:
        click.echo(click.style(f"\n── {make_visible(entry['name'])}  [{entry['state']}]",
                               bold=True))
        if entry["problem"]:
            click.echo(f"   {make_visible(entry['problem'])}")
        owner = config.servers.get(entry["name"].partition(".")[0])
        if owner is not None and not owner.trusted and owner.id not in noted:
            noted.add(owner.id)
            click.echo(_trust_note(owner, config_path))
        if "definition" in entry:
            _echo_definition(entry, config_path, store_url)


def _echo_summary(entries: list[dict[str, Any]], linted: LintReport, config: McpConfig,
                  config_path: str, store_url: str | None) -> None:
    """A table per server, then the one command that approves, each at the digest shown,
    what was reviewed and raised no warning."""
    rows = [("server", "tools", "prompts", "approved", "to review", "warnings", "lint")]
    standing = {f.tool for f in linted.standing}
    for server_id in config.servers:
        own = [e for e in entries if e["name"] == server_id
               or e["name"].startswith(server_id + ".")]
        items = [e for e in own if e["name"] != server_id and e["state"] != "unreachable"]
        prompts = [e for e in items if ".prompt:" in e["name"]]
        rows.append((make_visible(server_id), str(len(items) - len(prompts)), str(len(prompts)),
                     str(sum(e["state"] == PinState.APPROVED.value for e in items)),
                     str(sum(e["state"] in ("new", "changed") for e in own)),
                     str(sum(bool(e.get("findings")) for e in own)),
                     str(sum(visible(e["name"]) in standing for e in items))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    click.echo(click.style("\n── summary", bold=True))
    for row in rows:
        click.echo("   " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                             strict=True)))
    waiting = [e for e in entries if e["state"] in ("new", "changed")]
    clean = [e for e in waiting if not e.get("findings")]
    warned = [e for e in waiting if e.get("findings")]
    if clean:
        store = f" --store {shlex.quote(store_url)}" if store_url else ""
        click.echo(f"approve the {len(clean)} reviewed above without a warning, each as shown "
                   "(its digest):")
        click.echo(f"   anfitrion mcp approve --config {shlex.quote(config_path)}{store} "
                   + " ".join(shlex.quote(f"{e['name']}@{e['digest'][:12]}") for e in clean))
    if warned:
        click.echo(click.style(
            f"not in that command: {len(warned)} with a warning "
            f"({', '.join(make_visible(e['name']) for e in warned)}): read each above and "
            "approve it with its own line, if at all", fg="red"))
    if not waiting:
        click.echo("nothing waits for approval")


def _echo_definition(entry: dict[str, Any], config_path: str, store_url: str | None) -> None:
    click.echo(f"   digest {entry['digest']}")
    approved = entry["approved_definition"]
    for key, value in entry["definition"].items():
        before = approved.get(key) if approved else None
        mark = "   " if approved is None or before == value else " ! "
        if isinstance(value, (dict, list)) and value:
            click.echo(f"{mark}{key}:")
            click.echo("\n".join("     " + line for line in _render(value)))
        else:
            click.echo(f"{mark}{key}: {_scalar(value)}")
        if approved is not None and before != value:
            click.echo(click.style(f"     (approved: {json.dumps(before)[:300]})",
                                   fg="yellow"))
    for finding in entry["findings"]:
        click.echo(click.style(f"   ⚠ {finding['path']}: {finding['reason']}: "
                               f"{make_visible(finding['excerpt'])}", fg="red"))
    for finding in entry.get("lint", []):
        where = f" [{finding['argument']}]" if finding["argument"] else ""
        text = f"   lint {finding['code']}{where}: {finding['reason']}"
        click.echo(click.style(f"{text}\n     silenced: {finding['silenced']}", dim=True)
                   if finding["silenced"] else click.style(text, fg="yellow"))
    if entry["state"] in ("new", "changed"):
        click.echo("   approve: " + _approve_hint(config_path, store_url, entry["name"],
                                                  entry["digest"]))


def entry_server_id(entry: dict[str, Any], config: McpConfig) -> str | None:
    """The server id when *entry* is a server's own pin (its instructions), else ``None``."""
    name = entry["name"]
    return name if name in config.servers else None


@command.command("approve")
@click.argument("names", nargs=-1, required=True)
@_config_option
@_store_option
@click.option("--digest", "digest_prefix", default=None,
              help="Approve only if the definition is still the one reviewed (one name).")
@click.option("--as", "approver", default=None, help=APPROVER_HELP)
@click.pass_context
def approve(ctx: click.Context, names: tuple[str, ...], config_path: str | None,
            store_url: str | None, digest_prefix: str | None, approver: str | None) -> None:
    """Approve what was seen last of NAMES: SERVER, SERVER.TOOL, SERVER.prompt:NAME or
    'SERVER.*'; NAME@DIGEST approves only if the definition is still the one with that digest
    (as `mcp review` prints them)."""
    if digest_prefix is not None and (len(names) != 1 or names[0].endswith(".*")):
        raise click.UsageError("--digest goes with exactly one server or tool")
    wanted = [_name_and_digest(name, digest_prefix) for name in names]
    who = approver_name(approver)
    config = _config(config_path)

    async def work(store: Store) -> list[Pin]:
        book = PinBook(store)
        for name, digest in wanted:  # every digest first: one changed, nothing approved
            if not name.endswith(".*"):
                await book.seen(name, digest_prefix=digest)
        approved: list[Pin] = []
        for name, digest in wanted:
            if name.endswith(".*"):
                server = name[:-2]
                pins = [p for p in await book.pins(server) if p.state is not PinState.APPROVED]
                if not pins and not await book.pins(server):
                    raise click.ClickException(f"nothing of server {server!r} has been seen: "
                                               "run `anfitrion mcp review` first")
                for pin in pins:
                    approved.append(await book.approve(pin.name, by=who))
            else:
                approved.append(await book.approve(name, by=who, digest_prefix=digest))
        return approved

    for pin in with_store(ctx, _store_url(store_url, config), work):
        click.echo(f"approved {make_visible(pin.name)} ({pin.seen_digest[:12]}) as {who}")


def _name_and_digest(name: str, digest: str | None) -> tuple[str, str | None]:
    """``NAME@DIGEST`` → (NAME, DIGEST): 8 to 64 lower-case hex characters after the last
    ``@``; anything else after an ``@`` is refused rather than guessed."""
    base, at, suffix = name.rpartition("@")
    if not at:
        return name, digest
    if digest is not None or base.endswith(".*") or not re.fullmatch(r"[0-9a-f]{8,64}", suffix):
        raise click.UsageError(f"{make_visible(name)!r}: after @ comes the digest the review "
                               "printed (8 to 64 hex characters), once, and not with --digest "
                               "or a '.*'")
    return base, suffix


@command.command("list")
@_config_option
@_store_option
@_json_option
@click.pass_context
def list_(ctx: click.Context, config_path: str | None, store_url: str | None,
          as_json: bool) -> None:
    """List the pins in the store and their state (without contacting any server)."""
    config = _config(config_path)

    async def work(store: Store) -> list[Pin]:
        return await PinBook(store).pins()

    pins = with_store(ctx, _store_url(store_url, config), work)
    if as_json:
        click.echo(json.dumps([p.to_dict() for p in pins], indent=2, ensure_ascii=False))
        return
    if not pins:
        click.echo("no MCP tool has been seen yet: run `anfitrion mcp review --config FILE`")
    for pin in pins:
        by = f"  approved by {make_visible(pin.approved_by)}" if pin.approved_by else ""
        click.echo(f"{make_visible(pin.name):<40} {pin.state.value:<9} {pin.seen_digest[:12]}"
                   f"{by}")


@command.command("lock")
@_config_option
@click.option("--check", is_flag=True,
              help="Write nothing; exit with status 1 when a version is not locked yet.")
def lock(config_path: str | None, check: bool) -> None:
    """Write the installed version of each npx/uvx/pipx-run package into the config's
    arguments (``pkg`` → ``pkg@1.2.3``; for pipx ``pkg==1.2.3``), so that what runs is what
    was reviewed.

    Versions are resolved offline, from what is installed here (node_modules, the npm
    cache's _npx folders, uv's tool folder and cache, pipx's run cache); a package not
    installed here is reported and left as it is.
    """
    if config_path is None:
        raise click.UsageError("--config FILE is required")
    config = _config(config_path)
    assert config is not None
    try:
        raw = json.loads(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"{config_path}: cannot read: {exc}") from None
    changes = _lock_changes(config, raw)
    for line in changes:
        click.echo(line)
    locked = [line for line in changes if line.startswith("locked")]
    if check:
        if locked:
            raise SystemExit(1)
        return
    if locked:
        temporary = Path(config_path).with_name(Path(config_path).name + ".lock-tmp")
        temporary.write_text(json.dumps(raw, indent=2, ensure_ascii=False) + "\n",
                             encoding="utf-8")
        os.replace(temporary, config_path)
        click.echo(f"wrote {config_path}: review the servers again (anfitrion mcp review)")


def _lock_changes(config: McpConfig, raw: dict[str, Any]) -> list[str]:
    """Rewrite the package arguments in *raw*; one line per server said what was done."""
    lines: list[str] = []
    for server_id, server in config.servers.items():
        spec = package_spec(server.command, server.args) if server.command else None
        if server.command is None or spec is None:
            continue
        runner = os.path.basename(server.command)
        runs = resolve_program(server.command, server.args, cwd=server.cwd,
                               env_path=server.env.get("PATH", environment().get("PATH")),
                               environ={**environment(), **server.env})
        name, version = runs.get("package"), runs.get("version")
        shown = make_visible(f"{server_id}: {name}")
        pinned = f"{name}{'==' if runner == 'pipx' else '@'}{version}"
        if not version:
            lines.append(f"skipped {shown}: not installed here (run it once, then lock)")
        elif spec[1] == pinned:
            lines.append(f"already {make_visible(f'{server_id}: {pinned}')}")
        else:
            raw["mcpServers"][server_id]["args"][spec[0]] = pinned
            lines.append(f"locked {make_visible(f'{server_id}: {pinned}')} "
                         f"(was {make_visible(spec[1])})")
    return lines
