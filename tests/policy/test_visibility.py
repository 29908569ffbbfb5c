"""Policy.may_allow: which tools a principal could ever get past the policy (gateway listing)."""

from __future__ import annotations

from anfitrion import Effect, Principal, Tool
from anfitrion.policy import Decision, Policy, parse_policy


def tool(name: str, effect: Effect = Effect.WRITE, scopes: frozenset[str] = frozenset()) -> Tool:
    return Tool.from_schema(name, {"type": "object"}, lambda a: a, effect=effect, scopes=scopes)


ALICE = Principal("alice", roles=frozenset({"ops"}))


def test_the_default_policy_may_allow_every_tool_the_principal_has_scopes_for() -> None:
    policy = Policy.default()
    assert policy.may_allow(tool("send"), ALICE)
    assert policy.may_allow(tool("read", Effect.READ), ALICE)
    assert not policy.may_allow(tool("admin", scopes=frozenset({"admin"})), ALICE)


def test_a_deny_rule_or_an_unlifted_default_deny_hides_a_tool() -> None:
    policy = parse_policy('[defaults]\nread = "allow"\nwrite = "deny"\n'
                          '[[rules]]\ntool = "write_draft"\nverdict = "allow"\n'
                          '[rules.arguments.path]\npath_inside = "drafts"\n'
                          '[[rules]]\ntool = "get_secret*"\nverdict = "deny"\n'
                          '[[rate_limits]]\ntool = "send_email"\nmax_calls = 5\nper = "1h"\n')
    assert policy.may_allow(tool("write_draft"), ALICE)  # allowed under conditions
    assert not policy.may_allow(tool("send_email"), ALICE)  # default deny, a limit lifts nothing
    assert not policy.may_allow(tool("get_secret_key", Effect.READ), ALICE)
    assert policy.may_allow(tool("get_weather", Effect.READ), ALICE)


def test_role_bound_rules_apply_only_to_their_roles() -> None:
    policy = parse_policy('[defaults]\nwrite = "deny"\n'
                          '[[rules]]\ntool = "deploy"\nverdict = "ask"\nroles = ["ops"]\n')
    assert policy.may_allow(tool("deploy"), ALICE)
    assert not policy.may_allow(tool("deploy"), Principal("bob"))


def test_an_operator_callable_counts_as_could_allow() -> None:
    def maybe(call: object, context: object) -> Decision | None:
        return None

    policy = parse_policy('[defaults]\nwrite = "deny"\n').with_rules(maybe)
    assert policy.may_allow(tool("anything"), ALICE)
