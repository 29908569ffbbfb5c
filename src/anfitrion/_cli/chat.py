"""``anfitrion chat``: talk to a real model through the host, approvals on the terminal.

The same policy (``--policy``, else ``./anfitrion.toml``), principal (``--principal``) and store
(``--store``, else the one rule of every command) as the other commands that run tools.

Example::

    anfitrion chat --model anthropic:claude-sonnet-4-5
    anfitrion chat --model openai-chat:qwen2.5 --base-url http://127.0.0.1:8080/v1
    anfitrion chat --model openai:gpt-5-mini --tools mytools:toolbox
"""

from __future__ import annotations

import asyncio
import functools
import getpass
import signal
import tempfile
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import click

from .._conversation import Reply
from .._demo import demo_toolbox
from .._events import HostEvent
from .._home import environment
from .._host import Host, RunResult, RunStatus, unperformed_note
from .._principal import Principal
from .._tools import ToolSource
from ..exceptions import ModelError, UserError
from ..models import Model, ModelRequest, resolve_model
from ._common import (
    import_reference,
    load_policy_option,
    policy_option,
    resolve_url,
    shown_store,
    store_option,
)
from .demo import DemoPrinter
from .terminal import TerminalApprover

T = TypeVar("T")

EXIT_WORDS = frozenset({"/quit", "/exit", "exit", "quit"})

# the variable holding each provider's key, for the hint after a 401
KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY",
                 "openai-chat": "OPENAI_API_KEY"}


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


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name in this environment (a container)
        return "cli-user"


def unauthorised_hint(exc: ModelError, spec: str, base_url: str | None) -> str | None:
    """What to do when the server answered 401: which variable holds the key."""
    status = getattr(exc.__cause__, "status_code", None)
    if status != 401 and "401" not in str(exc):
        return None
    variable = KEY_VARIABLES.get(spec.partition(":")[0])
    if variable is None:
        return None
    where = f"the server at {base_url}" if base_url else "the provider"
    if environment().get(variable):
        return f"{where} refused the key in ${variable}: check it"
    return f"{where} wants an API key: set {variable}"


class TerminalModel:
    """The model as the terminal shows it: a spinner while it thinks, its text as it streams,
    and a hint naming the key variable when the server refuses the request (401)."""

    def __init__(self, model: Model, printer: ChatPrinter, *, spec: str,
                 base_url: str | None) -> None:
        self._model = model
        self._printer = printer
        self._spec = spec
        self._base_url = base_url

    @property
    def name(self) -> str:
        return self._model.name

    async def respond(self, request: ModelRequest) -> Reply:
        from dataclasses import replace

        from rich.console import Console

        status = Console().status(f"{self._spec} is thinking…  (Ctrl-C cancels the turn)")
        status.start()
        spinning = True

        def on_text(delta: str) -> None:
            nonlocal spinning
            if spinning:
                status.stop()
                spinning = False
            self._printer.text(delta)

        try:
            return await self._model.respond(replace(request, on_text=on_text))
        except ModelError as exc:
            hint = unauthorised_hint(exc, self._spec, self._base_url)
            if hint is None:
                raise
            raise ModelError(f"{exc}\n  hint: {hint}", provider=exc.provider) from exc
        finally:
            if spinning:
                status.stop()


def load_tools(reference: str | None, workdir: str) -> ToolSource:
    """The tool source named ``module:attribute`` (a Toolbox, or a function returning one),
    imported with the current folder on ``sys.path``; without a reference, the demo toolbox
    working in *workdir*.

    Raises:
        UserError: the reference cannot be imported or is not a tool source.
    """
    if reference is None:
        return demo_toolbox(workdir)
    try:
        found: Any = import_reference(reference)
    except UserError as exc:
        raise UserError(f"--tools {exc}") from None
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
              help="The tools to offer (a Toolbox or a function returning one), importable "
                   "from the current folder. Default: the demo toolbox.")
@click.option("--base-url", default=None,
              help="Endpoint of a compatible server, e.g. http://127.0.0.1:8080/v1 (its key: "
                   "$OPENAI_API_KEY or $ANTHROPIC_API_KEY).")
@click.option("--instructions", default=None, help="The system prompt.")
@policy_option
@click.option("--principal", "principal_id", default=None,
              help="Who the session acts for (roles and scopes from the policy file's "
                   "[principals]; default: the login name).")
@store_option
@click.option("--max-turns", default=8, show_default=True, help="Model requests per prompt.")
@click.option("--note-unperformed/--no-note-unperformed", default=True, show_default=True,
              help="Add a one-line host note under an answer that claims an action (\"sent\", "
                   "\"done\") when a write of that turn did not succeed.")
def command(spec: str, tools_ref: str | None, base_url: str | None,
            instructions: str | None, policy_path: str | None, principal_id: str | None,
            store_url: str | None, max_turns: int, note_unperformed: bool) -> None:
    """Chat with a model through the host; every tool call passes the gate.

    Reads one prompt per line until end of input or /quit. A spinner runs while the model
    thinks, text streams as it arrives, write tools ask for approval on the terminal, and
    Ctrl-C during a turn cancels that turn.
    """
    policy = load_policy_option(policy_path)
    url = resolve_url(store_url)
    who = principal_id or _login_name()
    with tempfile.TemporaryDirectory(prefix="anfitrion-chat-") as workdir:
        try:
            model = resolve_model(spec, base_url=base_url)
            tools = load_tools(tools_ref, workdir)
        except UserError as exc:
            raise click.ClickException(str(exc)) from None
        printer = ChatPrinter()
        host = Host(model=TerminalModel(model, printer, spec=spec, base_url=base_url),
                    tools=tools, store=url, policy=policy, approver=TerminalApprover(),
                    instructions=instructions, max_turns=max_turns, listeners=[printer])
        where = f"policy {policy.source or 'built-in default'}, store {shown_store(url)}"
        try:
            anyio.run(_chat, host, f"chatting with {spec} as {who} ({where})",
                      policy.principal(who), printer, note_unperformed)
        except KeyboardInterrupt:  # Ctrl-C between turns: leave quietly, as /quit does
            click.echo()


def _read_prompt() -> str | None:
    """One line from the terminal; ``None`` at end of input or on Ctrl-C.

    asyncio's runner turns Ctrl-C into a cancellation that a blocked ``input()`` never sees;
    Python's default handler is put back while we wait, so Ctrl-C ends the prompt.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
    try:
        return input("you> ")
    except (EOFError, KeyboardInterrupt):
        return None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


async def cancellable(work: Callable[[], Awaitable[T]]) -> T | None:
    """Run *work*; Ctrl-C cancels it (``None``) instead of ending the program."""
    if threading.current_thread() is not threading.main_thread():
        return await work()
    loop = asyncio.get_running_loop()
    with anyio.CancelScope() as scope:
        previous = signal.signal(signal.SIGINT,
                                 lambda *_: loop.call_soon_threadsafe(scope.cancel))
        try:
            return await work()
        finally:
            signal.signal(signal.SIGINT, previous)
    return None


async def _chat(host: Host, banner: str, principal: Principal,
                printer: ChatPrinter, note_unperformed: bool = True) -> None:
    click.echo(f"{banner} — /quit to leave")
    session_id: str | None = None
    while True:
        prompt = _read_prompt()
        if prompt is None or prompt.strip() in EXIT_WORDS:
            click.echo()
            return
        if not prompt.strip():
            continue
        printer.streamed.clear()
        try:
            run: RunResult | None = await cancellable(functools.partial(
                host.run, prompt, principal=principal, session_id=session_id))
        except UserError as exc:  # e.g. the last turn was cancelled while a write ran
            click.echo(click.style(f"[{exc}; starting a new session]", fg="yellow"))
            session_id = None
            continue
        printer.end_line()
        if run is None:
            click.echo(click.style("[turn cancelled]", fg="yellow"))
            continue
        session_id = run.session_id
        if run.status is RunStatus.COMPLETED:
            if not printer.streamed:
                click.echo(run.output)
        else:
            detail = f": {run.error}" if run.error else ""
            click.echo(click.style(f"[{run.status.value}{detail}]", fg="yellow"))
        note = unperformed_note(run.output, run.calls) if note_unperformed else None
        if note:
            click.echo(click.style(note, fg="yellow", bold=True))
        if run.report():
            click.echo(click.style(run.report(), dim=True))
