"""The mcpServers config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anfitrion.exceptions import ConfigError
from anfitrion.mcp._config import load_config, parse_config

DESKTOP = {"mcpServers": {
    "git": {"command": "uvx", "args": ["mcp-server-git", "--repository", "."]},
    "docs": {"type": "http", "url": "https://docs.example/mcp",
             "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
    "off": {"command": "x", "disabled": True},
}}


def test_a_pasted_mcpservers_block_loads_as_is() -> None:
    config = parse_config(DESKTOP, environ={"DOCS_TOKEN": "abc"})
    assert sorted(config.servers) == ["docs", "git"]
    git = config.servers["git"]
    assert (git.transport, git.command, git.args) == ("stdio", "uvx",
                                                     ("mcp-server-git", "--repository", "."))
    assert git.trusted is False
    assert git.env == {}
    assert config.servers["docs"].headers == {"Authorization": "Bearer abc"}


def test_secrets_are_passed_only_when_named_and_must_exist() -> None:
    with pytest.raises(ConfigError, match="DOCS_TOKEN is not set"):
        parse_config(DESKTOP, environ={})


@pytest.mark.parametrize(("servers", "message"), [
    ({"a.b": {"command": "x"}}, "server id"),
    ({"a": {"command": "x", "url": "http://h"}}, "either a command"),
    ({"a": {}}, "either a command"),
    ({"a": {"url": "http://h", "type": "sse"}}, "not supported"),
    ({"a": {"url": "file:///etc/passwd"}}, "http"),
    ({"a": {"command": "x", "trusted": "yes"}}, "true or false"),
    ({"a": {"command": "x", "timeout": 0}}, "positive"),
    ({"a": {"command": "x", "surprise": 1}}, "unknown keys 'surprise'"),
])
def test_invalid_server_entries_name_the_key(servers: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"mcpServers": servers})


def test_the_gateway_only_listens_on_loopback() -> None:
    with pytest.raises(ConfigError, match="loopback"):
        parse_config({"mcpServers": {}, "gateway": {"host": "0.0.0.0"}})


def test_the_inbox_url_is_an_address_without_credentials() -> None:
    """The link a client is asked to open (URL-mode elicitation) is the configured inbox's:
    no credentials, query or fragment an attacker could smuggle into it; http(s) only."""
    settings = parse_config({"gateway": {"inboxUrl": "https://inbox.example/team"}}).gateway
    assert settings.inbox_url == "https://inbox.example/team"
    for bad in ("javascript:alert(1)", "https://user:pw@inbox.example", "file:///etc/passwd",
                "https://inbox.example/?next=https://evil.example", "https://inbox.example/#x",
                "https://", "https://inbox.example/\n", 42, ""):
        with pytest.raises(ConfigError, match="inboxUrl"):
            parse_config({"gateway": {"inboxUrl": bad}})


def test_load_config_reports_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{\n  "mcpServers": {,\n}')
    with pytest.raises(ConfigError, match=r"mcp\.json:2"):
        load_config(path)
    path.write_text(json.dumps({"mcpServers": {}, "gateway": {"approvalWait": 5,
                                                              "principal": "desk"}}))
    settings = load_config(path).gateway
    assert (settings.approval_wait, settings.principal) == (5.0, "desk")


def test_the_gateway_policy_file_is_relative_to_the_config(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"gateway": {"policy": "anfitrion.toml"}}))
    assert load_config(path).gateway.policy == str(tmp_path / "anfitrion.toml")


def test_the_protocol_is_auto_by_default_legacy_on_request_and_nothing_else() -> None:
    servers = {"a": {"command": "a"}, "b": {"command": "b", "protocol": "legacy"}}
    config = parse_config({"mcpServers": servers})
    assert [s.protocol for s in config.servers.values()] == ["auto", "legacy"]
    with pytest.raises(ConfigError, match="protocol"):
        parse_config({"mcpServers": {"c": {"command": "c", "protocol": "2024-11-05"}}})


def test_the_gateway_drain_and_adoption_times(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"gateway": {"drainSeconds": 10, "adoptWithin": 300}}))
    settings = load_config(path).gateway
    assert (settings.drain_seconds, settings.adopt_within) == (10.0, 300.0)
    path.write_text(json.dumps({"gateway": {}}))
    settings = load_config(path).gateway
    assert (settings.drain_seconds, settings.adopt_within) == (2.0, None)  # approvalWait
    for key in ("drainSeconds", "adoptWithin"):
        for bad in (0, -1, True, "5", [1], 1e308):
            path.write_text(json.dumps({"gateway": {key: bad}}))
            with pytest.raises(ConfigError, match=f"gateway.{key}"):
                load_config(path)


def test_a_missing_or_unreadable_config_is_one_config_error_naming_the_file(
        tmp_path: Path) -> None:
    for path in (tmp_path / "absent.json", tmp_path):
        with pytest.raises(ConfigError, match="cannot read the MCP config") as caught:
            load_config(path)
        assert caught.value.path == str(path)
        assert len(str(caught.value).splitlines()) == 1


def test_the_config_is_read_by_the_one_settings_reader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #29: the MCP config goes through ``_home.read_settings_text`` (its checks and
    messages written once): read once per version of the file, again when it changes."""
    import builtins
    from typing import Any

    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"gateway": {"principal": "one"}}))
    opened: list[str] = []
    real_open = builtins.open

    def counting(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file) == str(path):
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    assert load_config(path).gateway.principal == "one"
    assert load_config(path).gateway.principal == "one"
    assert len(opened) == 1
    path.write_text(json.dumps({"gateway": {"principal": "second"}}))
    assert load_config(path).gateway.principal == "second"
    assert len(opened) == 2
