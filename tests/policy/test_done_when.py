"""The issue's "Done when", driven through the host with examples/anfitrion.toml.

Reads are free; write_draft only inside drafts/; send_email only to @example.com, at most 5
an hour, always with a person's yes; nothing else.
"""

from __future__ import annotations

from pathlib import Path

from anfitrion import CallbackApprover, Host
from anfitrion._approvals import ApprovalRequest
from anfitrion.policy import load_policy
from anfitrion.testing import MemoryStore, ScriptedModel, call

from .conftest import FakeClock, office_tools

EXAMPLE = Path(__file__).parents[2] / "examples" / "anfitrion.toml"


def _mail(to: str, n: int = 0) -> object:
    return call("send_email", {"to": to, "subject": f"n{n}", "body": "hello"})


def test_the_example_policy_enforces_the_done_when_sentence(clock: FakeClock) -> None:
    policy = load_policy(EXAMPLE).with_clock(clock)
    asked: list[ApprovalRequest] = []
    sent: list[dict[str, str]] = []

    def person(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    steps = [
        call("read_file", {"path": "/etc/hostname"}),                   # reads are free
        call("write_draft", {"path": "drafts/q3.md", "text": "…"}),      # inside drafts/
        call("write_draft", {"path": "drafts/../notes.md", "text": "…"}),  # escapes
        call("write_draft", {"path": "drafts2/x.md", "text": "…"}),      # prefix confusion
        _mail("ana@example.com"),                                       # asks, then sends
        _mail("eve@evil.com"),                                          # other domain
        _mail("ana@exаmple.com"),                                       # look-alike domain
        call("delete_file", {"path": "x"}),                             # nothing else
        "done",
    ]
    host = Host(model=ScriptedModel([steps[:-1], steps[-1]]),  # one reply with every call
                tools=office_tools(sent), policy=policy, approver=CallbackApprover(person))
    run = host.run_sync("work", principal=policy.principal("alice"))
    outcome = [(c.tool, c.stage, c.verdict) for c in run.calls]
    assert outcome == [
        ("read_file", "execute", "allow"),
        ("write_draft", "execute", "allow"),
        ("write_draft", "decide", "deny"),
        ("write_draft", "decide", "deny"),
        ("send_email", "execute", "ask"),
        ("send_email", "decide", "deny"),
        ("send_email", "decide", "deny"),
        ("delete_file", "decide", "deny"),
    ]
    assert [r.tool_name for r in asked] == ["send_email"]
    assert sent == [{"to": "ana@example.com", "subject": "n0", "body": "hello"}]
    contents = [p.content for p in run.transcript[-2].parts]
    assert contents[2] == "denied by policy: drafts can only be written inside drafts/"
    assert contents[5] == "denied by policy: send_email may only write to addresses at " \
                          "example.com"
    assert contents[7] == "denied by policy: write tools are not allowed"


def test_the_example_policy_allows_five_mails_an_hour_each_with_a_yes(clock: FakeClock) -> None:
    policy = load_policy(EXAMPLE).with_clock(clock)
    store = MemoryStore()
    sent: list[dict[str, str]] = []
    answers: list[bool] = []

    def person(request: ApprovalRequest) -> bool:
        answers.append(True)
        return True

    def run(n: int) -> None:
        steps = [[_mail("ana@example.com", i) for i in range(n)], "done"]
        Host(model=ScriptedModel(steps), tools=office_tools(sent), policy=policy, store=store,
             approver=CallbackApprover(person)).run_sync("mail", principal="alice")

    run(3)
    clock.advance(minutes=10)
    run(3)  # the sixth in the hour is denied before anyone is asked
    assert len(sent) == 5
    assert len(answers) == 5
    clock.advance(minutes=51)
    run(1)
    assert len(sent) == 6


def test_without_a_person_no_mail_leaves(clock: FakeClock) -> None:
    policy = load_policy(EXAMPLE).with_clock(clock)
    sent: list[dict[str, str]] = []
    model = ScriptedModel([_mail("ana@example.com"), "done"])
    run = Host(model=model, tools=office_tools(sent), policy=policy).run_sync("mail")
    assert sent == []
    assert run.calls[0].stage == "approve"
