"""Entry point of the ``anfitrion`` command.

Each command lives in its own module of this package and exposes ``command`` (a click command or
group); this module only assembles them, so adding a command never edits another's module.
"""

from __future__ import annotations

import importlib

import click

from .. import __version__

# Modules of this package that provide a ``command``; missing ones are simply absent.
_COMMAND_MODULES = ("demo", "chat", "policy", "approvals", "resume", "audit", "db", "serve",
                    "gateway", "mcp", "effects", "tools", "auth", "reviewers")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="anfitrion")
def cli() -> None:
    """anfitrion — the host for tool-calling language models.

    The model proposes; the host disposes: every tool call passes one gate (resolve, validate,
    decide, approve, execute, shape) and is audited.
    """


def _same_help_option(command: click.Command) -> None:
    """``-h`` works everywhere, however a command is invoked (click caches the option)."""
    command.context_settings.setdefault("help_option_names", ["-h", "--help"])
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _same_help_option(sub)


def _register() -> None:
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__package__}.{name}":
                continue
            raise
        _same_help_option(module.command)
        cli.add_command(module.command)


_register()


def main() -> None:
    cli()


if __name__ == "__main__":  # pragma: no cover - `python -m anfitrion._cli.main`
    main()
