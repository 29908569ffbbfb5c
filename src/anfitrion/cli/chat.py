"""``anfitrion chat``: talk to a real model through the host, approvals on the terminal.

Example::

    anfitrion chat --model anthropic:claude-sonnet-4-5
    anfitrion chat --model openai-chat:qwen2.5 --base-url http://127.0.0.1:8080/v1
    anfitrion chat --model openai:gpt-5-mini --tools mypackage.tools:toolbox
"""

from __future__ import annotations

import importlib
import tempfile
from typing import Any

import anyio
import anyio.to_thread
import click

from .._demo import demo_toolbox
from ..approvals import TerminalApprover
from ..events import HostEvent
from ..exceptions import UserError
from ..host import Host, RunStatus
from ..models._streaming import StreamingModel
from ..models.registry import resolve_model
from ..tools import ToolSource
from .demo import DemoPrinter

EXIT_WORDS = frozenset({"/quit", "/exit", "exit", "quit"})


class ChatPrinter(DemoPrinter):
    """Streams the model's text and shows the gate's steps, each on its own line."""

    def __init__(self) -> None:
        super().__init__()
        self.streamed: list[str] = []

    def text(self, delta: str) -> None:
        self.streamed.append(delta)
        click.echo(delta, nl=False)

    def end_line(self) -> None:
        if self.streamed and not self.streamed[-1].endswith("\n"):
            click.echo()
            self.streamed.append("\n")

    def __call__(self, event: HostEvent) -> None:
        self.end_line()
        super().__call__(event)


def load_tools(reference: str | None, workdir: str) -> ToolSource:
    """The tool source named ``module:attribute`` (a Toolbox, or a function returning one);
    without a reference, the demo toolbox working in *workdir*.

    Raises:
        UserError: the reference cannot be imported or is not a tool source.
    """
    if reference is None:
        return demo_toolbox(workdir)
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise UserError(f"--tools {reference!r} must look like module:attribute")
    try:
        found: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"--tools {reference!r}: {exc}") from None
    if not isinstance(found, ToolSource) and callable(found):
        found = found()
    if not isinstance(found, ToolSource):
        raise UserError(f"--tools {reference!r} is not a Toolbox or tool source")
    return found


@click.command("chat")
@click.option("--model", "spec", default="scripted:demo", show_default=True,
              help="PROVIDER:MODEL — anthropic:…, openai:… (Responses), openai-chat:…, "
                   "local:…, scripted:demo.")
@click.option("--tools", "tools_ref", default=None, metavar="MODULE:ATTR",
              help="The tools to offer (a Toolbox or a function returning one). "
                   "Default: the demo toolbox.")
@click.option("--base-url", default=None,
              help="Endpoint of a compatible server, e.g. http://127.0.0.1:8080/v1.")
@click.option("--instructions", default=None, help="The system prompt.")
@click.option("--store", "store_url", default="memory://", show_default=True,
              help="Store URL (memory://, sqlite:///PATH, postgresql://…).")
@click.option("--max-turns", default=8, show_default=True, help="Model requests per prompt.")
def command(spec: str, tools_ref: str | None, base_url: str | None,
            instructions: str | None, store_url: str, max_turns: int) -> None:
    """Chat with a model through the host; every tool call passes the gate.

    Reads one prompt per line until end of input or /quit. Text streams as it arrives; write
    tools ask for approval on the terminal.
    """
    with tempfile.TemporaryDirectory(prefix="anfitrion-chat-") as workdir:
        try:
            model = resolve_model(spec, base_url=base_url)
            tools = load_tools(tools_ref, workdir)
        except UserError as exc:
            raise click.ClickException(str(exc)) from None
        printer = ChatPrinter()
        host = Host(model=StreamingModel(model, printer.text), tools=tools, store=store_url,
                    approver=TerminalApprover(), instructions=instructions,
                    max_turns=max_turns, listeners=[printer])
        anyio.run(_chat, host, model.name, printer)


def _read_prompt() -> str | None:
    try:
        return input("you> ")
    except (EOFError, KeyboardInterrupt):
        return None


async def _chat(host: Host, name: str, printer: ChatPrinter) -> None:
    click.echo(f"chatting with {name} — /quit to leave")
    session_id: str | None = None
    while True:
        prompt = await anyio.to_thread.run_sync(_read_prompt)
        if prompt is None or prompt.strip() in EXIT_WORDS:
            click.echo()
            return
        if not prompt.strip():
            continue
        printer.streamed.clear()
        run = await host.run(prompt, principal="cli-user", session_id=session_id)
        session_id = run.session_id
        printer.end_line()
        if run.status is RunStatus.COMPLETED:
            if not printer.streamed:
                click.echo(run.output)
        else:
            detail = f": {run.error}" if run.error else ""
            click.echo(click.style(f"[{run.status.value}{detail}]", fg="yellow"))
