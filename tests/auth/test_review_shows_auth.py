"""``anfitrion mcp review`` says how each HTTP server is authorized — the mode (each person's
connected account, a service account, token exchange, static headers, none), the issuer and
the scopes — before it contacts anything, and never shows a secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from anfitrion._cli.main import cli

SECRET = "cs-PLANTED-review-5d1c"
HEADER = "hv-PLANTED-review-9e2a"


def test_review_shows_each_servers_auth_and_no_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVC_SECRET", SECRET)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "docs": {"url": "https://docs.example/mcp",
                 "auth": {"issuer": "https://login.example", "scopes": ["docs:read"]}},
        "open": {"url": "https://open.example/mcp", "auth": {}},
        "billing": {"url": "https://billing.example/mcp",
                    "auth": {"grant": "client_credentials", "clientId": "anfitrion-svc",
                             "clientSecret": "${SVC_SECRET}", "scopes": ["invoices:read"]}},
        "notes": {"url": "https://notes.example/mcp",
                  "tokenExchange": {"tokenEndpoint": "https://idp.example/token",
                                    "audience": "https://notes.example/mcp",
                                    "scope": "notes:read", "clientId": "gateway",
                                    "clientSecret": "${SVC_SECRET}"}},
        "static": {"url": "https://static.example/mcp",
                   "headers": {"Authorization": f"Bearer {HEADER}"}},
    }, "gateway": {"store": f"sqlite:///{tmp_path}/s.db"}}))
    store = f"sqlite:///{tmp_path}/s.db"
    assert CliRunner().invoke(cli, ["db", "migrate", "--store", store]).exit_code == 0
    result = CliRunner().invoke(cli, ["mcp", "review", "--config", str(config),
                                      "--store", store])
    out = result.output
    assert result.exit_code != 0 and "nothing was started" in out  # no consent: no contact
    assert "auth:     connected accounts (authorization code with PKCE)" in out
    assert "issuer https://login.example; scopes docs:read" in out
    assert "issuer the first the server names; scopes what the server asks for" in out
    assert "service account (client credentials, client anfitrion-svc)" in out
    assert "token exchange (RFC 8693)" in out and "scopes notes:read" in out
    assert "static headers (the same for every caller)" in out
    assert SECRET not in out and HEADER not in out
