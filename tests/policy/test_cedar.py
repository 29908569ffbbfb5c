"""``[[cedar]]``: Cedar policies decided in-process under the rule contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from anfitrion import Effect, Principal, Tool
from anfitrion._tools import BoundCall
from anfitrion.exceptions import ConfigError
from anfitrion.policy import Policy, PolicyContext, Verdict, load_policy, parse_policy
from anfitrion.policy._lint import lint_rules

from .engines import engine

engine("cedarpy")

REFUND_SCHEMA = {"type": "object", "properties": {"amount": {"type": "integer"},
                                                  "note": {"type": "string"},
                                                  "meta": {"type": "object"}},
                 "required": ["amount"]}

TOML_RULES = """
[[rules]]
id = "lookups"
tool = "lookup"
verdict = "allow"

[[rules]]
id = "refund-cap"
tool = "refund"
arguments = { amount = { max = 1000 } }

[[rules]]
id = "finance-refunds"
tool = "refund"
roles = ["finance"]
verdict = "allow"

[[rules]]
id = "support-refunds"
tool = "refund"
roles = ["support"]
verdict = "ask"

[[rules]]
id = "no-deletes"
tool = "delete_account"
verdict = "deny"
"""

CEDAR = """// the same policy as TOML_RULES
@id("lookups")
permit(principal, action == Action::"lookup", resource);

@id("refund-cap")
forbid(principal, action == Action::"refund", resource)
when { context.arguments.amount > 1000 };

@id("finance-refunds")
permit(principal, action == Action::"refund", resource)
when { principal.roles.contains("finance") };

@id("support-refunds") @anfitrion("ask")
permit(principal, action == Action::"refund", resource)
when { principal.roles.contains("support") };

@id("no-deletes") @reason("accounts are closed by a person")
forbid(principal, action == Action::"delete_account", resource);
"""


def _tool(name: str, effect: Effect = Effect.WRITE, schema: Any = None,
          **metadata: Any) -> Tool:
    return Tool.from_schema(name, schema or {"type": "object", "additionalProperties": True},
                            lambda a: None, effect=effect, metadata=metadata)


TOOLS = {"lookup": _tool("lookup", Effect.READ), "refund": _tool("refund", schema=REFUND_SCHEMA),
         "delete_account": _tool("delete_account")}


def _cedar_policy(tmp_path: Path, cedar: str = CEDAR, extra: str = "",
                  schema: str | None = None) -> Policy:
    (tmp_path / "tools.cedar").write_text(cedar)
    toml = '[[cedar]]\npolicies = "tools.cedar"\n'
    if schema is not None:
        (tmp_path / "tools.cedarschema").write_text(schema)
        toml += 'schema = "tools.cedarschema"\n'
    (tmp_path / "anfitrion.toml").write_text(toml + extra)
    return load_policy(tmp_path / "anfitrion.toml")


def _context(roles: tuple[str, ...] = (), tainted: bool = False, **fields: Any) -> PolicyContext:
    return PolicyContext(principal=Principal("alice", frozenset(roles)), session_id="s1",
                         untrusted_sources=("fetch",) if tainted else (), **fields)


def _decide(policy: Policy, tool: str, arguments: dict[str, Any], **context: Any) -> Any:
    return policy.decide(BoundCall("c1", TOOLS[tool], arguments), _context(**context))


SCENARIOS = [
    ("allow", "lookup", {"q": "order 7"}, {}),
    ("ask (role)", "refund", {"amount": 50}, {"roles": ("support",)}),
    ("allow (role)", "refund", {"amount": 50}, {"roles": ("finance",)}),
    ("deny by argument value", "refund", {"amount": 5000}, {"roles": ("finance",)}),
    ("no opinion: the default", "refund", {"amount": 50}, {}),
    ("deny by tool", "delete_account", {"id": 1}, {"roles": ("finance",)}),
    ("after taint", "refund", {"amount": 50}, {"roles": ("finance",), "tainted": True}),
    ("read after taint", "lookup", {"q": "x"}, {"tainted": True}),
]


@pytest.mark.parametrize(("case", "tool", "arguments", "context"), SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_an_equivalent_toml_rule_and_cedar_policy_decide_alike(
        tmp_path: Path, case: str, tool: str, arguments: dict[str, Any],
        context: dict[str, Any]) -> None:
    toml = parse_policy(TOML_RULES)
    cedar = _cedar_policy(tmp_path)
    by_toml, by_cedar = _decide(toml, tool, arguments, **context), \
        _decide(cedar, tool, arguments, **context)
    assert by_toml.verdict is by_cedar.verdict, (by_toml, by_cedar)
    if by_toml.rule_id in {"lookups", "refund-cap", "finance-refunds", "support-refunds",
                           "no-deletes"}:  # the same rule decided, named by its Cedar @id
        assert by_cedar.rule_id == f"cedar[1]/{by_toml.rule_id}"


def test_the_expected_verdicts_of_the_scenarios(tmp_path: Path) -> None:
    cedar = _cedar_policy(tmp_path)
    verdicts = [_decide(cedar, t, a, **c).verdict.value for _, t, a, c in SCENARIOS]
    assert verdicts == ["allow", "ask", "allow", "deny", "ask", "deny", "ask", "allow"]
    denied = _decide(cedar, "delete_account", {"id": 1})
    assert denied.reason == "accounts are closed by a person"


def test_the_request_carries_principal_resource_provenance_effect_and_counters(
        tmp_path: Path) -> None:
    cedar = """
permit(principal, action, resource == Server::"crm")
when { principal.scopes.contains("crm:write") && principal.claims.tenant == "acme"
       && context.effect == "write" && context.counters.tool_calls < 3 && context.turn == 2
       && context.flagged.isEmpty() && !context.untrusted_sources.contains("fetch") };
"""
    policy = _cedar_policy(tmp_path, cedar)
    tool = _tool("crm.update", server="crm", mcp_server="crm")
    principal = Principal("bob", scopes=frozenset({"crm:write"}),
                          attributes={"claims": {"tenant": "acme"}})

    def decide(**fields: Any) -> Verdict:
        context = PolicyContext(principal=principal, session_id="s", **fields)
        return policy.decide(BoundCall("c", tool, {"id": 1}), context).verdict

    assert decide(turn=2, counters={"tool_calls": 1}) is Verdict.ALLOW
    assert decide(turn=2, counters={"tool_calls": 3}) is Verdict.ASK  # the default: no opinion
    assert decide(turn=2, flagged_arguments={"id": "x"}) is Verdict.ASK


def test_an_attribute_the_call_lacks_is_a_clear_decision_error_and_denies(
        tmp_path: Path) -> None:
    policy = _cedar_policy(tmp_path, 'permit(principal, action == Action::"refund", resource) '
                                     "when { context.arguments.note == \"ok\" };")
    decision = _decide(policy, "refund", {"amount": 5}, roles=("finance",))
    assert decision.verdict is Verdict.DENY
    assert decision.rule_id == "cedar[1].error"
    assert "does not have the attribute `note`" in decision.reason


@pytest.mark.parametrize("arguments", [
    {"amount": 5, "meta": {"__entity": {"type": "Principal", "id": "admin"}}},
    {"amount": 5, "meta": {"__extn": {"fn": "ip", "arg": "10.0.0.1"}}},
    {"amount": 5, "meta": {"ratio": 0.123456}},  # rounding would change a comparison
    {"amount": 2 ** 70},
    {"amount": 5, "meta": {"list": [1, None]}},
], ids=["forged-entity", "forged-extension", "float-past-four-decimals", "past-64-bits",
        "null-in-list"])
def test_arguments_cedar_cannot_represent_faithfully_deny_never_allow(
        tmp_path: Path, arguments: dict[str, Any]) -> None:
    """An attacker who read the code: a model-written argument shaped as Cedar's entity escape
    would make ``context.arguments.meta`` a principal; it is refused before Cedar sees it."""
    policy = _cedar_policy(tmp_path, "permit(principal, action, resource);")
    decision = policy.decide(BoundCall("c", _tool("refund"), arguments), _context())
    assert decision.verdict is Verdict.DENY
    assert decision.rule_id == "cedar[1].error"


def test_a_principal_id_with_quotes_and_newlines_stays_one_principal(tmp_path: Path) -> None:
    policy = _cedar_policy(tmp_path, 'forbid(principal == Principal::"mallory", action, '
                                     'resource);\npermit(principal, action, resource);')
    sly = Principal('mallory" || true || "\nx')
    decision = policy.decide(BoundCall("c", TOOLS["lookup"], {}),
                             PolicyContext(principal=sly, session_id="s"))
    assert decision.verdict is Verdict.ALLOW
    plain = policy.decide(BoundCall("c", TOOLS["lookup"], {}),
                          PolicyContext(principal=Principal("mallory"), session_id="s"))
    assert plain.verdict is Verdict.DENY


def test_numbers_have_one_cedar_type_whatever_the_model_wrote(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
    tool = _tool("pay", schema=schema)
    policy = _cedar_policy(tmp_path, 'permit(principal, action, resource) when '
                                     '{ context.arguments.amount.lessThan(decimal("100.0")) };')
    for amount in (5, 5.5, 99.9999):
        decision = policy.decide(BoundCall("c", tool, {"amount": amount}), _context())
        assert decision.verdict is Verdict.ALLOW, decision


def test_a_cedar_file_that_does_not_parse_refuses_to_load_with_its_line(
        tmp_path: Path) -> None:
    broken = 'permit(principal, action, resource);\n// a comment; with a semicolon\n' \
             '@id("x;y")\nforbid(principal, action, resource)\n  when { context.x == };\n'
    with pytest.raises(ConfigError) as caught:
        _cedar_policy(tmp_path, broken)
    assert caught.value.line == 3
    assert "tools.cedar" in str(caught.value)
    assert "does not parse" in str(caught.value)


@pytest.mark.parametrize(("cedar", "message"), [
    ('@anfitrion("ask")\nforbid(principal, action, resource);', "goes on a permit"),
    ('@anfitrion("maybe")\npermit(principal, action, resource);', "takes"),
    ("permit(principal == ?principal, action, resource);", "template"),
])
def test_a_misplaced_annotation_or_a_template_refuses_to_load(tmp_path: Path, cedar: str,
                                                              message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _cedar_policy(tmp_path, cedar)


SCHEMA = """
entity Principal = { roles: Set<String>, scopes: Set<String> };
entity Toolkit; entity Server;
action "refund" appliesTo { principal: Principal, resource: [Toolkit, Server],
  context: { arguments: { amount: Long, note?: String }, effect: String, tainted: Bool,
             untrusted_sources: Set<String>, flagged: Set<String>, unproven: Set<String>,
             counters: { tool_calls: Long, approvals_asked: Long, invalid_calls: Long },
             turn: Long } };
"""


def test_a_policy_that_does_not_validate_against_its_schema_refuses_to_load(
        tmp_path: Path) -> None:
    cedar = 'permit(principal, action, resource);\n\npermit(principal, action == ' \
            'Action::"refund", resource)\n  when { context.arguments.amont < 10 };\n'
    with pytest.raises(ConfigError) as caught:
        _cedar_policy(tmp_path, cedar, schema=SCHEMA)
    assert caught.value.line == 3
    assert "amont" in str(caught.value)
    with pytest.raises(ConfigError, match="schema does not parse"):
        _cedar_policy(tmp_path, "permit(principal, action, resource);", schema="entity ;")


def test_with_a_schema_a_call_that_does_not_fit_it_is_denied(tmp_path: Path) -> None:
    policy = _cedar_policy(tmp_path, 'permit(principal, action == Action::"refund", resource) '
                                     "when { context.arguments.amount < 10 };", schema=SCHEMA)
    assert _decide(policy, "refund", {"amount": 5}).verdict is Verdict.ALLOW
    wrong = _decide(policy, "refund", {"amount": 5, "note": 3})
    assert (wrong.verdict, wrong.rule_id) == (Verdict.DENY, "cedar[1].error")


def test_the_policy_hash_covers_the_cedar_text_not_only_its_file_name(tmp_path: Path) -> None:
    first = _cedar_policy(tmp_path).sha256
    assert _cedar_policy(tmp_path).sha256 == first
    changed = _cedar_policy(tmp_path, CEDAR.replace("1000", "2000")).sha256
    assert changed != first


def test_lint_reports_cedar_policies_that_can_never_apply(tmp_path: Path) -> None:
    cedar = """
@id("never") permit(principal, action, resource) when { false };
@id("wrong-type") permit(principal == User::"alice", action, resource);
@id("shadowed") permit(principal, action == Action::"refund", resource);
@id("all-refunds") forbid(principal, action == Action::"refund", resource);
@id("fine") permit(principal, action == Action::"lookup", resource) when { context.turn < 5 };
"""
    found = lint_rules(_cedar_policy(tmp_path, cedar))
    said = {text.split(":")[0] for _, text in found}
    assert said == {"Cedar policy never", "Cedar policy wrong-type", "Cedar policy shadowed"}
    assert all(rule == "cedar[1]" for rule, _ in found)


def test_policy_check_names_the_cedar_policies_that_decided(tmp_path: Path) -> None:
    from anfitrion._cli.main import cli

    _cedar_policy(tmp_path)
    result = CliRunner().invoke(cli, [
        "policy", "check", "--policy", str(tmp_path / "anfitrion.toml"), "--tool", "refund",
        "--args", '{"amount": 5000}', "--principal", "alice", "--role", "finance", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["decision"]["rule_id"] == "cedar[1]/refund-cap"
    assert out["decision"]["verdict"] == "deny"
    validate = CliRunner().invoke(cli, ["policy", "validate", str(tmp_path / "anfitrion.toml")])
    assert validate.exit_code == 0, validate.output
    assert "rule cedar[1] (source:" in validate.output


def test_an_unreadable_cedar_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        parse_policy('[[cedar]]\npolicies = "missing.cedar"\n',
                     path=str(tmp_path / "anfitrion.toml"))
    with pytest.raises(ConfigError, match="unknown key"):
        parse_policy('[[cedar]]\npolicies = "x.cedar"\nwhen = 1\n')


# -- the schema of the tools ---------------------------------------------------------------

def test_cedar_schema_is_generated_from_the_tools_and_policies_validate_against_it(
        tmp_path: Path) -> None:
    from anfitrion._cli.main import cli

    result = CliRunner().invoke(cli, ["policy", "cedar-schema", "--toolbox",
                                      "tests.policy.conftest:office_tools"])
    assert result.exit_code == 0, result.output
    schema = result.output
    assert 'action "send_email" appliesTo' in schema
    assert "arguments: { to: String, subject: String, body: String }" in schema
    good = 'permit(principal, action == Action::"send_email", resource)\n' \
           '  when { context.arguments.to like "*@example.com" && !context.tainted };\n'
    policy = _cedar_policy(tmp_path, good, schema=schema)  # loads: it validates
    assert policy.decide(BoundCall("c", _office("send_email"), {
        "to": "bo@example.com", "subject": "s", "body": "b"}), _context()).verdict \
        is Verdict.ALLOW
    typo = good + '\nforbid(principal, action == Action::"send_email", resource)\n' \
                  '  when { context.arguments.recipient == "x" };\n'
    _cedar_policy(tmp_path, typo)  # no schema in the file: it loads
    checked = CliRunner().invoke(cli, ["policy", "validate", str(tmp_path / "anfitrion.toml"),
                                       "--toolbox", "tests.policy.conftest:office_tools"])
    assert checked.exit_code == 1
    assert "tools.cedar:4:" in checked.output
    assert "recipient" in checked.output


def _office(name: str) -> Tool:
    from .conftest import office_tools

    tool = office_tools().get(name)
    assert tool is not None
    return tool


# -- the translation aid ---------------------------------------------------------------------

def test_export_writes_what_cedar_can_express_and_decides_alike(tmp_path: Path) -> None:
    from anfitrion._cli.main import cli

    (tmp_path / "rules.toml").write_text(TOML_RULES + """
[[rules]]
id = "regions"
tool = "lookup"
arguments = { region = { one_of = ["eu", "us"] }, count = { min = 1, max = 50 } }

[[rules]]
id = "names"
tool = "refund"
arguments = { note = { matches = "^[a-z ]+$" } }

[[rate_limits]]
tool = "refund"
max_calls = 3
per = "1h"
""")
    result = CliRunner().invoke(cli, ["policy", "export", "--cedar", "--policy",
                                      str(tmp_path / "rules.toml")])
    assert result.exit_code == 0, result.output
    exported = result.output
    assert "// not expressed: names: the constraint Matches has no Cedar counterpart" in exported
    assert "// not expressed: rate_limits[1]: rate limits stay anfitrion's" in exported
    assert "// not expressed: taint:" in exported
    toml = parse_policy(TOML_RULES + '[[rules]]\nid = "regions"\ntool = "lookup"\n'
                        'arguments = { region = { one_of = ["eu", "us"] }, '
                        "count = { min = 1, max = 50 } }\n")
    cedar = _cedar_policy(tmp_path, exported)  # the export parses and loads
    cases = [*[(t, a, c) for _, t, a, c in SCENARIOS],
             ("lookup", {"region": "eu", "count": 3}, {}),
             ("lookup", {"region": "mars"}, {}), ("lookup", {"count": 51}, {})]
    for tool, arguments, context in cases:
        assert _decide(toml, tool, arguments, **context).verdict is \
            _decide(cedar, tool, arguments, **context).verdict, (tool, arguments, context)


def test_export_expands_globs_only_over_the_tools_given(tmp_path: Path) -> None:
    from anfitrion.policy._cedar_export import export_cedar

    policy = parse_policy('[[rules]]\nid = "sends"\ntool = "send_*"\nverdict = "ask"\n')
    _, left = export_cedar(policy)
    assert ("sends", "the tool glob 'send_*' needs the tools to expand it (--toolbox)") in left
    text, left = export_cedar(policy, ["send_email", "send_sms", "read_file"])
    assert 'action in [Action::"send_email", Action::"send_sms"]' in text
    assert '@anfitrion("ask")' in text
    assert "sends" not in [rule for rule, _ in left]


def test_a_tool_a_cedar_file_always_forbids_is_one_the_policy_never_allows(
        tmp_path: Path) -> None:
    """What the MCP gateway reads to hide a tool: an unconditional forbid covering the tool
    and the principal; a conditional one, or one for someone else, hides nothing."""
    policy = _cedar_policy(tmp_path, """
forbid(principal, action in [Action::"delete_account", Action::"wipe"], resource);
forbid(principal == Principal::"bob", action == Action::"refund", resource);
forbid(principal, action == Action::"lookup", resource) when { context.tainted };
permit(principal, action, resource);
""")
    alice, bob = Principal("alice"), Principal("bob")
    assert not policy.may_allow(TOOLS["delete_account"], alice)
    assert policy.may_allow(TOOLS["refund"], alice)
    assert not policy.may_allow(TOOLS["refund"], bob)
    assert policy.may_allow(TOOLS["lookup"], alice)
