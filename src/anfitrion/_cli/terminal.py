"""The terminal approver: a rich prompt for the person at the keyboard (``anfitrion chat``,
``anfitrion demo``, the local model's demo), public as :class:`anfitrion.TerminalApprover`."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio.to_thread

from .._approvals import ApprovalAnswer, ApprovalRequest

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["TerminalApprover"]


class TerminalApprover:
    """Shows the request on the terminal (rich), page by page, and waits for y/n.

    Anything but ``y``/``yes`` denies; so do end of input and Ctrl-C. The whole description
    is shown before the question: long values are paged, never cut. Text is rendered as
    plain text (never as rich markup), after :func:`show_value` made hidden characters
    visible.

    While it waits, it holds the event loop's thread when that is the main thread: that is
    what lets Ctrl-C reach the prompt (and deny) instead of cancelling the whole run.

    Args:
        approver: the name recorded as who answered.
        console: where to render (a ``rich.console.Console``; default: one on stdout).
        prompt: reads one answer line (default :func:`input`).
        lines_per_page: lines shown before "Enter for more".
    """

    def __init__(self, *, approver: str = "terminal", console: Console | None = None,
                 prompt: Callable[[str], str] = input, lines_per_page: int = 40) -> None:
        self._approver = approver
        self._console = console
        self._prompt = prompt
        self._lines_per_page = lines_per_page

    def _interact(self, request: ApprovalRequest) -> tuple[bool, str]:
        from rich.console import Console
        from rich.panel import Panel
        from rich.text import Text

        console = self._console or Console()
        width = max(min(console.width - 4, 120), 40)
        pages = request.pages(self._lines_per_page, width)
        try:
            for number, page in enumerate(pages, 1):
                title = "approval needed" + (f" ({number}/{len(pages)})" if len(pages) > 1
                                             else "")
                console.print(Panel(Text(page), title=title, title_align="left"))
                if number < len(pages):
                    self._prompt("-- more: press Enter --")
            answer = self._prompt("Approve this exact call? [y/N] ")
        except KeyboardInterrupt:
            return False, "interrupted at the terminal (Ctrl-C)"
        except EOFError:
            return False, "no answer at the terminal (end of input)"
        approved = answer.strip().lower() in ("y", "yes")
        return approved, "" if approved else "declined at the terminal"

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer:
        if threading.current_thread() is threading.main_thread():
            # asyncio's runner turns the first Ctrl-C into a cancellation of the main task; put
            # Python's default handler back while we wait, so Ctrl-C interrupts the prompt.
            previous = signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                approved, note = self._interact(request)
            finally:
                signal.signal(signal.SIGINT, previous)
        else:
            approved, note = await anyio.to_thread.run_sync(self._interact, request)
        return ApprovalAnswer.to(request, approved, self._approver, note)
