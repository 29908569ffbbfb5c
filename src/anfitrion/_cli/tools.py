"""``anfitrion tools``: check tool definitions before a model sees them.

    anfitrion tools lint myapp.tools:toolbox                  # findings, exit 1 if any stand
    anfitrion tools lint myapp.tools:toolbox --policy anfitrion.toml --json
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from .._tools import Tool, Toolbox
from ..exceptions import UserError
from ..policy import (
    DEFAULT_POLICY_FILE,
    LINT_CODES,
    LintReport,
    Policy,
    Silence,
    facts_of_tool,
    lint_tools,
    visible,
)
from ._common import import_reference, load_policy_option

EXIT_FINDINGS = 1
"""The exit code when a finding stands (no silence covers it): CI fails."""


def tools_of(spec: str) -> list[Tool]:
    """The tools *spec* (``module:attr``) names: a Toolbox, tools, or a function returning
    either."""
    try:
        found: Any = import_reference(spec)
    except UserError as exc:
        raise click.BadParameter(str(exc), param_hint="MODULE:ATTR") from None
    if callable(found) and not isinstance(found, (Toolbox, Tool)):
        found = found()
    if isinstance(found, Tool):
        return [found]
    if isinstance(found, Toolbox) or (isinstance(found, (list, tuple)) and
                                      all(isinstance(t, Tool) for t in found)):
        return list(found)
    raise click.BadParameter(f"{spec} is not a Toolbox or a list of tools",
                             param_hint="MODULE:ATTR")


def print_report(report: LintReport, *, title: str) -> None:
    """The report on the terminal: one line per finding (texts are escaped already)."""
    standing = len(report.standing)
    silenced = len(report.findings) - standing
    click.echo(f"{title}: {report.tools} tool(s), {standing} finding(s)"
               + (f", {silenced} silenced" if silenced else ""))
    for f in report.findings:
        where = f" [{f.argument}]" if f.argument else ""
        line = f"  {f.tool}: {f.code}{where}: {f.reason}"
        if f.silenced is not None:
            click.echo(click.style(f"{line}\n    silenced: {f.silenced}", dim=True))
        else:
            click.echo(click.style(f"  {f.tool}: ", bold=True) + f"{f.code}{where}: {f.reason}")
    for s in report.unused_silences:
        click.echo(click.style(f"  unused silence: {visible(s.finding)} for {visible(s.tool)}"
                               + (f" [{visible(s.argument)}]" if s.argument else "")
                               + " matches no finding: remove it", fg="yellow"))


def lint_report(tools: Sequence[Tool], policy: Policy, silences: Sequence[Silence]
                ) -> LintReport:
    return lint_tools([facts_of_tool(t) for t in tools], policy=policy, silenced=silences)


@click.group("tools")
def command() -> None:
    """Check tool definitions (descriptions, effects, arguments, names)."""


@command.command("lint")
@click.argument("spec", metavar="MODULE:ATTR")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False),
              help=f"The policy file: its argument constraints narrow free-form arguments, and "
                   f"its [lint] table silences findings (default: ./{DEFAULT_POLICY_FILE} if "
                   "present).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def lint(spec: str, policy_path: str | None, as_json: bool) -> None:
    """Lint the tools MODULE:ATTR names (a Toolbox, or a function returning one).

    Exit status: 0 when no finding stands, 1 when one does (silence accepted ones in the
    policy file's [[lint.silence]] with a reason), 2 on a usage error.
    """
    policy = load_policy_option(policy_path)
    report = lint_report(tools_of(spec), policy, policy.lint_silences)
    if as_json:
        click.echo(json.dumps(report.to_dict() | {"codes": dict(LINT_CODES)}, indent=2))
    else:
        print_report(report, title=f"tools lint {spec}")
    if report.standing:
        raise SystemExit(EXIT_FINDINGS)
