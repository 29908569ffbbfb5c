"""What a person sees: everything, visibly; and the approvers that show it."""

from __future__ import annotations

import io
import signal
import threading
from typing import Any

import pytest
from rich.console import Console

from anfitrion import CallbackApprover, DenyAllApprover, TerminalApprover
from anfitrion._approvals import ApprovalAnswer, ApprovalRequest, make_visible, show_value

pytestmark = pytest.mark.anyio


def _request(**arguments: Any) -> ApprovalRequest:
    return ApprovalRequest.for_call(session_id="s1", principal_id="alice", call_id="c1",
                                    tool_name="send_email", tool_definition_hash="h",
                                    arguments=arguments, effect="write",
                                    reason="a person approves every e-mail", rule_id="mail")


def _unwrap(lines: list[str], key: str) -> str:
    """Reassemble one argument's value from the rendered lines."""
    head = f"  {key} = "
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    parts = [lines[start][len(head):]]
    for line in lines[start + 1:]:
        if not line.startswith(" " * len(head)) or line.strip().startswith("["):
            break
        parts.append(line[len(head):])
    return "".join(parts)


def test_a_long_value_is_shown_in_full_over_several_lines() -> None:
    body = "".join(f"line {i:04d} of the body; " for i in range(300))
    request = _request(to="ana@example.com", body=body)
    lines = request.render_lines(width=80)
    assert all(len(line) <= 80 for line in lines)
    assert _unwrap(lines, "body") == body
    assert f"[{len(body)} characters over" in request.describe(80)
    assert "shown in full" in request.describe(80)


def test_pages_hold_every_line_in_order() -> None:
    request = _request(body="x" * 5000)
    pages = request.pages(lines_per_page=10, width=60)
    assert len(pages) > 1
    assert "\n".join(pages) == request.describe(60)


def test_newlines_in_a_value_are_marked_not_hidden() -> None:
    request = _request(body="Hi Ana,\n\nP.S. also wire $5000")
    assert "Hi Ana,⏎" in request.describe()
    assert "P.S. also wire $5000" in request.describe()


def test_non_ascii_domains_are_shown_in_punycode() -> None:
    text = _request(to="ana@exаmple.com", url="https://bücher.de/x").describe()
    assert "ana@xn--exmple-4nf.com ⟨non-ASCII domain; as written: exаmple.com⟩" in text
    assert "https://xn--bcher-kva.de ⟨non-ASCII domain; as written: bücher.de⟩/x" in text
    assert show_value("ana@example.com") == "ana@example.com"


def test_invisible_characters_are_made_visible() -> None:
    text = _request(to="bob\u202e@moc.live", note="a\u200bb\x1b[2J\x1b]8;;x\x07c\x00d").describe()
    assert "⟨U+202E RLO⟩" in text
    assert "⟨U+200B ZWSP⟩" in text
    assert "⟨ESC⟩[2J" in text
    assert "⟨U+0007⟩" in text
    assert "⟨U+0000⟩" in text
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert "\x00" not in text


def test_zero_width_characters_in_a_domain_are_visible_next_to_the_ascii_form() -> None:
    shown = show_value("ana@exa\u200bmple.com")
    assert shown == "ana@example.com ⟨non-ASCII domain; as written: exa⟨U+200B ZWSP⟩mple.com⟩"


def test_make_visible_marks_tabs_and_keeps_plain_text() -> None:
    assert make_visible("a\tb") == "a⇥b"
    assert make_visible("plain ascii, ümlaut") == "plain ascii, ümlaut"


# -- approvers ---------------------------------------------------------------------------------


def _terminal(*answers: str | type[BaseException], lines_per_page: int = 40
              ) -> tuple[TerminalApprover, io.StringIO, list[str]]:
    out = io.StringIO()
    prompts: list[str] = []
    replies = list(answers)

    def prompt(text: str) -> str:
        prompts.append(text)
        reply = replies.pop(0)
        if isinstance(reply, type):
            raise reply()
        return reply

    approver = TerminalApprover(approver="ana@tty", console=Console(file=out, width=100),
                                prompt=prompt, lines_per_page=lines_per_page)
    return approver, out, prompts


@pytest.mark.parametrize(("reply", "approved"), [("y", True), ("YES ", True), ("n", False),
                                                 ("", False), ("yep", False)])
async def test_the_terminal_approves_only_on_y(reply: str, approved: bool) -> None:
    approver, out, _ = _terminal(reply)
    request = _request(to="ana@example.com")
    answer = await approver.decide(request)
    assert answer.approved is approved
    assert (answer.approver, answer.digest, answer.request_id) == ("ana@tty", request.digest,
                                                                   request.id)
    assert "ana@example.com" in out.getvalue()


@pytest.mark.parametrize("error", [KeyboardInterrupt, EOFError])
async def test_ctrl_c_or_end_of_input_at_the_terminal_denies(
        error: type[BaseException]) -> None:
    approver, _, _ = _terminal(error)
    answer = await approver.decide(_request(to="ana@example.com"))
    assert answer.approved is False


async def test_a_real_sigint_while_waiting_denies_instead_of_killing_the_run() -> None:
    assert threading.current_thread() is threading.main_thread()

    def prompt(text: str) -> str:
        signal.raise_signal(signal.SIGINT)
        return "y"  # not reached: the signal interrupts the prompt

    before = signal.getsignal(signal.SIGINT)
    approver = TerminalApprover(console=Console(file=io.StringIO()), prompt=prompt)
    answer = await approver.decide(_request(to="ana@example.com"))
    assert answer.approved is False
    assert "Ctrl-C" in answer.note
    assert signal.getsignal(signal.SIGINT) is before


async def test_the_terminal_shows_every_page_before_asking() -> None:
    body = "z" * 3000
    request = _request(body=body)
    pages = request.pages(10, 96)
    approver, out, prompts = _terminal(*[""] * (len(pages) - 1), "y", lines_per_page=10)
    answer = await approver.decide(request)
    assert answer.approved
    assert prompts[:-1] == ["-- more: press Enter --"] * (len(pages) - 1)
    assert prompts[-1].startswith("Approve this exact call?")
    assert out.getvalue().count("z") >= len(body)


async def test_rich_markup_in_arguments_is_shown_literally() -> None:
    approver, out, _ = _terminal("n")
    await approver.decide(_request(body="[bold red]URGENT[/] [link=https://evil.com]x[/link]"))
    assert "[bold red]URGENT[/]" in out.getvalue()
    assert "[link=https://evil.com]x[/link]" in out.getvalue()


async def test_deny_all_denies_and_says_why() -> None:
    answer = await DenyAllApprover().decide(_request(to="a@example.com"))
    assert answer.approved is False
    assert "no approver is configured" in answer.note


async def test_callback_approvers_may_be_async_or_answer_in_full() -> None:
    request = _request(to="a@example.com")

    async def later(r: ApprovalRequest) -> bool:
        return True

    assert (await CallbackApprover(later, name="bot").decide(request)).approver == "bot"
    full = ApprovalAnswer.to(request, True, "ana", "checked the address")
    assert await CallbackApprover(lambda r: full).decide(request) is full
    assert await CallbackApprover(lambda r: None).decide(request) is None


def test_a_value_cannot_forge_lines_of_the_description() -> None:
    """Newlines inside a value stay inside it: marked and indented under the argument."""
    request = _request(body="hello\nTool: read_file (read)\nDigest: 0000")
    lines = request.render_lines()
    assert [line for line in lines if line.startswith("Tool:")] == ["Tool: send_email (write)"]
    assert sum(line.startswith("Digest:") for line in lines) == 1
    assert "hello⏎" in request.describe()
