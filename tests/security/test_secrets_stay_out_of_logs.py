"""Secrets planted in a run's arguments, results and exceptions never reach the logs.

Every record of an ``anfitrion`` logger (the gate's tool exceptions, failing listeners and
policy rules, any ``anfitrion.*`` child) is redacted when it is made, so the redaction holds for
a handler on the root logger (pytest's caplog, ``logging.basicConfig`` on stderr) just as for
one on ``anfitrion`` itself. Tracebacks are opt-in, and redacted line by line when on.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anfitrion import Effect, Host, Policy, Toolbox
from anfitrion._events import HostEvent
from anfitrion._tools import BoundCall
from anfitrion.models._base import ModelRequest
from anfitrion.policy import Decision, PolicyContext
from anfitrion.testing import ScriptedModel, call

SECRETS = {
    "openai": "sk-proj-Q7wErTyU1oP4aSdFgH6jKlZxCvBnM0",
    "anthropic": "sk-ant-api03-Zq8wXv2Lm9Nb4Kc7Jd1Hf5",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_R2d2C3poBb8Yoda9Luke4Leia7Han0Solo12",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "bearer": "Zx9Yw8Vu7Ts6Rq5Po4Nm",
    "url_password": "Tr0ub4dor-and-3",
    "private_key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    "card": "4111 1111 1111 1111",
    "prose_password": "correcthorse42",
    "email": "maria.silva@example.org",
    "phone": "+351 912 345 678",
    "iban": "DE89 3704 0044 0532 0130 00",
}


def planted_text(secrets: dict[str, str]) -> str:
    """All the planted secrets in the forms they appear in real text."""
    return (f"key {secrets['openai']} and {secrets['anthropic']}, aws {secrets['aws']}, "
            f"token {secrets['github']}, jwt {secrets['jwt']}, "
            f"Authorization: Bearer {secrets['bearer']}, "
            f"db postgres://app:{secrets['url_password']}@db.internal/prod, "
            f"-----BEGIN PRIVATE KEY-----\n{secrets['private_key']}\n-----END PRIVATE KEY-----\n"
            f"card {secrets['card']}, my password is {secrets['prose_password']}, "
            f"mail {secrets['email']}, phone {secrets['phone']}, iban {secrets['iban']}")


def planted_host(secrets: dict[str, str]) -> Host:
    """A host whose run sends the secrets through every place that logs: a tool that logs
    its arguments and raises with them, a result a listener chokes on, a policy rule that
    raises. Importable by the subprocess below."""
    text = planted_text(secrets)
    tools = Toolbox()
    tool_log = logging.getLogger("anfitrion.toolkits.planted")

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def lookup(note: str) -> str:
        """Look something up."""
        tool_log.warning("lookup called with %s", note)
        return f"found: {text}"

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def connect(note: str) -> str:
        """Connect somewhere."""
        raise RuntimeError(f"connect failed for {note}")

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def judged(note: str) -> str:
        """A tool a broken policy rule is asked about."""
        return "never"

    def broken_rule(c: BoundCall, context: PolicyContext) -> Decision | None:
        if c.name == "judged":
            raise ValueError(f"cannot judge {c.arguments}")
        return None

    def choking_listener(event: HostEvent) -> None:
        if event.result is not None and event.result.content.startswith("found"):
            raise KeyError(f"cannot show {event.result.content}")

    def respond(request: ModelRequest) -> object:
        turns = sum(1 for m in request.messages if type(m).__name__ == "Reply")
        if turns == 0:
            return [call("lookup", {"note": text}, id="a"),
                    call("connect", {"note": text}, id="b"),
                    call("judged", {"note": text}, id="c")]
        return "done"

    # no secrets rule: the calls must run for their logs to be tested
    return Host(model=ScriptedModel(respond), tools=tools, policy=Policy([broken_rule]),
                listeners=[choking_listener])


def leaks(output: str) -> list[str]:
    # the card and IBAN are looked for without their spaces too, the phone by its digits
    found = [name for name, secret in SECRETS.items() if secret in output]
    compact = output.replace(" ", "")
    found += [f"{name} (compact)" for name in ("card", "iban", "phone")
              if SECRETS[name].replace(" ", "") in compact]
    return found


def test_planted_secrets_never_reach_a_root_handler(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        run = planted_host(SECRETS).run_sync("go")
    assert run.output == "done"
    text = caplog.text
    # the three places that logged did log, redacted, with the exception's type
    assert "lookup called with key [secret]" in text
    assert "RuntimeError: connect failed for key [secret]" in text
    assert "ValueError: cannot judge" in text
    assert "KeyError" in text
    assert "[card]" in text and "[iban]" in text and "[private key]" in text
    assert leaks(text) == []
    assert "Traceback" not in text  # tracebacks are opt-in
    for record in caplog.records:
        if record.name.startswith("anfitrion"):
            assert record.exc_info is None and record.args == ()


def test_records_of_other_loggers_are_left_as_the_application_wrote_them(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        logging.getLogger("myapp").info("user %s", SECRETS["email"])
        logging.getLogger("anfitrionette").info("user %s", SECRETS["email"])
    assert caplog.text.count(SECRETS["email"]) == 2


def test_a_message_with_broken_format_arguments_is_still_redacted(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        logging.getLogger("anfitrion.x").info("%d items for %s", SECRETS["email"])
    assert SECRETS["email"] not in caplog.text and "[email]" in caplog.text


_SCRIPT = """
import json, logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
sys.path.insert(0, sys.argv[2])
from test_secrets_stay_out_of_logs import planted_host
secrets = json.load(open(sys.argv[1]))
print(planted_host(secrets).run_sync("go").output)
"""


def _run_script(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    secrets_file = tmp_path / "secrets.json"
    secrets_file.write_text(json.dumps(SECRETS))
    src = str(Path(__file__).resolve().parents[2] / "src")
    environment = {**os.environ, "PYTHONPATH": src, **env}
    return subprocess.run([sys.executable, "-c", _SCRIPT, str(secrets_file),
                           str(Path(__file__).parent)],
                          capture_output=True, text=True, env=environment, timeout=120,
                          check=False)


def test_planted_secrets_never_reach_stderr_of_a_process_logging_with_basic_config(
        tmp_path: Path) -> None:
    done = _run_script(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert "RuntimeError: connect failed" in done.stderr
    assert "Traceback" not in done.stderr
    assert leaks(done.stderr) == []


def test_opted_in_tracebacks_are_logged_with_every_line_redacted(tmp_path: Path) -> None:
    done = _run_script(tmp_path, ANFITRION_LOG_TRACEBACKS="1")
    assert done.returncode == 0, done.stderr
    assert "Traceback (most recent call last)" in done.stderr
    assert 'raise RuntimeError(f"connect failed for {note}")' in done.stderr
    assert leaks(done.stderr) == []


def test_redaction_is_installed_once_and_chains_a_factory_set_before(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from anfitrion import _logging

    seen: list[str] = []
    previous = logging.getLogRecordFactory()

    def application_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        seen.append(args[0])
        return previous(*args, **kwargs)

    logging.setLogRecordFactory(application_factory)
    try:
        _logging.install()
        _logging.install()
        with caplog.at_level(logging.INFO):
            logging.getLogger("anfitrion.gate").info("to %s", SECRETS["email"])
    finally:
        logging.setLogRecordFactory(previous)
    assert seen == ["anfitrion.gate"]  # the application's factory ran, once
    assert SECRETS["email"] not in caplog.text


def test_a_redacting_filter_on_a_handler_redacts_every_logger_it_hears() -> None:
    import io

    from anfitrion._logging import RedactingFilter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    app = logging.getLogger("myapp.redacted")
    app.addHandler(handler)
    app.setLevel(logging.INFO)
    try:
        app.info("token %s for %s", SECRETS["github"], SECRETS["email"])
    finally:
        app.removeHandler(handler)
    assert stream.getvalue() == "token [secret] for [email]\n"
