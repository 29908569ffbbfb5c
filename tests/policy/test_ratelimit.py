"""Rate limits over time windows, with an injected clock (no sleeps)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from anfitrion import Host, Principal, Tool
from anfitrion._tools import BoundCall
from anfitrion.policy import (
    Policy,
    PolicyContext,
    RateKey,
    RateLimit,
    ToolRule,
    Verdict,
    parse_duration,
)
from anfitrion.testing import MemoryStore, ScriptedModel, call

from .conftest import FakeClock, office_tools


def _mail(n: int, to: str = "a@example.com") -> list[object]:
    return [*(call("send_email", {"to": to, "subject": f"#{i}", "body": "b"})
              for i in range(n)), "done"]


def _host(policy: Policy, store: MemoryStore, sent: list[dict[str, str]],
          steps: list[object]) -> Host:
    return Host(model=ScriptedModel(steps), tools=office_tools(sent), policy=policy,
                store=store, max_turns=20)


def test_at_most_five_an_hour_per_principal_then_free_again_after_the_window(
        clock: FakeClock) -> None:
    policy = Policy([ToolRule("send_email", Verdict.ALLOW),
                     RateLimit("send_email", max_calls=5, per="1h")], clock=clock)
    store, sent = MemoryStore(), []
    run = _host(policy, store, sent, _mail(6)).run_sync("mail", principal="alice")
    assert len(sent) == 5
    assert [c.stage for c in run.calls] == ["execute"] * 5 + ["decide"]
    assert run.transcript[-2].parts[0].content == \
        "denied by policy: at most 5 send_email calls per hour; try again later"

    clock.advance(minutes=59)
    _host(policy, store, sent, _mail(1)).run_sync("mail", principal="alice")
    assert len(sent) == 5  # still inside the hour
    clock.advance(minutes=1, seconds=1)
    _host(policy, store, sent, _mail(1)).run_sync("mail", principal="alice")
    assert len(sent) == 6


def test_the_window_slides_rather_than_resetting_on_the_hour(clock: FakeClock) -> None:
    policy = Policy([ToolRule("send_email", Verdict.ALLOW),
                     RateLimit("send_email", max_calls=2, per="1h")], clock=clock)
    store, sent = MemoryStore(), []
    _host(policy, store, sent, _mail(1)).run_sync("m", principal="alice")  # 09:00
    clock.advance(minutes=40)
    _host(policy, store, sent, _mail(1)).run_sync("m", principal="alice")  # 09:40
    clock.advance(minutes=30)
    _host(policy, store, sent, _mail(1)).run_sync("m", principal="alice")  # 10:10: 09:00 left
    clock.advance(minutes=1)
    _host(policy, store, sent, _mail(1)).run_sync("m", principal="alice")  # 10:11: two in hour
    assert len(sent) == 3


def test_each_principal_has_its_own_count(clock: FakeClock) -> None:
    policy = Policy([ToolRule("send_email", Verdict.ALLOW),
                     RateLimit("send_email", max_calls=1, per="1h")], clock=clock)
    store, sent = MemoryStore(), []
    _host(policy, store, sent, _mail(2)).run_sync("m", principal="alice")
    _host(policy, store, sent, _mail(2)).run_sync("m", principal="bob")
    assert len(sent) == 2


def test_each_tool_is_counted_on_its_own_unless_the_limit_is_combined(clock: FakeClock) -> None:
    steps = [call("write_draft", {"path": "a", "text": "t"}),
             call("send_email", {"to": "a@x.com", "subject": "s", "body": "b"}),
             call("write_draft", {"path": "b", "text": "t"}), "done"]
    allow = ToolRule("*", Verdict.ALLOW)
    per_tool = Policy([allow, RateLimit(["write_draft", "send_email"], max_calls=1,
                                        per=60)], clock=clock)
    run = _host(per_tool, MemoryStore(), [], list(steps)).run_sync("go")
    assert [c.stage for c in run.calls] == ["execute", "execute", "decide"]

    combined = Policy([allow, RateLimit(["write_draft", "send_email"], max_calls=2, per=60,
                                        combined=True)], clock=clock)
    run = _host(combined, MemoryStore(), [], list(steps)).run_sync("go")
    assert [c.stage for c in run.calls] == ["execute", "execute", "decide"]
    assert run.calls[-1].reason == "at most 2 tool calls per minute; try again later"


def test_a_combined_limit_over_some_tools_ignores_the_others(clock: FakeClock) -> None:
    policy = Policy([ToolRule("*", Verdict.ALLOW),
                     RateLimit("send_*", max_calls=1, per=60, combined=True)], clock=clock)
    steps = [call("read_file", {"path": "a"}), call("read_file", {"path": "b"}),
             call("send_email", {"to": "a@x.com", "subject": "s", "body": "b"}), "done"]
    run = _host(policy, MemoryStore(), [], steps).run_sync("go")
    assert all(c.stage == "execute" for c in run.calls)


def test_denied_calls_do_not_use_up_the_limit(clock: FakeClock) -> None:
    policy = Policy([ToolRule("send_email", Verdict.DENY, reason="off"),
                     RateLimit("send_email", max_calls=1, per="1h")], clock=clock)
    store = MemoryStore()
    _host(policy, store, [], _mail(3)).run_sync("m", principal="alice")
    policy2 = Policy([ToolRule("send_email", Verdict.ALLOW),
                      RateLimit("send_email", max_calls=1, per="1h")], clock=clock)
    sent: list[dict[str, str]] = []
    _host(policy2, store, sent, _mail(1)).run_sync("m", principal="alice")
    assert len(sent) == 1


def test_a_rate_limit_without_counts_fails_closed() -> None:
    tool = Tool.from_schema("send_email", {"type": "object"}, lambda a: "ok")
    limit = RateLimit("send_email", max_calls=5, per="1h")
    decision = limit(BoundCall("c", tool, {}), PolicyContext(Principal("a"), "s"))
    assert decision is not None
    assert decision.verdict is Verdict.DENY
    ok = limit(BoundCall("c", tool, {}), PolicyContext(Principal("a"), "s",
                                                       rate_counts={"send_email/3600s": 4}))
    assert ok is None


def test_the_policy_lists_the_counts_it_needs() -> None:
    policy = Policy([RateLimit("send_*", max_calls=5, per="1h"),
                     RateLimit("*", max_calls=100, per="1d", combined=True),
                     RateLimit("send_email", max_calls=9, per=3600)])
    assert set(policy.rate_keys("send_email")) == {RateKey("send_email", 3600),
                                                   RateKey("*", 86400)}
    assert policy.rate_keys("read_file") == (RateKey("*", 86400),)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("15m", 900), ("1h", 3600),
                                               ("2d", 172800), (90, 90), (0.5, 0.5)])
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["1w", "h", "-1h", "0s", 0, True, "1.5h", "", None])
def test_parse_duration_refuses_what_it_cannot_read(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)  # type: ignore[arg-type]
