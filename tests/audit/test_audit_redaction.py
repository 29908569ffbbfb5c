"""Privacy by default: what the audit log keeps of arguments and results."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from anfitrion import Effect, Host, Policy, Toolbox
from anfitrion._cli.main import cli
from anfitrion._conversation import ToolResult, UserMessage
from anfitrion._redaction import redact
from anfitrion.models._base import ModelRequest
from anfitrion.policy._taint import taint_rule
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
    "card": "4111 1111 1111 1111",
    "iban": "DE89 3704 0044 0532 0130 00",
    "prose_password": "hunter3hunter3",
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


@given(st.lists(st.integers(0, 255), min_size=4, max_size=4))
def test_an_ipv4_address_is_kept_so_an_audited_refusal_names_its_destination(parts: list[int]
                                                                            ) -> None:
    address = ".".join(map(str, parts))
    assert redact(f"refused {address}:80 (metadata)") == f"refused {address}:80 (metadata)"


@pytest.mark.parametrize("phone", ["415.555.0100", "06.12.34.56.78", "212.555.12.34",
                                   "+1 415 555 0100", "999.999.999.999"])
def test_a_phone_number_written_with_dots_is_still_masked(phone: str) -> None:
    assert redact(f"call {phone} now") == "call [phone] now"


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
                f"{PLANTED['github']}, aws {PLANTED['aws']}, card {PLANTED['card']}, "
                f"iban {PLANTED['iban']}, her password is {PLANTED['prose_password']}")

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

    # no secrets rule: the call must run, so that its result reaches the audit log too
    return Host(model=ScriptedModel(respond), tools=tools, store=store,
                policy=Policy([taint_rule()]))


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
    assert "[card]" in stored and "[iban]" in stored
    compact = stored.replace(" ", "")
    for name in ("card", "iban", "phone"):
        assert PLANTED[name].replace(" ", "") not in compact, name


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


# -- card numbers, IBANs, passwords in prose ---------------------------------------------------

@pytest.mark.parametrize("card", [
    "4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111",  # Visa
    "5555 5555 5555 4444", "2223 0031 2200 3222",  # Mastercard
    "3782 822463 10005", "378282246310005",  # American Express (15 digits)
    "6011 1111 1111 1117",  # Discover
    "4222222222222",  # Visa, 13 digits
    "6250 9410 0652 8599 321",  # UnionPay, 19 digits
])
def test_a_luhn_valid_card_number_is_masked_in_any_grouping(card: str) -> None:
    masked = redact(f"pay with {card}, expiry 12/27")
    assert masked == "pay with [card], expiry 12/27"


def test_a_card_next_to_other_numbers_is_still_found() -> None:
    assert redact("4111 1111 1111 1111 12 27 cvc 123") == "[card] 12 27 cvc 123"


@pytest.mark.parametrize("number", [
    "4111 1111 1111 1112",  # one digit off: not a card
    "4111-1111-1111-1121",
    "1234 5678 9012 3456 78",  # fails Luhn, and no card starts with 1
    "1733061252000 1733061252000",  # millisecond timestamps
])
def test_a_number_that_fails_the_card_checks_is_not_masked_as_a_card(number: str) -> None:
    assert "[card]" not in redact(number)
    assert number.split()[0][:4] in redact(number)


@pytest.mark.parametrize("iban", ["DE89 3704 0044 0532 0130 00", "DE89370400440532013000",
                                  "GB82 WEST 1234 5698 7654 32", "fr1420041010050500013m02606"])
def test_a_valid_iban_is_masked(iban: str) -> None:
    assert redact(f"transfer to {iban} today") == "transfer to [iban] today"


def test_an_iban_shaped_text_that_fails_the_checksum_is_not_an_iban() -> None:
    assert "[iban]" not in redact("ref DE89 3704 0044 0532 0130 01")


@pytest.mark.parametrize(("text", "kept"), [
    ("my password is hunter2", "my password is [secret]"),
    ("My Password Is: hunter2", "My Password Is: [secret]"),
    ("the passcode: 1234", "the passcode: [secret]"),
    ("the password for gmail is 'hunter2'", "the password for gmail is '[secret]"),
    ("PIN is 4821", "PIN is [secret]"),
    ("mi contraseña es hunter2", "mi contraseña es [secret]"),
    ("la clave es hunter2", "la clave es [secret]"),
    ("a minha senha é hunter2", "a minha senha é [secret]"),
    ("mon mot de passe est hunter2", "mon mot de passe est [secret]"),
    ("mein Passwort lautet hunter2", "mein Passwort lautet [secret]"),
    ("la password è hunter2", "la password è [secret]"),
    ("mijn wachtwoord is hunter2", "mijn wachtwoord is [secret]"),
])
def test_a_password_written_in_prose_is_masked(text: str, kept: str) -> None:
    masked = redact(text)
    assert masked.startswith(kept)
    assert "hunter2" not in masked and "4821" not in masked and "1234" not in masked


@pytest.mark.parametrize("text", ["the password isolation layer", "reset your password here",
                                  "spinning 1234 times", "passwordless login"])
def test_prose_about_passwords_without_one_is_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("hostile", [
    "password " + "is " * 20_000, "1 " * 50_000, "4111-" * 20_000, "DE00" + " 0000" * 20_000,
    "pin for " + "a " * 20_000, "4" * 100_000,
])
def test_hostile_digit_and_password_runs_are_scanned_only_in_a_bounded_prefix(
        hostile: str) -> None:
    masked = redact(hostile, 120)
    assert masked.endswith(f"… [{len(hostile)} chars]")


def test_the_approvers_note_is_redacted_in_the_audit_record(tmp_path: Path) -> None:
    from anfitrion import CallbackApprover
    from anfitrion._approvals import ApprovalAnswer, ApprovalRequest

    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE)
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    note = ("ok, card 4111 1111 1111 1111, IBAN DE89 3704 0044 0532 0130 00, "
            "my password is hunter2, key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx")

    def person(request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer.to(request, True, "ana", note)

    url = f"sqlite:///{tmp_path / 'store.db'}"
    host = Host(model=ScriptedModel([call("pay", {"amount": 5}), "done"]), tools=tools,
                store=url, approver=CallbackApprover(person))
    assert host.run_sync("pay").output == "done"
    exported = CliRunner().invoke(cli, ["audit", "export", "--store", url]).output
    assert '"approval_answer"' in exported
    for secret in ("4111 1111", "DE89", "hunter2", "AbCdEfGh"):
        assert secret not in exported
    assert "[card]" in exported and "[iban]" in exported


def _with_check_digit(body: str) -> str:
    from anfitrion._redaction import luhn_valid

    return next(body + d for d in "0123456789" if luhn_valid(body + d))


@given(first=st.sampled_from("23456"), rest=st.text("0123456789", min_size=11, max_size=17),
       cuts=st.lists(st.tuples(st.integers(1, 18), st.sampled_from(" -")), max_size=4),
       before=st.sampled_from(["", "card ", "pay with: ", "(", "#"]),
       after=st.sampled_from(["", " exp 12/27", ".", ", thanks", ")"]))
def test_any_luhn_valid_card_number_in_any_grouping_is_masked(
        first: str, rest: str, cuts: list[tuple[int, str]], before: str, after: str) -> None:
    number = _with_check_digit(first + rest)
    grouped = number
    for at, sep in sorted(set(cuts), reverse=True):
        if at < len(grouped) and grouped[at - 1].isdigit() and grouped[at].isdigit():
            grouped = grouped[:at] + sep + grouped[at:]
    masked = redact(before + grouped + after)
    assert "[card]" in masked
    assert number[-6:] not in masked.replace(" ", "").replace("-", "")
