"""Privacy by default: what the audit log keeps of arguments and results."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from anfitrion import Effect, Host, Toolbox
from anfitrion.audit import redact
from anfitrion.cli.main import cli
from anfitrion.conversation import ToolResult, UserMessage
from anfitrion.models._base import ModelRequest
from anfitrion.testing import ScriptedModel, call

PLANTED = {
    "email": "maria.silva@example.org",
    "openai": "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx",
    "anthropic": "sk-ant-api03-AbCdEfGhIjKlMnOp",
    "github": "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "google": "AIzaSyA-AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "bearer": "Zx9Yw8Vu7Ts6Rq5Po4Nm",
    "url_password": "hunter2hunter2",
    "phone": "+351 912 345 678",
    "sensitive_arg": "OpenSesame-4711",
    "private_key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
}


@pytest.mark.parametrize(("text", "kept", "gone"), [
    ("write to maria.silva@example.org now", "write to [email] now", "maria"),
    ("key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx", "key [secret]", "AbCd"),
    ("Authorization: Bearer Zx9Yw8Vu7Ts6Rq5Po4Nm", "[secret]", "Zx9Y"),
    ("curl -H 'Authorization: Bearer Zx9Yw8Vu7Ts6Rq5Po4Nm'", "[secret]", "Zx9Y"),
    ("postgres://app:hunter2hunter2@db/x", "postgres://app:[secret]@db/x", "hunter2"),
    ('{"password": "pa55word!"}', '{"password": "[secret]"}', "pa55"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG", "aws_secret_access_key=[secret]", "wJal"),
    ("call +351 912 345 678 or (555) 123-4567", "call [phone] or [phone]", "912"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEv\n-----END RSA PRIVATE KEY-----", "[private key]",
     "MIIEv"),
])
def test_secrets_and_personal_data_are_masked(text: str, kept: str, gone: str) -> None:
    masked = redact(text)
    assert kept in masked
    assert gone not in masked


@pytest.mark.parametrize("text", ["on 2026-11-30 at 01:51", "pi is 3.14159265358979",
                                  "order 12345678", "sha 9f86d081884c7d659a2feaa0c55ad015"])
def test_dates_amounts_and_short_numbers_are_not_taken_for_phones(text: str) -> None:
    assert redact(text) == text


def test_control_characters_and_terminal_escapes_are_escaped() -> None:
    masked = redact("ok\r\nFAKE: approved\x1b[2J\u202egnp.exe")
    assert "\r" not in masked
    assert "\n" not in masked
    assert "\x1b" not in masked
    assert "\u202e" not in masked
    assert "\\u000d\\u000a" in masked


def test_long_text_is_cut_with_its_length() -> None:
    assert redact("x" * 500, 10) == "x" * 10 + "… [500 chars]"


def _planted_host(store: str) -> Host:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted", sensitive={"passphrase"})
    def lookup_contact(name: str, passphrase: str, note: str = "") -> str:
        """Look a contact up."""
        return (f"{name}: {PLANTED['email']}, phone {PLANTED['phone']}, token "
                f"{PLANTED['github']}, aws {PLANTED['aws']}")

    def respond(request: ModelRequest) -> object:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and any(isinstance(p, ToolResult) for p in last.parts):
            return "done"
        return [
            call("lookup_contact", {
                "name": f"Maria <{PLANTED['email']}>", "passphrase": PLANTED["sensitive_arg"],
                "note": (f"use {PLANTED['openai']} and {PLANTED['anthropic']}, Bearer "
                         f"{PLANTED['bearer']}, https://u:{PLANTED['url_password']}@x.org, "
                         f"jwt {PLANTED['jwt']}, google {PLANTED['google']}, "
                         f"-----BEGIN PRIVATE KEY-----{PLANTED['private_key']}")}, id="c1"),
            call(f"exfiltrate_{PLANTED['email']}", {"to": PLANTED["email"]}, id="c2"),
        ]

    return Host(model=ScriptedModel(respond), tools=tools, store=store)


def test_planted_secrets_never_reach_the_audit_log_nor_its_output(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    run = _planted_host(url).run_sync("find Maria", principal="alice")
    assert run.output == "done"

    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT * FROM anfitrion_audit").fetchall()
    stored = repr(rows)
    assert len(rows) > 10
    runner = CliRunner()
    shown = runner.invoke(cli, ["audit", "show", "--store", url])
    as_json = runner.invoke(cli, ["audit", "show", "--json", "--store", url])
    exported = runner.invoke(cli, ["audit", "export", "--store", url])
    for result in (shown, as_json, exported):
        assert result.exit_code == 0
    for name, secret in PLANTED.items():
        for where, text in (("store", stored), ("show", shown.output),
                            ("show --json", as_json.output), ("export", exported.output)):
            assert secret not in text, f"{name} leaked into {where}"
    assert "[sensitive]" in stored
    assert "[email]" in stored


def test_the_audit_keeps_digests_so_a_value_can_be_checked_without_storing_it(
        tmp_path: Path) -> None:
    import hashlib

    url = f"sqlite:///{tmp_path / 'store.db'}"
    run = _planted_host(url).run_sync("find Maria")
    with sqlite3.connect(tmp_path / "store.db") as conn:
        stored = repr(conn.execute("SELECT data FROM anfitrion_audit").fetchall())
    [result] = [p for m in run.transcript if isinstance(m, UserMessage) for p in m.parts
                if isinstance(p, ToolResult) and p.call_id == "c1"]
    # the SHA-256 of the result's UTF-8 text: anyone holding the value can check it
    assert hashlib.sha256(result.content.encode()).hexdigest() in stored
