"""``gateway.auth`` and a server entry's ``tokenExchange`` in the MCP config: each mistake one
clear line naming the file and the key, secrets read from the environment and never echoed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anfitrion.exceptions import ConfigError
from anfitrion.mcp._config import load_config

ISSUER = "https://idp.example"


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def test_a_full_gateway_auth_section_loads(tmp_path: Path) -> None:
    path = write(tmp_path, {"mcpServers": {"notes": {
        "url": "https://notes.example/mcp",
        "tokenExchange": {"tokenEndpoint": f"{ISSUER}/token", "audience":
                          "https://notes.example/mcp", "scope": "notes:read  notes:write",
                          "clientId": "gw", "clientSecret": "${GW_SECRET}"}}},
        "gateway": {"auth": {"issuer": ISSUER, "resource": "https://gw.example/mcp",
                             "rolesClaim": "realm_access.roles", "requiredScopes": ["mcp"],
                             "algorithms": ["ES256"], "leeway": 10,
                             "introspection": {"endpoint": f"{ISSUER}/introspect",
                                               "clientId": "gw",
                                               "clientSecret": "${GW_SECRET}"}}}})
    config = load_config(path, environ={"GW_SECRET": "s3cret-value"})
    auth = config.gateway.auth
    assert auth is not None and auth.issuer == ISSUER and auth.algorithms == ("ES256",)
    assert auth.introspection is not None and auth.introspection.client_secret == "s3cret-value"
    assert "s3cret-value" not in repr(auth)
    exchange = config.servers["notes"].token_exchange
    assert exchange is not None and exchange.scope == "notes:read notes:write"
    assert "s3cret-value" not in repr(exchange)


@pytest.mark.parametrize(("auth", "key", "words"), [
    ({}, "gateway.auth.issuer", "http(s) URL"),
    ({"issuer": "ftp://idp"}, "gateway.auth.issuer", "http(s) URL"),
    ({"issuer": ISSUER, "algorithms": ["HS256"]}, "gateway.auth.algorithms", "never accepted"),
    ({"issuer": ISSUER, "algorithms": ["none"]}, "gateway.auth.algorithms", "never accepted"),
    ({"issuer": ISSUER, "leeway": 3600}, "gateway.auth.leeway", "0 to 300"),
    ({"issuer": ISSUER, "requiredScopes": ["a b"]}, "gateway.auth.requiredScopes", "scope"),
    ({"issuer": ISSUER, "principalClaim": "sub\n"}, "gateway.auth.principalClaim", "claim"),
    ({"issuer": ISSUER, "allowInternal": "yes"}, "gateway.auth.allowInternal", "true or false"),
    ({"issuer": ISSUER, "surprise": 1}, "gateway.auth", "unknown keys"),
    ({"issuer": ISSUER, "introspection": {"endpoint": f"{ISSUER}/i", "clientId": "gw",
                                          "clientSecret": "${MISSING}"}},
     "gateway.auth.introspection.clientSecret", "MISSING is not set"),
])
def test_each_mistake_in_gateway_auth_is_one_line_naming_the_key(
        tmp_path: Path, auth: dict[str, Any], key: str, words: str) -> None:
    path = write(tmp_path, {"gateway": {"auth": auth}})
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and key in message and words in message


@pytest.mark.parametrize(("entry", "words"), [
    ({"command": "x", "tokenExchange": {}}, "HTTP servers"),
    ({"url": "https://n.example/mcp", "headers": {"Authorization": "Bearer x"},
      "tokenExchange": {}}, "either headers or tokenExchange"),
    ({"url": "https://n.example/mcp", "tokenExchange": {"audience": "https://n.example/mcp",
                                                        "clientId": "gw",
                                                        "clientSecret": "s"}}, "tokenEndpoint"),
    ({"url": "https://n.example/mcp", "tokenExchange": {
        "tokenEndpoint": f"{ISSUER}/token", "audience": "https://n.example/mcp",
        "clientId": "gw", "clientSecret": "s", "scope": 'a"b'}}, "scope"),
])
def test_each_mistake_in_token_exchange_is_one_line(tmp_path: Path, entry: dict[str, Any],
                                                     words: str) -> None:
    path = write(tmp_path, {"mcpServers": {"notes": entry}})
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    message = str(caught.value)
    assert "\n" not in message and "mcpServers.notes" in message and words in message
