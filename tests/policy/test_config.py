"""Loading anfitrion.toml: what it expresses, and errors that name file, line and key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from anfitrion import ConfigError, Effect, Principal, Tool
from anfitrion._tools import BoundCall
from anfitrion.policy import (
    ArgumentRule,
    PathInside,
    Policy,
    PolicyContext,
    RateLimit,
    RepeatGuard,
    ToolRule,
    Verdict,
    load_policy,
    parse_policy,
)
from anfitrion.policy._core import rule_id_of

EXAMPLE = Path(__file__).parents[2] / "examples" / "anfitrion.toml"


def _error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_policy(text, path="anfitrion.toml")
    return info.value


def test_the_example_file_loads_with_every_part() -> None:
    policy = load_policy(EXAMPLE)
    assert policy.defaults == {Effect.READ: Verdict.ALLOW, Effect.WRITE: Verdict.DENY}
    kinds = [type(r) for r in policy.rules[:-2]]
    assert kinds == [ArgumentRule, ArgumentRule, RateLimit, RepeatGuard]
    # taint containment and the secrets rule are on by default
    assert [rule_id_of(r) for r in policy.rules[-2:]] == ["taint", "secrets"]
    assert policy.principal("alice").scopes == frozenset({"mail:send"})
    assert policy.principal("nobody").scopes == frozenset()
    assert policy.approvals.ttl == timedelta(minutes=15)
    assert policy.budgets.tool_calls == 50
    assert policy.source == str(EXAMPLE)


def test_an_empty_file_is_the_default_policy() -> None:
    policy = parse_policy("")
    assert [rule_id_of(r) for r in policy.rules] == ["taint", "secrets"]
    assert [rule_id_of(r) for r in Policy.default().rules] == ["taint", "secrets"]
    assert policy.defaults[Effect.WRITE] is Verdict.ASK


def test_taint_containment_is_configured_in_its_own_table() -> None:
    assert [rule_id_of(r) for r in parse_policy("[taint]\nenabled = false\n").rules] == [
        "secrets"]
    policy = parse_policy('[taint]\nallowed_hosts = ["example.com"]\ndeny_flagged = true\n')
    assert [rule_id_of(r) for r in policy.rules] == ["taint", "secrets"]
    err = _error("[taint]\nenabled = 1\n")
    assert err.key == "taint.enabled"
    assert _error("[taint]\nbogus = true\n").key == "taint.bogus"


def test_how_reads_are_treated_after_taint_is_configured_and_checked() -> None:
    policy = parse_policy('[taint]\nreads = "all"\nfree_reads = ["clock.*"]\n')
    assert [rule_id_of(r) for r in policy.rules] == ["taint", "secrets"]
    tainted = PolicyContext(Principal("emma"), "s", untrusted_sources=("web.fetch",))

    def read(name: str) -> BoundCall:
        return BoundCall("c1", Tool.from_schema(name, {"type": "object"}, lambda a: "ok",
                                                effect=Effect.READ), {})

    assert policy.decide(read("files.list"), tainted).rule_id == "taint.read"
    assert policy.decide(read("clock.now"), tainted).verdict is Verdict.ALLOW
    err = _error('[taint]\nreads = "everything"\n')
    assert (err.key, err.line) == ("taint.reads", 2)
    assert "'url', 'flagged', 'all'" in str(err)
    assert _error("[taint]\nreads = true\n").key == "taint.reads"
    assert _error("[taint]\nfree_reads = []\n").key == "taint.free_reads"
    assert _error("[taint]\nask_on_flagged_reads = true\n").key == "taint.ask_on_flagged_reads"


def test_a_toml_syntax_error_names_the_file_and_line() -> None:
    err = _error('[defaults]\nread = "allow"\nwrite = deny\n')
    assert (err.path, err.line) == ("anfitrion.toml", 3)
    assert str(err).startswith("anfitrion.toml:3: not valid TOML")


def test_an_unknown_top_level_key_is_an_error_with_its_line() -> None:
    err = _error('[defaults]\nread = "allow"\n\n[rulez]\nx = 1\n')
    assert (err.key, err.line) == ("rulez", 4)
    assert "unknown key 'rulez'" in str(err)


def test_a_misspelt_key_in_the_second_rule_points_at_its_line() -> None:
    err = _error('''
[[rules]]
tool = "a"
verdict = "allow"

[[rules]]
tool = "b"
verdit = "ask"
''')
    assert (err.key, err.line) == ("rules[2].verdit", 8)


def test_an_unknown_constraint_points_at_its_line() -> None:
    err = _error('''
[[rules]]
tool = "write_draft"
verdict = "allow"
[rules.arguments.path]
path_inside = "drafts"
path_outside = "secrets"
''')
    assert (err.key, err.line) == ("rules[1].arguments.path.path_outside", 7)


@pytest.mark.parametrize(("body", "key", "message"), [
    ('matches = "(a+)+$"', "matches", "exponential"),
    ('matches = "([a-z"', "matches", "invalid regular expression"),
    ("min = 10\nmax = 1", "min", "min is greater than max"),
    ('min = "1"', "min", "must be a number"),
    ("max_length = -1", "max_length", "non-negative"),
    ('email_domains = ["faß.de"]', "email_domains", "not a valid host name"),
    ('email_domains = "example.com"', "email_domains", "non-empty list of strings"),
    ("email_domains = []", "email_domains", "non-empty list of strings"),
    ('url_hosts = ["a.com"]\nurl_schemes = ["ht tp"]', "url_hosts", "scheme names"),
    ('url_schemes = ["https"]', "url_schemes", "only goes with 'url_hosts'"),
    ("resolve_symlinks = true", "resolve_symlinks", "only goes with 'path_inside'"),
    ('path_inside = "drafts"\nresolve_symlinks = "yes"', "resolve_symlinks", "true or false"),
    ("one_of = []", "one_of", "at least one value"),
    ('one_of = "a"', "one_of", "must be a list"),
    ("max_input_length = 5", "max_input_length", "only goes with 'matches'"),
    ('matches = "a+"\nmax_input_length = 0', "matches", "positive integer"),
    ('not_matches = "a+"\nmax_input_length = 0', "not_matches", "positive integer"),
])
def test_invalid_constraints_are_errors_naming_the_key(body: str, key: str,
                                                       message: str) -> None:
    err = _error(f'[[rules]]\ntool = "t"\n[rules.arguments.x]\n{body}\n')
    assert err.key == f"rules[1].arguments.x.{key}"
    assert message in str(err)
    assert err.line is not None
    assert err.line >= 4


@pytest.mark.parametrize(("text", "key", "message"), [
    ('[[rules]]\nverdict = "allow"\n', "rules[1]", "needs 'tool', 'tools' or 'effect'"),
    ('[[rules]]\ntool = "a"\n', "rules[1]", "needs a 'verdict'"),
    ('[[rules]]\ntool = "a"\nverdict = "maybe"\n', "rules[1].verdict", "'allow', 'ask'"),
    ('[[rules]]\ntool = "a"\ntools = ["b"]\nverdict = "ask"\n', "rules[1].tools", "not both"),
    ('[[rules]]\neffect = "delete"\nverdict = "ask"\n', "rules[1].effect", "'read' or 'write'"),
    ('[[rules]]\ntool = 3\nverdict = "ask"\n', "rules[1].tool", "a tool name"),
    ('[[rules]]\ntool = "a"\nverdict = "ask"\nviolation = "x"\n', "rules[1].violation",
     "only goes with 'arguments'"),
    ('[[rules]]\ntool = "a"\narguments = {}\n', "rules[1].arguments", "names no argument"),
    ('[[rules]]\ntool = "a"\n[rules.arguments.x]\n', "rules[1].arguments.x",
     "names no constraint"),
    ('rules = 3\n', "rules", "array of tables"),
    ('[defaults]\nwrite = "sometimes"\n', "defaults.write", "'allow', 'ask'"),
    ('[defaults]\ndelete = "deny"\n', "defaults.delete", "unknown key"),
    ('[[rate_limits]]\ntool = "a"\nmax_calls = 5\n', "rate_limits[1]", "'max_calls' and 'per'"),
    ('[[rate_limits]]\ntool = "a"\nmax_calls = 5\nper = "1 fortnight"\n',
     "rate_limits[1].per", "not a duration"),
    ('[[rate_limits]]\ntool = "a"\nmax_calls = true\nper = "1h"\n', "rate_limits[1].max_calls",
     "an integer"),
    ('[[rate_limits]]\nmax_calls = 1\nper = "1h"\n', "rate_limits[1]", "needs 'tool'"),
    ('[budgets]\ntool_calls = -3\n', "budgets", "non-negative"),
    ('[budgets]\ncalls = 3\n', "budgets.calls", "unknown key"),
    ('[approvals]\nttl = "0s"\n', "approvals.ttl", "positive"),
    ('[approvals]\nmax_pending = "3"\n', "approvals.max_pending", "an integer"),
    ('[repeat_guard]\nmax_repeats = 0\n', "repeat_guard.max_repeats", "from 1 to 20"),
    ('[principals.alice]\nscope = ["x"]\n', "principals.alice.scope", "unknown key"),
    ('[principals]\nalice = "admin"\n', "principals.alice", "must be a table"),
])
def test_structural_errors_name_the_key(text: str, key: str, message: str) -> None:
    err = _error(text)
    assert err.key == key
    assert message in str(err)
    assert err.line is not None


def test_a_relative_base_is_relative_to_the_policy_file(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    file = tmp_path / "conf" / "anfitrion.toml"
    file.write_text('[[rules]]\ntool = "w"\nverdict = "allow"\n[rules.arguments.path]\n'
                    'path_inside = "drafts"\nbase = "../work"\nresolve_symlinks = true\n')
    rule = load_policy(file).rules[0]
    assert isinstance(rule, ArgumentRule)
    constraint = rule.constraints["path"][0]
    assert isinstance(constraint, PathInside)
    assert constraint.base == str(tmp_path / "work")
    assert constraint.check(str(tmp_path / "work" / "drafts" / "a")) is None
    assert constraint.check("drafts/../../conf/anfitrion.toml") is not None


def test_an_unreadable_or_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[defaults]\nread = "allow" # caf\xe9\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_policy(bad)


def test_rules_keep_their_ids_and_default_to_their_position() -> None:
    policy = parse_policy('[[rules]]\nid = "reads"\neffect = "read"\nverdict = "allow"\n'
                          '[[rules]]\ntools = ["a", "b*"]\nverdict = "deny"\nroles = ["x"]\n')
    first, second, _, _ = policy.rules
    assert isinstance(first, ToolRule)
    assert first.rule_id == "reads"
    assert isinstance(second, ToolRule)
    assert second.rule_id == "rules[2]"
    assert second.match.roles == frozenset({"x"})


def test_inline_tables_work_and_errors_inside_them_point_at_the_line() -> None:
    policy = parse_policy('[[rules]]\ntool = "w"\nverdict = "allow"\n'
                          'arguments = { path = { path_inside = "drafts" } }\n')
    assert isinstance(policy.rules[0], ArgumentRule)
    err = _error('[[rules]]\ntool = "w"\nverdict = "allow"\n'
                 'arguments = { path = { path_in = "drafts" } }\n')
    assert err.key == "rules[1].arguments.path.path_in"
    assert err.line == 4
