"""Render the CLI reference (docs/cli.md) from the commands' own help.

``python -m anfitrion._cli._reference > docs/cli.md`` regenerates it; a test checks it is current.
"""

from __future__ import annotations

import click

from .main import cli


def _walk(command: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            found += _walk(command.commands[name], [*path, name])
    return found


def render() -> str:
    """The whole reference as Markdown."""
    out = ["# CLI reference", "",
           "Generated from the commands' help by `python -m anfitrion._cli._reference`; "
           "`tests/cli/test_reference.py` checks that this page is current.", ""]
    for path, command in _walk(cli, ["anfitrion"]):
        name = " ".join(path)
        # the same help option names as the real CLI (click caches the option per command)
        with click.Context(command, info_name=name, terminal_width=100, max_content_width=100,
                           help_option_names=["-h", "--help"]) as ctx:
            text = command.get_help(ctx)
        out += [f"## `{name}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover - the generator's entry point
    print(render(), end="")
