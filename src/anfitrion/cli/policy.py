"""``anfitrion policy``: check a call against a policy file, and validate a policy file."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from .._json import JsonError, parse_json_strict
from ..conversation import Provenance
from ..exceptions import ConfigError, UserError
from ..policy import (
    DEFAULT_POLICY_FILE,
    Decision,
    Evaluation,
    Policy,
    PolicyContext,
    rule_id_of,
)
from ..principal import Principal
from ..tools import ArgumentError, BoundCall, Effect, Tool, Toolbox
from ._common import import_reference, load_policy_option


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
        try:
            tool.validate(arguments)
        except ArgumentError as exc:
            problem = f"invalid arguments: {exc}"

    evaluation: Evaluation | None = None
    if tool is not None and problem is None:
        counts = {key.id: prior_calls for key in policy.rate_keys(tool.name)}
        context = PolicyContext(principal=principal, session_id="policy-check", turn=turn,
                                now=policy.now(), rate_counts=counts)
        evaluation = policy.evaluate(BoundCall("check", tool, arguments), context)

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
        from ..policy.declarations import check_declarations

        try:
            check_declarations(policy.declarations, _toolbox(toolbox_spec))
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    defaults = {e.value: v.value for e, v in policy.defaults.items()}
    summary: dict[str, Any] = {
        "policy": policy.source,
        "defaults": defaults,
        "rules": [rule_id_of(rule) for rule in policy.rules],
        "rule_settings": {rule_id_of(rule): settings for rule in policy.rules
                          if isinstance(settings := getattr(rule, "settings", None), dict)},
        "principals": {pid: p.to_dict() for pid, p in policy.principals.items()},
        "budgets": {"tool_calls": policy.budgets.tool_calls, "turns": policy.budgets.turns,
                    "approvals_asked": policy.budgets.approvals_asked},
        "approvals": {"ttl_seconds": policy.approvals.ttl.total_seconds(),
                      "max_pending": policy.approvals.max_pending,
                      "max_asks": policy.approvals.max_asks,
                      "per_seconds": policy.approvals.per.total_seconds(),
                      "max_edits": policy.approvals.max_edits},
        "untrusted_tools": untrusted,
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{policy.source}: valid")
    click.echo("defaults: " + ", ".join(f"{k} → {v}" for k, v in defaults.items()))
    for rule in policy.rules:
        settings = summary["rule_settings"].get(rule_id_of(rule))
        shown = "" if not settings else " (" + "; ".join(
            f"{key}: {_setting(value)}" for key, value in settings.items()) + ")"
        click.echo(f"  rule {rule_id_of(rule)}{shown}")
    if untrusted:
        click.echo(f"tools whose results count as untrusted (the default provenance): "
                   f"{', '.join(untrusted)}")
        click.echo("  after one of them ran, the session asks a person before every write. "
                   "If a tool's results\n  come only from you or systems you control, declare "
                   "it: @tools.tool(provenance=\"trusted\")")
    elif untrusted is not None:
        click.echo("every tool declares trusted results")


def _setting(value: Any) -> str:
    if value is None:
        return "any"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return str(value)
