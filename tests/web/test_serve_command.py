"""``anfitrion serve``: loopback by default; anything else needs a flag and a configured token."""

from __future__ import annotations

from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner
from starlette.testclient import TestClient

from anfitrion._cli.serve import command


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Capture what would be served instead of blocking in uvicorn."""
    seen: dict[str, Any] = {}

    def run(app: Any, **kwargs: Any) -> None:
        seen["app"] = app
        seen.update(kwargs)

    monkeypatch.setattr(uvicorn, "run", run)
    monkeypatch.delenv("ANFITRION_INBOX_TOKEN", raising=False)
    return seen


def test_serve_binds_loopback_and_prints_a_generated_token(served: dict[str, Any]) -> None:
    result = CliRunner().invoke(command, ["--store", "memory://", "--port", "9999"])
    assert result.exit_code == 0, result.output
    assert served["host"] == "127.0.0.1"
    assert served["port"] == 9999
    token = result.output.split("sign-in token: ")[1].strip()
    with TestClient(served["app"], base_url="http://127.0.0.1:9999") as client:
        ok = client.get("/api/v1/approvals", headers={"authorization": f"Bearer {token}"})
        assert ok.status_code == 200
        assert client.get("/login", headers={"host": "evil.example"}).status_code == 400


def test_serve_refuses_a_public_address_without_the_flag(served: dict[str, Any]) -> None:
    result = CliRunner().invoke(command, ["--store", "memory://", "--host", "0.0.0.0",
                                          "--token", "t" * 32])
    assert result.exit_code != 0
    assert "--allow-remote" in result.output
    assert "app" not in served


def test_serve_refuses_a_public_address_without_a_configured_token(
        served: dict[str, Any]) -> None:
    result = CliRunner().invoke(command, ["--store", "memory://", "--host", "192.0.2.10",
                                          "--allow-remote"])
    assert result.exit_code != 0
    assert "token" in result.output
    assert "app" not in served


def test_serve_on_a_public_address_with_flag_and_token_does_not_print_the_token(
        served: dict[str, Any]) -> None:
    result = CliRunner().invoke(command, ["--store", "memory://", "--host", "192.0.2.10",
                                          "--allow-remote", "--allowed-host", "inbox.example"],
                                env={"ANFITRION_INBOX_TOKEN": "s" * 32})
    assert result.exit_code == 0, result.output
    assert "s" * 32 not in result.output
    with TestClient(served["app"], base_url="http://inbox.example") as client:
        assert client.get("/login").status_code == 200


def test_serve_refuses_a_short_token(served: dict[str, Any]) -> None:
    result = CliRunner().invoke(command, ["--store", "memory://", "--token", "short"])
    assert result.exit_code != 0
    assert "16 characters" in result.output


def test_serve_behind_a_proxy_accepts_the_public_origin(served: dict[str, Any]) -> None:
    result = CliRunner().invoke(command, ["--store", "memory://", "--token", "p" * 32,
                                          "--public-url", "https://inbox.example"])
    assert result.exit_code == 0, result.output
    with TestClient(served["app"], base_url="http://inbox.example") as client:
        response = client.post("/login", data={"token": "p" * 32, "name": "x"},
                               headers={"origin": "https://inbox.example"},
                               follow_redirects=False)
        assert response.status_code == 303


def test_serve_prints_a_sign_in_link_with_the_token_in_the_fragment(
        served: dict[str, Any]) -> None:
    result = CliRunner().invoke(command, ["--store", "memory://", "--port", "9999"])
    assert result.exit_code == 0, result.output
    token = result.output.split("sign-in token: ")[1].split()[0]
    link = result.output.split("sign in: ")[1].split()[0]
    assert link == f"http://127.0.0.1:9999/login#token={token}"


def test_serve_prints_no_link_for_a_configured_token(served: dict[str, Any]) -> None:
    result = CliRunner().invoke(command, ["--store", "memory://", "--token", "c" * 32])
    assert result.exit_code == 0, result.output
    assert "sign in:" not in result.output
    assert "c" * 32 not in result.output
