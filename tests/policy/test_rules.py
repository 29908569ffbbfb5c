"""Argument rules and the repeated-call guard."""

from __future__ import annotations

from typing import Any

import pytest

from anfitrion import Host, Principal, Tool
from anfitrion._tools import BoundCall
from anfitrion.policy import (
    ArgumentRule,
    EmailDomain,
    LengthRange,
    OneOf,
    PathInside,
    Policy,
    PolicyContext,
    RepeatGuard,
    ToolRule,
    Verdict,
)
from anfitrion.testing import ScriptedModel, call

from .conftest import office_tools


def _bound(arguments: dict[str, Any], name: str = "send_email") -> BoundCall:
    tool = Tool.from_schema(name, {"type": "object", "additionalProperties": True},
                            lambda a: "ok")
    return BoundCall("c1", tool, arguments)


CTX = PolicyContext(principal=Principal("alice"), session_id="s")


def test_an_argument_rule_gives_its_verdict_only_when_every_constraint_holds() -> None:
    rule = ArgumentRule("send_email", {"to": EmailDomain(["example.com"]),
                                       "subject": LengthRange(max_length=10)}, Verdict.ASK,
                        rule_id="mail")
    ok = rule(_bound({"to": "a@example.com", "subject": "hi"}), CTX)
    assert ok is not None
    assert ok.verdict is Verdict.ASK
    bad = rule(_bound({"to": "a@evil.com", "subject": "hi"}), CTX)
    assert bad is not None
    assert bad.verdict is Verdict.DENY
    assert bad.reason == "argument 'to' is not at an allowed domain (allowed: example.com)"
    long = rule(_bound({"to": "a@example.com", "subject": "x" * 11}), CTX)
    assert long is not None
    assert long.verdict is Verdict.DENY
    assert rule(_bound({"to": "a@evil.com"}, name="post_message"), CTX) is None


def test_an_argument_rule_without_verdict_only_denies() -> None:
    rule = ArgumentRule("*", {"path": PathInside("drafts")})
    assert rule(_bound({"path": "drafts/a"}), CTX) is None
    denied = rule(_bound({"path": "../a"}), CTX)
    assert denied is not None
    assert denied.verdict is Verdict.DENY


def test_the_operators_violation_text_replaces_the_generated_one() -> None:
    rule = ArgumentRule("send_email", {"to": EmailDomain(["example.com"])}, Verdict.ASK,
                        reason="a person approves mail", violation="only example.com")
    denied = rule(_bound({"to": "a@evil.com"}), CTX)
    asked = rule(_bound({"to": "a@example.com"}), CTX)
    assert denied is not None
    assert denied.reason == "only example.com"
    assert asked is not None
    assert asked.reason == "a person approves mail"


def test_every_element_of_an_array_argument_is_checked() -> None:
    rule = ArgumentRule("send_email", {"to": EmailDomain(["example.com"])}, Verdict.ALLOW)
    ok = rule(_bound({"to": ["a@example.com", "b@example.com"]}), CTX)
    assert ok is not None
    assert ok.verdict is Verdict.ALLOW
    smuggled = rule(_bound({"to": ["a@example.com", "eve@evil.com"]}), CTX)
    assert smuggled is not None
    assert smuggled.verdict is Verdict.DENY
    nested = rule(_bound({"to": [["a@example.com"], ["eve@evil.com"]]}), CTX)
    assert nested is not None
    assert nested.verdict is Verdict.DENY


def test_dotted_paths_reach_into_objects_and_arrays_of_objects() -> None:
    rule = ArgumentRule("send_email", {"message.recipients.address":
                                       EmailDomain(["example.com"])}, Verdict.ALLOW)
    good = {"message": {"recipients": [{"address": "a@example.com"}]}}
    bad = {"message": {"recipients": [{"address": "a@example.com"}, {"address": "e@evil.com"}]}}
    scalar = {"message": "eve@evil.com"}
    verdicts = [rule(_bound(a), CTX) for a in (good, bad, scalar)]
    assert [v.verdict if v else None for v in verdicts] == [Verdict.ALLOW, Verdict.DENY,
                                                            Verdict.DENY]


def test_an_absent_argument_is_not_checked() -> None:
    rule = ArgumentRule("send_email", {"cc": EmailDomain(["example.com"])}, Verdict.ALLOW)
    found = rule(_bound({"to": "x"}), CTX)
    assert found is not None
    assert found.verdict is Verdict.ALLOW


def test_one_of_on_an_enum_like_argument() -> None:
    rule = ArgumentRule("set_priority", {"level": OneOf(["low", "normal"])})
    assert rule(_bound({"level": "normal"}, "set_priority"), CTX) is None
    assert rule(_bound({"level": "urgent"}, "set_priority"), CTX) is not None


def test_rules_reject_unusable_configuration() -> None:
    with pytest.raises(ValueError):
        ToolRule([], Verdict.ALLOW)
    with pytest.raises(ValueError):
        ArgumentRule("x", {"": EmailDomain(["example.com"])})
    with pytest.raises(ValueError):
        RepeatGuard(0)
    with pytest.raises(ValueError):
        RepeatGuard(21)


def test_the_same_call_proposed_again_and_again_is_denied_after_the_limit() -> None:
    """Spacing and key order do not make two proposals different."""
    raw = ['{"path": "a.txt"}', '{"path":"a.txt"}', '{ "path" : "a.txt" }', '{"path": "a.txt"}']
    model = ScriptedModel([*(call("read_file", raw=r) for r in raw), "gave up"])
    policy = Policy([RepeatGuard(3)])
    run = Host(model=model, tools=office_tools(), policy=policy).run_sync("read")
    assert [c.stage for c in run.calls] == ["execute", "execute", "execute", "decide"]
    assert run.calls[-1].rule_id == "repeat_guard"


def test_a_different_call_in_between_resets_the_repeat_guard() -> None:
    same = {"path": "a.txt"}
    model = ScriptedModel([call("read_file", same), call("read_file", same),
                           call("read_file", {"path": "b.txt"}), call("read_file", same),
                           call("read_file", same), "done"])
    run = Host(model=model, tools=office_tools(), policy=Policy([RepeatGuard(2)])).run_sync("r")
    assert all(c.stage == "execute" for c in run.calls)


def test_denied_proposals_count_towards_the_repeat_guard() -> None:
    """A model probing the gate with the same refused call is stopped before asking again."""
    args = {"path": "x"}
    model = ScriptedModel([call("delete_file", args), call("delete_file", args),
                           call("delete_file", args), "ok"])
    run = Host(model=model, tools=office_tools(), policy=Policy([RepeatGuard(2)])).run_sync("rm")
    assert [(c.stage, c.rule_id) for c in run.calls] == [
        ("approve", "default.write"), ("approve", "default.write"), ("decide", "repeat_guard")]


def test_a_tool_rule_answers_the_same_for_a_name_every_time_past_its_name_cache() -> None:
    """Glob results are remembered per tool name; names past the cap are matched afresh."""
    from anfitrion.policy import _rules as rules

    rule = ToolRule(["get_*", "list_?"], Verdict.ALLOW)
    names = [f"get_{i}" for i in range(rules._NAMES_CACHED + 5)] + ["list_x", "send_mail",
                                                                     "list_xy", "Get_1"]
    for _ in range(2):
        verdicts = {n: rule(_bound({}, n), CTX) is not None for n in names}
        assert all(verdicts[f"get_{i}"] for i in range(rules._NAMES_CACHED + 5))
        assert verdicts["list_x"]
        assert not verdicts["send_mail"]
        assert not verdicts["list_xy"]
        assert not verdicts["Get_1"]  # case-sensitive
