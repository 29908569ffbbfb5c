"""``anfitrion policy check`` and ``anfitrion policy validate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from anfitrion._cli.main import cli

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "anfitrion.toml")


def _check(*args: str) -> str:
    result = CliRunner().invoke(cli, ["policy", "check", "--policy", EXAMPLE, *args])
    assert result.exit_code == 0, result.output
    return result.output


def _check_json(*args: str) -> dict[str, object]:
    data: dict[str, object] = json.loads(_check(*args, "--json"))
    return data


def test_check_explains_a_denial_by_constraint() -> None:
    out = _check("--tool", "send_email", "--args", '{"to": "eve@evil.com"}',
                 "--principal", "alice")
    assert "send_email (write) for alice: DENY" in out
    assert "decided by: mail-to-example-com" in out
    assert "the model would see: denied by policy: send_email may only write to addresses " \
           "at example.com" in out
    assert "mail-per-hour: —" in out


@pytest.mark.parametrize(("tool", "args", "extra", "verdict", "rule"), [
    ("read_file", '{"path": "/etc/passwd"}', ["--effect", "read"], "allow", "default.read"),
    ("write_draft", '{"path": "drafts/a.md"}', [], "allow", "drafts-only"),
    ("write_draft", '{"path": "drafts/../a.md"}', [], "deny", "drafts-only"),
    ("send_email", '{"to": "ana@example.com"}', [], "ask", "mail-to-example-com"),
    ("send_email", '{"to": "ana@example.com"}', ["--prior-calls", "5"], "deny", "mail-per-hour"),
    ("send_email", '{"to": "ana@exаmple.com"}', [], "deny", "mail-to-example-com"),
    ("delete_file", '{"path": "x"}', [], "deny", "default.write"),
])
def test_check_gives_each_decision_of_the_example(tool: str, args: str, extra: list[str],
                                                  verdict: str, rule: str) -> None:
    data = _check_json("--tool", tool, "--args", args, "--principal", "alice", *extra)
    decision = data["decision"]
    assert isinstance(decision, dict)
    assert (decision["verdict"], decision["rule_id"]) == (verdict, rule)
    assert data["policy"] == EXAMPLE


def test_check_takes_scopes_from_the_policy_file_and_the_command_line() -> None:
    data = _check_json("--tool", "get_weather", "--effect", "read", "--principal", "alice")
    principal = data["principal"]
    assert isinstance(principal, dict)
    assert principal["scopes"] == ["mail:send"]
    data = _check_json("--tool", "get_weather", "--effect", "read", "--principal", "bob",
                       "--scope", "x")
    principal = data["principal"]
    assert isinstance(principal, dict)
    assert principal["scopes"] == ["x"]


def test_check_with_a_real_toolbox_validates_arguments_and_refuses_unknown_tools() -> None:
    box = "anfitrion._demo:demo_toolbox"
    ok = _check_json("--toolbox", box, "--tool", "get_weather", "--args",
                     '{"location": "Lisboa"}', "--principal", "alice")
    assert isinstance(ok["decision"], dict)
    assert ok["decision"]["verdict"] == "allow"
    bad = _check_json("--toolbox", box, "--tool", "get_weather", "--args", '{"units": "k"}',
                      "--principal", "alice")
    assert bad["decision"] is None
    assert "invalid arguments" in str(bad["rejected"])
    unknown = _check("--toolbox", box, "--tool", "rm_rf", "--principal", "alice")
    assert "unknown tool 'rm_rf'" in unknown


def test_check_refuses_bad_input_with_a_usage_error() -> None:
    runner = CliRunner()
    for args in (["--args", "{bad"], ["--args", "[1]"], ["--args", '{"a": 1, "a": 2}']):
        result = runner.invoke(cli, ["policy", "check", "--policy", EXAMPLE, "--tool", "t",
                                     "--principal", "p", *args])
        assert result.exit_code == 2, result.output


def test_check_reports_a_broken_policy_file_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "anfitrion.toml"
    bad.write_text('[[rules]]\ntool = "a"\nverdict = "yes"\n')
    result = CliRunner().invoke(cli, ["policy", "check", "--policy", str(bad), "--tool", "a",
                                      "--principal", "p"])
    assert result.exit_code == 1
    assert f"{bad}:3: must be one of 'allow', 'ask', 'deny' (at rules[1].verdict)" in \
        result.output


def test_check_without_a_policy_file_uses_the_built_in_default(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["policy", "check", "--tool", "send", "--principal", "p",
                                      "--json"])
    assert json.loads(result.output)["decision"]["rule_id"] == "default.write"


def test_validate_lists_the_rules() -> None:
    result = CliRunner().invoke(cli, ["policy", "validate", EXAMPLE])
    assert result.exit_code == 0
    assert "rule mail-per-hour" in result.output
    data = json.loads(CliRunner().invoke(cli, ["policy", "validate", EXAMPLE, "--json"]).output)
    assert data["rules"] == ["drafts-only", "mail-to-example-com", "mail-per-hour",
                             "repeat_guard", "taint", "secrets"]
    assert data["defaults"] == {"read": "allow", "write": "deny"}


def test_validate_shows_how_taint_containment_is_set(tmp_path: Path) -> None:
    policy = tmp_path / "anfitrion.toml"
    policy.write_text('[taint]\nreads = "all"\nfree_reads = ["clock.*"]\n')
    result = CliRunner().invoke(cli, ["policy", "validate", str(policy)])
    assert result.exit_code == 0, result.output
    assert ("rule taint (reads: all; free_reads: clock.*; allowed_hosts: any; "
            "deny_flagged: no)") in result.output
    data = json.loads(CliRunner().invoke(cli, ["policy", "validate", str(policy),
                                               "--json"]).output)
    assert data["rule_settings"]["taint"] == {"reads": "all", "free_reads": ["clock.*"],
                                              "allowed_hosts": None, "deny_flagged": False}



def test_validate_shows_budgets_and_approval_limits_as_the_policy_hash_reads_them(
        tmp_path: Path) -> None:
    from anfitrion.policy import load_policy

    policy = tmp_path / "anfitrion.toml"
    policy.write_text('[budgets]\ntool_calls = 40\n[approvals]\nttl = "5m"\nmax_edits = 1\n')
    data = json.loads(CliRunner().invoke(cli, ["policy", "validate", str(policy),
                                               "--json"]).output)
    described = load_policy(policy).describe()
    assert data["budgets"] == described["budgets"] == {
        "tool_calls": 40, "turns": None, "approvals_asked": None}
    assert data["approvals"] == described["approvals"] == {
        "ttl": 300.0, "max_pending": 5, "max_asks": 20, "per": 60.0, "max_edits": 1}
