"""A credential the model holds cannot leave in a call's arguments without a person seeing it.

The attack: a trusted tool (a config file, a vault, the environment) hands the model an
``sk-…`` key or a private key, and an injected instruction makes it pass the value out in the
arguments of a *read* — which the default policy otherwise lets run unseen. The class: every
credential shape, anywhere in the arguments (nested, in object keys), in any of the encodings
a model can apply (percent, form, HTML, base64, hex).
"""

from __future__ import annotations

import base64
import html
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from anfitrion import Effect, Policy, Tool, Toolbox
from anfitrion._principal import Principal
from anfitrion._tools import BoundCall
from anfitrion.exceptions import ConfigError
from anfitrion.models._scripted import call
from anfitrion.policy import (
    Decision,
    PolicyContext,
    SecretArguments,
    ToolRule,
    Verdict,
    parse_policy,
)

CREDENTIALS = {
    "a private key": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n"
                      "-----END RSA PRIVATE KEY-----"),
    "an OpenSSH private key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n",
    "an Anthropic API key": "sk-ant-api03-Zq8wXv2Lm9Nb4Kc7Jd1Hf5Gt6",
    "an OpenAI API key": "sk-proj-4fG7hJ2kL9mN3pQ8rS1tV6wX0yZ",
    "a Stripe secret key": "sk_live_51HqLyjWDarjtT1zdp7dcXzYb",
    "a GitHub token": "ghp_R2d2C3poBb8Yoda9Luke4Leia7Han0Solo12",
    "a fine-grained GitHub token": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123",
    "a GitLab token": "glpat-x4Yz9AbCdEfGhIjKlMn0",
    "a Slack token": "xoxb-1234567890-0987654321-AbCdEfGhIjKl",
    "a Hugging Face token": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "an AWS access key id": "AKIAIOSFODNN7EXAMPLE",
    "an AWS session key id": "ASIAY34FZKBOKMUTVV7A",
    "a Google API key": "AIzaSyA-1bCdEfGhIjKlMnOpQrStUvWxYz01234",
    "a JSON Web Token": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "a bearer token": "Authorization: Bearer Zx9Yw8Vu7Ts6Rq5Po4Nm",
    "a password in a URL": "postgres://app:S3cr3t-pw@db.internal:5432/prod",
    "a password assignment": "password=hunter2hunter2",
    "an API key assignment": "api_key: 'Zq8wXv2Lm9Nb'",
    "an access token in a query": "https://api.example/v1?access_token=ya29A0ARrdaM",
    "a password in prose": "my password is hunter2",
    "a password in Spanish prose": "mi contraseña es gato1234",
}

LOOK_ALIKES = [
    "sk-learn tutorial", "scikit-learn and task-1234567890abcdefghij",
    "sk-my-very-long-annual-report-title", "ASIAPACIFICSUMMIT2026X",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYI\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----", "https://example.com:8080/@user/profile",
    "https://api.example/items?page_token=CAESBggDEJ", "Bearer of-the-ring-and-more",
    "the password reset page", "passwordless login", "pk_live_51HqLyjWDarjtT1zdp7dcXzYb",
    "eyJ is how JSON starts in base64", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
    "dGhlIHdlYXRoZXIgaW4gTGlzYm9u",  # base64 of "the weather in Lisbon"
    "https://www.youtube.com/watch?v=dQw4w9WgXcQ", "card 4111 1111 1111 1111",
    "IBAN DE89 3704 0044 0532 0130 00", "mail bob@example.com, call +351 912 345 678",
]


def search_tools(ran: list[Any]) -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def search(query: Any) -> str:
        """Search the web (a read: the default policy lets it run)."""
        ran.append(query)
        return "results"

    @tools.tool(effect=Effect.READ, provenance="trusted", sensitive={"password"})
    def login(user: str, password: str) -> str:
        """Log in: the password argument is where a secret belongs."""
        ran.append(user)
        return "ok"

    return tools


async def _run(hostile: Any, query: Any, **options: Any) -> tuple[Any, list[Any]]:
    ran: list[Any] = []
    outcome = await hostile(search_tools(ran), [call("search", {"query": query})],
                            approve=False, **options)
    return outcome, ran


@pytest.mark.anyio
@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
async def test_each_kind_of_credential_in_a_read_asks_a_person(hostile: Any, kind: str) -> None:
    outcome, ran = await _run(hostile, f"look up {CREDENTIALS[kind]} please")
    assert ran == []  # the person said no: nothing left
    [request] = outcome.asked
    [warning] = [w for w in request.warnings if w.startswith("argument query")]
    assert "looks like" in warning
    assert CREDENTIALS[kind][8:] not in warning  # the warning names the kind, not the value
    assert outcome.run.calls[0].rule_id == "secrets"


def _nested(secret: str) -> Any:
    return {"filters": [{"tag": "x"}, {"note": ["a", {"deep": secret}]}]}


@pytest.mark.anyio
@pytest.mark.parametrize(("how", "wrap"), [
    ("nested in lists and objects", _nested),
    ("as an object key", lambda s: {s: "value"}),
    ("percent-encoded in a URL", lambda s: "https://x.example/?d=" + quote(s, safe="")),
    ("percent-encoded twice", lambda s: quote(quote(s, safe=""), safe="")),
    ("form-encoded", lambda s: "q=" + quote_plus(s)),
    ("HTML entities", lambda s: html.escape(s).replace("-", "&#45;")),
    ("base64", lambda s: base64.b64encode(s.encode()).decode()),
    ("base64 without padding", lambda s: base64.b64encode(s.encode()).decode().rstrip("=")),
    ("URL-safe base64 in a path", lambda s: "https://x.example/p/"
     + base64.urlsafe_b64encode(s.encode()).decode().rstrip("=")),
    ("hex", lambda s: s.encode().hex()),
    ("upper-case hex", lambda s: s.encode().hex().upper()),
    # decoys first: a budget counted in tokens let 16 long words hide what follows
    ("base64 behind decoy words", lambda s: "internationalization " * 40
     + base64.b64encode(s.encode()).decode()),
    ("base64 behind decoy tokens", lambda s: " ".join(
        base64.b64encode(f"decoy number {i:04d}".encode()).decode() for i in range(64))
     + " " + base64.b64encode(s.encode()).decode()),
    ("hex behind decoy paths", lambda s: "/".join(["Q29uZmlndXJhdGlvbg"] * 40) + "/"
     + s.encode().hex()),
])
@pytest.mark.parametrize("kind", ["a private key", "an OpenAI API key", "an AWS access key id",
                                  "a password in a URL"])
async def test_a_credential_is_found_in_any_position_and_encoding(
        hostile: Any, how: str, wrap: Any, kind: str) -> None:
    outcome, ran = await _run(hostile, wrap(CREDENTIALS[kind]))
    assert ran == [], how
    assert [r.tool_name for r in outcome.asked] == ["search"]


@pytest.mark.anyio
@pytest.mark.parametrize("text", LOOK_ALIKES)
async def test_benign_look_alikes_run_without_a_question(hostile: Any, text: str) -> None:
    outcome, ran = await _run(hostile, text)
    assert outcome.asked == []
    assert ran == [text]


@pytest.mark.anyio
async def test_a_secret_in_an_argument_the_tool_declares_sensitive_is_not_a_leak(
        hostile: Any) -> None:
    ran: list[Any] = []
    outcome = await hostile(search_tools(ran), [call("login", {
        "user": "ana", "password": CREDENTIALS["an OpenAI API key"]})], approve=False)
    assert outcome.asked == [] and ran == ["ana"]
    outcome = await hostile(search_tools(ran), [call("login", {
        "user": CREDENTIALS["an OpenAI API key"], "password": "x"})], approve=False)
    assert [r.tool_name for r in outcome.asked] == ["login"]  # other arguments are scanned


def _bound(arguments: dict[str, Any], effect: Effect = Effect.READ) -> BoundCall:
    tool = Tool.from_schema("search", {"type": "object"}, lambda a: "", effect=effect)
    return BoundCall("c1", tool, arguments)


CONTEXT = PolicyContext(Principal("emma"), "s")
LEAK = {"query": CREDENTIALS["an AWS access key id"]}


def test_the_rule_escalates_an_operator_allow_and_never_lifts_a_deny() -> None:
    allowed = Policy([ToolRule("search", Verdict.ALLOW), SecretArguments()])
    decision = allowed.decide(_bound(LEAK), CONTEXT)
    assert (decision.verdict, decision.rule_id) == (Verdict.ASK, "secrets")
    assert allowed.decide(_bound({"query": "weather"}), CONTEXT).verdict is Verdict.ALLOW
    denied = Policy([ToolRule("search", Verdict.DENY), SecretArguments()])
    assert denied.decide(_bound(LEAK), CONTEXT).verdict is Verdict.DENY
    assert allowed.may_allow(_bound({}).tool, Principal("emma"))


def test_the_default_policy_asks_about_a_credential_in_a_read() -> None:
    decision = Policy.default().decide(_bound(LEAK), CONTEXT)
    assert (decision.verdict, decision.rule_id) == (Verdict.ASK, "secrets")
    assert decision.warnings == ("argument query: looks like an AWS access key id: `AKIAIO…`",)


@pytest.mark.parametrize(("toml", "verdict"), [
    ("", Verdict.ASK),
    ('[secrets]\nverdict = "ask"\n', Verdict.ASK),
    ('[secrets]\nverdict = "deny"\n', Verdict.DENY),
    ('[secrets]\nverdict = "off"\n', Verdict.ALLOW),
    ('[secrets]\nexempt_tools = ["sea*"]\n', Verdict.ALLOW),
])
def test_the_policy_file_says_whether_a_credential_asks_is_denied_or_passes(
        toml: str, verdict: Verdict) -> None:
    assert parse_policy(toml).decide(_bound(LEAK), CONTEXT).verdict is verdict


@pytest.mark.parametrize(("toml", "key"), [
    ('[secrets]\nverdict = "allow"\n', "secrets.verdict"),
    ("[secrets]\nverdict = true\n", "secrets.verdict"),
    ("[secrets]\nexempt_tools = []\n", "secrets.exempt_tools"),
    ("[secrets]\nbogus = 1\n", "secrets.bogus"),
])
def test_a_bad_secrets_table_is_a_config_error_naming_the_key(toml: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(toml)
    assert info.value.key == key


def test_the_rule_refuses_to_allow() -> None:
    with pytest.raises(ValueError, match="asks or denies"):
        SecretArguments("allow")


def test_a_hostile_argument_is_scanned_in_bounded_work(monkeypatch: pytest.MonkeyPatch) -> None:
    from anfitrion import _encodings

    decoded: list[str] = []
    real = _encodings._decode_token

    def counting(token: str) -> Any:
        decoded.append(token)
        return real(token)

    rule = SecretArguments()
    huge = ("QUFBQUFBQUFBQUFB/" * 20_000) + "x" * 200_000
    monkeypatch.setattr(_encodings, "_decode_token", counting)
    decision = rule(_bound({"q": huge}), CONTEXT)
    # more than it decodes: it asks (fail closed), having decoded a bounded amount
    assert decision is not None and decision.verdict is Verdict.ASK
    assert "more encoded text than can be decoded" in " ".join(decision.warnings)
    assert sum(map(len, decoded)) <= _encodings.MAX_DECODED_CHARS * 4  # a few forms, each capped


def test_long_words_and_an_attachment_are_scanned_whole_without_a_question() -> None:
    """The fail-closed budget is counted in characters: prose full of long words and a
    base64 attachment (slashes and all) are decoded whole, and nothing is asked."""
    import random

    rng = random.Random(7)
    prose = " ".join(rng.choice(["internationalization", "responsibilities",
                                 "characteristically", "Configuration_Management"])
                     for _ in range(5_000))
    attachment = base64.b64encode(rng.randbytes(48_000)).decode()
    assert attachment.count("/") > 500
    assert SecretArguments()(_bound({"body": prose, "attachment": attachment}), CONTEXT) is None


def test_an_allow_from_a_rule_with_its_own_reason_keeps_its_words_and_gains_the_warning() -> None:
    def operator(c: BoundCall, context: PolicyContext) -> Decision | None:
        return Decision.ask("the operator asks about searches", "operator")

    decision = Policy([operator, SecretArguments()]).decide(_bound(LEAK), CONTEXT)
    assert decision.reason == "the operator asks about searches"
    assert any("AWS access key id" in w for w in decision.warnings)


def test_arguments_too_many_to_scan_ask_rather_than_pass() -> None:
    from anfitrion.policy import _secrets as secrets

    many = {"rows": [f"harmless row {i}" for i in range(secrets.MAX_STRINGS + 1)]}
    decision = SecretArguments()(_bound(many), CONTEXT)
    assert decision is not None and decision.verdict is Verdict.ASK
    assert "too many to scan" in decision.warnings[0]
    assert SecretArguments()(_bound({"rows": many["rows"][:100]}), CONTEXT) is None
