"""``anfitrion policy``: check a call against a policy file, validate a policy file, replay
recorded calls through a new policy, and report a shadow policy's disagreements."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from .._conversation import Provenance
from .._json import parse_json_strict
from .._principal import Principal
from .._tools import BoundCall, Effect, Tool, Toolbox
from ..exceptions import ArgumentError, ConfigError, JsonError, UserError
from ..policy import (
    DEFAULT_POLICY_FILE,
    Decision,
    Evaluation,
    Policy,
    PolicyContext,
    Verdict,
    as_rule,
    lint_rules,
)
from ..store import Store
from ._common import import_reference, load_policy_option, run_with_store, shown, store_option


def _load(path: str | None) -> Policy:
    return load_policy_option(path)


def _toolbox(spec: str) -> Toolbox:
    try:
        found: Any = import_reference(spec)
    except UserError as exc:
        raise click.BadParameter(str(exc), param_hint="--toolbox") from None
    if callable(found) and not isinstance(found, Toolbox):
        found = found()
    if not isinstance(found, Toolbox):
        raise click.BadParameter(f"{spec} is not a Toolbox", param_hint="--toolbox")
    return found


def _any_arguments(arguments: dict[str, Any]) -> None:
    return None


def _decision(d: Decision | None) -> dict[str, Any] | None:
    return None if d is None else d.to_dict()


@click.group("policy")
def command() -> None:
    """Check calls against a policy and validate policy files (anfitrion.toml)."""


@command.command("check")
@click.option("--tool", "tool_name", required=True, help="The tool the model proposes.")
@click.option("--args", "args_json", default="{}", show_default=True,
              help="The arguments, as JSON text.")
@click.option("--principal", "principal_id", required=True,
              help="Who the session acts for (scopes and roles from the policy file).")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False),
              help=f"The policy file (default: ./{DEFAULT_POLICY_FILE} if present, else the "
                   "built-in default).")
@click.option("--toolbox", "toolbox_spec", metavar="MODULE:ATTR",
              help="Load the real tools (a Toolbox, or a function returning one).")
@click.option("--effect", type=click.Choice(["read", "write"]), default="write",
              show_default=True, help="The tool's effect, when no --toolbox describes it.")
@click.option("--scope", "scopes", multiple=True, help="Add a scope to the principal.")
@click.option("--role", "roles", multiple=True, help="Add a role to the principal.")
@click.option("--prior-calls", type=click.IntRange(min=0), default=0, show_default=True,
              help="Calls the principal already made in every rate-limit window.")
@click.option("--turn", type=click.IntRange(min=0), default=1, show_default=True,
              help="The session's turn number (for turn budgets).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def check(tool_name: str, args_json: str, principal_id: str, policy_path: str | None,
          toolbox_spec: str | None, effect: str, scopes: tuple[str, ...], roles: tuple[str, ...],
          prior_calls: int, turn: int, as_json: bool) -> None:
    """Print the decision for one call, the rule that made it, and every rule's opinion."""
    policy = _load(policy_path)
    declared = policy.principal(principal_id)
    principal = Principal(principal_id, declared.roles | frozenset(roles),
                          declared.scopes | frozenset(scopes), declared.attributes)
    try:
        arguments = parse_json_strict(args_json)
    except JsonError as exc:
        raise click.BadParameter(str(exc), param_hint="--args") from None
    if not isinstance(arguments, dict):
        raise click.BadParameter("the arguments must be a JSON object", param_hint="--args")

    tool: Tool | None
    problem: str | None = None
    if toolbox_spec is not None:
        tool = _toolbox(toolbox_spec).get(tool_name)
        if tool is None:
            problem = f"unknown tool {tool_name!r}: an unknown tool is always denied"
    else:
        try:
            tool = Tool.from_schema(tool_name, {"type": "object", "additionalProperties": True},
                                    _any_arguments, effect=Effect(effect))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--tool") from None
    if tool is not None and problem is None:
        try:  # as the gate sees it: the policy's [tools] declarations applied
            tool = policy.declared(tool)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
        try:
            tool.validate(arguments)
        except ArgumentError as exc:
            problem = f"invalid arguments: {exc}"

    evaluation: Evaluation | None = None
    if tool is not None and problem is None:
        counts = {key.id: prior_calls for key in policy.rate_keys(tool.name)}
        context = PolicyContext(principal=principal, session_id="policy-check", turn=turn,
                                now=policy.now(), rate_counts=counts)
        evaluation = _evaluate(policy, BoundCall("check", tool, arguments), context)

    if as_json:
        click.echo(json.dumps({
            "tool": tool_name, "principal": principal.to_dict(), "arguments": arguments,
            "policy": policy.source, "effect": tool.effect.value if tool else None,
            "rejected": problem,
            "decision": _decision(evaluation.decision) if evaluation else None,
            "opinions": [{"rule_id": o.rule_id, "decision": _decision(o.decision)}
                         for o in evaluation.opinions] if evaluation else [],
        }, ensure_ascii=False, indent=2))
        return
    click.echo(f"policy: {policy.source or 'built-in default'}")
    if problem is not None or evaluation is None:
        click.echo(click.style(f"rejected before the policy: {problem}", fg="red"))
        return
    d = evaluation.decision
    color = {"allow": "green", "ask": "yellow", "deny": "red"}[d.verdict.value]
    click.echo(f"{tool_name} ({tool.effect.value if tool else '?'}) for {principal_id}: "
               + click.style(d.verdict.value.upper(), fg=color, bold=True))
    click.echo(f"  reason: {d.reason}")
    click.echo(f"  decided by: {d.rule_id}")
    if d.verdict.value == "deny":
        click.echo(f"  the model would see: denied by policy: {d.reason}")
    if evaluation.opinions:
        click.echo("rules:")
        for o in evaluation.opinions:
            said = "—" if o.decision is None else f"{o.decision.verdict.value}: {o.decision.reason}"
            click.echo(f"  {o.rule_id}: {said}")


def _evaluate(policy: Policy, call: BoundCall, context: PolicyContext) -> Evaluation:
    """Every rule's opinion, the external decision points ([[pdp]]) asked first."""
    import anyio

    consulted = anyio.run(policy.consult, call, context)
    return policy.evaluate(call, consulted)


@command.command("validate")
@click.argument("path", required=False, type=click.Path(dir_okay=False))
@click.option("--toolbox", "toolbox_spec", metavar="MODULE:ATTR",
              help="Also list the tools whose results count as untrusted (the default), "
                   "and check the [tools] declarations against these tools.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def validate(path: str | None, toolbox_spec: str | None, as_json: bool) -> None:
    """Load a policy file, report the first error or list what it contains.

    With --toolbox, also list the tools left at the default provenance (untrusted): after one
    of them ran, the session asks a person before every write.
    """
    if path is None and not os.path.exists(DEFAULT_POLICY_FILE):
        raise click.ClickException(f"no ./{DEFAULT_POLICY_FILE} in this folder: name the "
                                   "policy file to validate (anfitrion policy validate PATH)")
    policy = _load(path or DEFAULT_POLICY_FILE)
    untrusted = None if toolbox_spec is None else sorted(
        t.name for t in _toolbox(toolbox_spec) if t.provenance is Provenance.UNTRUSTED)
    if toolbox_spec is not None:  # [tools."<name>"] templates must name the tools' arguments
        from ..policy import check_declarations

        try:
            check_declarations(policy.declarations, _toolbox(toolbox_spec))
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
        _validate_cedar(policy, _toolbox(toolbox_spec))
    defaults = {e.value: v.value for e, v in policy.defaults.items()}
    rules = [as_rule(rule) for rule in policy.rules]
    summary: dict[str, Any] = {
        "policy": policy.source,
        "sha256": policy.sha256,
        "shadow": None if policy.shadow is None else {"policy": policy.shadow.source,
                                                      "sha256": policy.shadow.sha256},
        "defaults": defaults,
        "rules": [rule.rule_id for rule in rules],
        "rule_settings": {rule.rule_id: dict(rule.settings) for rule in rules
                          if rule.settings is not None},
        "principals": {pid: p.to_dict() for pid, p in policy.principals.items()},
        "budgets": policy.budgets.to_dict(),
        "approvals": policy.approvals.to_dict(),  # durations in seconds
        "untrusted_tools": untrusted,
        "warnings": [{"rule": rule_id, "warning": text}
                     for rule_id, text in lint_rules(policy)],
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{policy.source}: valid")
    click.echo("defaults: " + ", ".join(f"{k} → {v}" for k, v in defaults.items()))
    for rule in rules:
        settings = rule.settings
        shown = "" if not settings else " (" + "; ".join(
            f"{key}: {_setting(value)}" for key, value in settings.items()) + ")"
        click.echo(f"  rule {rule.rule_id}{shown}")
        if rule.trade_off is not None:
            click.echo(f"    trade-off: {rule.trade_off}")
    for warning in summary["warnings"]:
        click.echo(f"warning: rule {warning['rule']} {warning['warning']}")
    for line in _confined_allows(policy):
        click.echo(line)
    if untrusted:
        click.echo(f"tools whose results count as untrusted (the default provenance): "
                   f"{', '.join(untrusted)}")
        click.echo("  after one of them ran, the session asks a person before every write. "
                   "If a tool's results\n  come only from you or systems you control, declare "
                   "it: @tools.tool(provenance=\"trusted\")")
    elif untrusted is not None:
        click.echo("every tool declares trusted results")


def _validate_cedar(policy: Policy, toolbox: Toolbox) -> None:
    """``policy validate --toolbox``: the ``[[cedar]]`` policies against the schema of these
    tools (``policy cedar-schema``); every error at its file and line."""
    rules = [rule for rule in policy.rules if type(rule).__name__ == "CedarRule"]
    if not rules:
        return
    from ..policy import CedarRule, cedar_schema, validate_cedar

    schema = cedar_schema(toolbox)
    problems = [f"{rule.policies.source}:{line or '?'}: {message}"
                for rule in rules if isinstance(rule, CedarRule)
                for line, message in validate_cedar(rule.policies, schema)]
    if problems:
        raise click.ClickException("the Cedar policies do not validate against the tools' "
                                   "schema (anfitrion policy cedar-schema):\n  "
                                   + "\n  ".join(problems))


@command.command("cedar-schema")
@click.option("--toolbox", "toolbox_spec", metavar="MODULE:ATTR", required=True,
              help="The tools (a Toolbox, or a function returning one).")
def cedar_schema_command(toolbox_spec: str) -> None:
    """Print the Cedar schema of the requests anfitrion makes for these tools.

    Entity types Principal (roles, scopes), Server and Toolkit; one action per tool whose
    context carries its arguments' types. Save it and name it in the policy file
    ([[cedar]] schema = "tools.cedarschema") to validate the policies when they load.
    """
    from ..policy import cedar_schema

    click.echo(cedar_schema(_toolbox(toolbox_spec)), nl=False)


@command.command("export")
@click.option("--cedar", "as_cedar", is_flag=True, required=True,
              help="Write the rules as Cedar policies (the only format for now).")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False),
              help=f"The policy file (default: ./{DEFAULT_POLICY_FILE}).")
@click.option("--toolbox", "toolbox_spec", metavar="MODULE:ATTR",
              help="The tools, to expand tool-name globs into Cedar actions.")
def export_command(as_cedar: bool, policy_path: str | None, toolbox_spec: str | None) -> None:
    """Print the policy file's rules that Cedar can express, as Cedar (a translation aid).

    Rules Cedar cannot express (taint containment, rate limits, budgets, the repeat guard,
    credentials in arguments, quorums, most argument constraints) are listed at the top as
    comments, with the reason: they stay anfitrion rules.
    """
    from ..policy import export_cedar

    if policy_path is None and not os.path.exists(DEFAULT_POLICY_FILE):
        raise click.ClickException(f"no ./{DEFAULT_POLICY_FILE} in this folder: name the "
                                   "policy file (--policy PATH)")
    policy = _load(policy_path or DEFAULT_POLICY_FILE)
    names = None if toolbox_spec is None else [t.name for t in _toolbox(toolbox_spec)]
    text, _ = export_cedar(policy, names)
    click.echo(text, nl=False)


def _confined_allows(policy: Any) -> list[str]:
    """What ``policy validate`` says of the allow rules once a session is tainted: the taint
    rule escalates them (an operator's allow never silently admits an argument an injection
    chose), and under ``reads = "sinks"``/``"proven"`` lets a declared write through only
    when its sinks are proven."""
    from ..policy import TaintRule

    taint = next((r for r in policy.rules if isinstance(r, TaintRule)), None)
    allows = [as_rule(r).rule_id for r in policy.rules
              if getattr(r, "verdict", None) is Verdict.ALLOW]
    if taint is None or not allows:
        return []
    how = ("only for a declared write whose sinks are proven"
           if taint.reads in ("sinks", "proven") else "never: every write asks")
    return [f"allow rules taint can no longer bypass after untrusted content: "
            f"{', '.join(allows)}",
            f"  they let a write run without a person after taint {how}"]


def _setting(value: Any) -> str:
    if value is None:
        return "any"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return str(value)


# -- rollout: replay and shadow mode ------------------------------------------------------------

EXIT_NEWLY_ALLOWED = 3
"""``policy replay``: a recorded call the new policy would allow that was asked or denied."""
EXIT_UNTRUSTWORTHY = 4
"""``policy replay`` / ``shadow-report``: the audit log does not verify, or the stored
sessions differ from it."""


def _since(text: str | None) -> float | None:
    """``--since``: an ISO date or time (UTC unless it says), or a duration back from now
    (``7d``, ``12h``, ``30m``)."""
    if text is None:
        return None
    import time
    from datetime import UTC, datetime

    from ..policy import parse_duration

    try:
        return time.time() - parse_duration(text).total_seconds()
    except (ValueError, TypeError):
        pass
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter("give an ISO date or time (2026-12-01, 2026-12-01T09:00) or "
                                 "a duration back from now (7d, 12h)",
                                 param_hint="--since") from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def _replay_tools(spec: str | None) -> Any:
    """The tools replay uses: --toolbox for every session, else the demo's for demo sessions.
    An app a session records is never imported: the store is not a source of code to run."""
    if spec is not None:
        given = {t.name: t for t in _toolbox(spec)}
        return given
    from .._apps import DEMO_APP
    from .._demo import demo_toolbox

    demo: dict[str, Tool] = {}

    def tools_for(state: Any) -> dict[str, Tool] | None:
        if state.data.get("app") != DEMO_APP:
            return None
        if not demo:
            demo.update({t.name: t for t in demo_toolbox()})
        return demo

    return tools_for


def _print_changes(changes: Any, before_word: str) -> None:
    for change in changes:
        color = "red" if change.loosens else "yellow"
        click.echo(click.style(f"  {change.before.value} → {change.after.value}", fg=color,
                               bold=True)
                   + f"  {shown(change.tool)}  by {shown(change.rule_id)}: {change.count} call(s)")
        for example in change.examples:
            args = ", ".join(f"{shown(str(k))}={shown(str(v))}"
                             for k, v in dict(example.get("arguments_preview") or {}).items())
            click.echo(f"      {example['at']} session {shown(str(example['session_id']))} "
                       f"call {shown(str(example['call_id']))}"
                       + (f" ({args})" if args else ""))
            if "after" in example:
                before = shown(str(example["before"]["rule_id"]))
                click.echo(f"        {before_word} {before}; now: "
                           f"{shown(str(example['after']['reason']))}")


def _loud(problem: str, *, refused: bool = False) -> None:
    bar = "!" * 72
    then = ("  Nothing was reported. --allow-broken-chain reports anyway." if refused else
            "  What follows describes a history that may not have happened.")
    click.echo(click.style(f"{bar}\n  THE AUDIT LOG IS NOT TRUSTWORTHY: {shown(problem)}\n"
                           f"{then}\n{bar}", fg="red", bold=True), err=True)


@command.command("replay")
@click.option("--policy", "policy_path", required=True, type=click.Path(dir_okay=False),
              help="The new policy file to replay the recorded calls through.")
@click.option("--since", "since_text", metavar="WHEN",
              help="Only calls decided since WHEN: an ISO date or time, or a duration (7d).")
@store_option
@click.option("--toolbox", "toolbox_spec", metavar="MODULE:ATTR",
              help="The tools the calls were made with (a Toolbox, or a function returning "
                   "one); without it only demo sessions are replayed.")
@click.option("--expect-head", metavar="HASH",
              help="The chain head an earlier `anfitrion audit verify` printed: detects a "
                   "log rewritten from scratch or cut at the end.")
@click.option("--allow-broken-chain", is_flag=True,
              help="Replay even when the audit log does not verify (reported loudly, exit 4).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def replay(policy_path: str, since_text: str | None, store_url: str | None,
           toolbox_spec: str | None, expect_head: str | None, allow_broken_chain: bool,
           as_json: bool) -> None:
    """Run every recorded call through a new policy, offline, and show what would change.

    Each call the audit log says was decided is decided again by the new policy, with what
    the gate saw then (turn, counters, recent calls, taint and flagged arguments rebuilt
    from the stored transcript up to that call); no tool runs. The audit chain is verified
    first, and each stored call is checked against its audit record.

    Exit status: 0; 3 when a call that was asked or denied would now be allowed; 4 when the
    audit log does not verify or the sessions differ from it (refused unless
    --allow-broken-chain).
    """
    from .._rollout import ReplayRefused
    from .._rollout import replay as run_replay

    policy = _load(policy_path)
    since = _since(since_text)
    tools = _replay_tools(toolbox_spec)

    async def work(store: Store) -> Any:
        return await run_replay(store, policy, tools=tools, since=since,
                                expect_head=expect_head, allow_broken=allow_broken_chain)

    try:
        report = run_with_store(store_url, work)
    except click.ClickException as exc:
        cause = exc.__cause__
        if isinstance(cause, ReplayRefused):
            if as_json:
                click.echo(json.dumps({"refused": str(cause), "chain": cause.chain.to_dict(),
                                       "mismatches": list(cause.mismatches)}, indent=2))
            _loud(str(cause), refused=True)
            raise SystemExit(EXIT_UNTRUSTWORTHY) from None
        raise
    if as_json:
        click.echo(json.dumps(report.to_dict() | {"policy": policy.source}, indent=2))
    else:
        if not report.trustworthy:
            _loud(report.chain.problem or f"{len(report.mismatches)} stored call(s) differ "
                  "from their audit records")
        click.echo(f"replay of {report.calls} recorded call(s) through {policy.source} "
                   f"(policy {report.policy_sha256[:12]})")
        click.echo(f"  audit chain: {'verified' if report.chain.ok else 'BROKEN'} "
                   f"({report.chain.records} records, head {report.chain.head[:12]})")
        click.echo(f"  replayed {report.replayed}: {report.unchanged} unchanged, "
                   f"{report.replayed - report.unchanged} changed")
        for why, n in sorted(report.skipped.items()):
            click.echo(f"  not replayed ({why}): {n}")
        _print_changes(report.changes, "was decided by")
        if report.newly_allowed:
            click.echo(click.style(f"{report.newly_allowed} call(s) that were asked about or "
                                   "denied would now be allowed", fg="red", bold=True))
    if not report.trustworthy:
        raise SystemExit(EXIT_UNTRUSTWORTHY)
    if report.newly_allowed:
        raise SystemExit(EXIT_NEWLY_ALLOWED)


@command.command("shadow-report")
@store_option
@click.option("--since", "since_text", metavar="WHEN",
              help="Only decisions since WHEN: an ISO date or time, or a duration (7d).")
@click.option("--shadow", "shadow_sha", metavar="HASH",
              help="Only the shadow policy with this content hash (a prefix is enough).")
@click.option("--expect-head", metavar="HASH", help="The chain head kept from an earlier "
                                                   "`anfitrion audit verify`.")
@click.option("--allow-broken-chain", is_flag=True,
              help="Report even when the audit log does not verify (loudly, exit 4).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def shadow_report(store_url: str | None, since_text: str | None, shadow_sha: str | None,
                  expect_head: str | None, allow_broken_chain: bool, as_json: bool) -> None:
    """Summarise where the shadow policy disagreed with the enforced one.

    A shadow policy (Runtime(shadow_policy=...), or [shadow] policy = "candidate.toml" in
    the policy file) is decided beside the enforced policy on every call and recorded,
    never enforced. Exit status 4 when the audit log does not verify.
    """
    from .._rollout import ReplayRefused
    from .._rollout import shadow_report as run_report

    since = _since(since_text)

    async def work(store: Store) -> Any:
        return await run_report(store, since=since, policy_sha256=shadow_sha,
                                expect_head=expect_head, allow_broken=allow_broken_chain)

    try:
        report = run_with_store(store_url, work)
    except click.ClickException as exc:
        if isinstance(exc.__cause__, ReplayRefused):
            _loud(str(exc.__cause__), refused=True)
            raise SystemExit(EXIT_UNTRUSTWORTHY) from None
        raise
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        if not report.chain.ok:
            _loud(report.chain.problem)
        click.echo(f"shadow decisions: {report.decisions} — {report.agreed} agreed, "
                   f"{report.disagreed} disagreed, {report.errors} failed")
        for sha, n in sorted(report.policies.items()):
            click.echo(f"  shadow policy {shown(sha[:12])}: {n} decision(s)")
        _print_changes(report.changes, "enforced")
    if not report.chain.ok:
        raise SystemExit(EXIT_UNTRUSTWORTHY)
