"""The model's last word is not the truth (#36 item 12): every run carries the host's outcome
report (executed / failed / refused / waiting / unknown per call, from the gate's records, never
from the model), printed under the final answer in `chat` and the demo; an option appends a
one-line host note when the answer claims an action that did not happen."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from anfitrion import CallbackApprover, DeferredApprover, Effect, Host, ScriptedModel, Toolbox
from anfitrion._host import unperformed_note
from anfitrion.models._scripted import call

pytestmark = pytest.mark.anyio
ANFITRION = [sys.executable, "-c", "from anfitrion._cli.main import main; main()"]
YES = CallbackApprover(lambda request: True)
LIE = "The message is sent. The team will be notified."


def _tools(sent: list[str]) -> Toolbox:
    box = Toolbox()

    @box.tool(effect=Effect.WRITE)
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        sent.append(to)
        return "sent"

    @box.tool(effect=Effect.READ)
    def get_weather(location: str) -> str:
        """The weather."""
        return "15 °C"

    return box


async def _run(*script: Any, note: bool = True, approver: Any = None) -> Any:
    sent: list[str] = []
    host = Host(ScriptedModel(list(script)), _tools(sent), note_unperformed=note,
                approver=approver)
    return await host.run("Mail the team"), sent


async def test_a_refused_write_and_a_lying_answer_get_the_host_note_and_the_report() -> None:
    """The issue's case: send_email refused (invalid arguments), the model says it is sent."""
    run, sent = await _run([call("send_email", {"to": "team@example.com"}, id="c1")], LIE)
    assert sent == []
    assert run.output.startswith(LIE)
    assert run.output.endswith("[anfitrion: whatever the answer above says, this turn: "
                               "send_email refused]")
    assert [(c.tool, c.outcome) for c in run.calls] == [("send_email", "refused")]
    report = run.report()
    assert report.startswith("host report (what ran, by the gate):")
    assert "refused  send_email (c1): invalid arguments" in report
    quiet, _ = await _run([call("send_email", {"to": "team@example.com"}, id="c1")], LIE,
                          note=False)
    assert quiet.output == LIE  # the note is an option; the report is always there
    assert "refused  send_email" in quiet.report()


async def test_no_note_when_the_write_ran_or_the_answer_claims_nothing() -> None:
    ran, sent = await _run([call("send_email", {"to": "a@x.org", "body": "hi"}, id="c1")],
                           LIE, approver=YES)
    assert sent == ["a@x.org"] and ran.output == LIE
    assert [c.outcome for c in ran.calls] == ["executed"]
    honest, _ = await _run([call("send_email", {"to": "a@x.org"}, id="c1")],
                           "I could not send it: the body was missing.")
    assert honest.output == "I could not send it: the body was missing."
    negated, _ = await _run([call("send_email", {"to": "a@x.org"}, id="c1")],
                            "The message was not sent.")
    assert "[anfitrion" not in negated.output
    nothing, _ = await _run("Hello.")
    assert nothing.report() == "" and nothing.output == "Hello."


async def test_a_refused_read_is_no_claim_and_a_later_success_of_the_tool_counts() -> None:
    read, _ = await _run([call("get_weather", {}, id="c1")], "Done, it is sunny.")
    assert "[anfitrion" not in read.output and read.calls[0].outcome == "refused"
    retried, sent = await _run([call("send_email", {"to": "a@x.org"}, id="c1")],
                               [call("send_email", {"to": "a@x.org", "body": "hi"}, id="c2")],
                               LIE, approver=YES)
    assert sent == ["a@x.org"] and retried.output == LIE
    assert [c.outcome for c in retried.calls] == ["refused", "executed"]


async def test_a_write_waiting_for_a_person_is_reported_waiting() -> None:
    run, _ = await _run([call("send_email", {"to": "a@x.org", "body": "hi"}, id="c1")], LIE,
                        approver=DeferredApprover())
    assert [c.outcome for c in run.calls] == ["waiting"]
    assert "waiting  send_email (c1)" in run.report()


def test_the_note_reads_only_the_host_records() -> None:
    from anfitrion._host import CallRecord

    unknown = CallRecord("c1", "pay", "execute", "allow", None, None, True, "outcome_unknown",
                         "write")
    assert unknown.outcome == "unknown"
    assert unperformed_note("Paid.", [unknown]) == (
        "[anfitrion: whatever the answer above says, this turn: pay unknown]")
    assert unperformed_note("I tried to pay.", [unknown]) is None


def test_the_demo_prints_the_report_under_each_answer(tmp_path: Path) -> None:
    done = subprocess.run([*ANFITRION, "demo", "--store", f"sqlite:///{tmp_path / 'd.db'}"],
                          capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("host report (what ran, by the gate):") >= 3
    assert "refused  send_email" in done.stdout
    assert "executed draft_email" in done.stdout


def _fake_providers() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "models" / "fake_providers.py"
    spec = importlib.util.spec_from_file_location("_anfitrion_fake_providers", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name) or importlib.util.module_from_spec(spec)
    if spec.name not in sys.modules:
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def test_chat_prints_the_note_and_the_report_under_a_lying_answer(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    fakes = _fake_providers()
    brain = fakes.chat_brain((("write_draft", {"path": "~/note.md", "text": "hi"}),))

    def lying(path: str, body: dict[str, Any]) -> Any:
        answer = brain(path, body)
        message = answer["choices"][0]["message"]
        if message.get("content") == fakes.FINAL:
            message["content"] = "Done: the note is saved in ~/note.md."
        return answer

    with fakes.serve(lying) as server:
        done = subprocess.run(
            [*ANFITRION, "chat", "--model", "openai-chat:local-test", "--base-url",
             f"{server.url}/v1", "--store", f"sqlite:///{tmp_path / 'c.db'}"],
            input="Save a note\n/quit\n", capture_output=True, text=True, timeout=120,
            env={**os.environ, "OPENAI_API_KEY": "test-key"})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    answer = out.index("Done: the note is saved")
    note = out.index("[anfitrion: whatever the answer above says, this turn: write_draft "
                     "refused]")
    report = out.index("host report (what ran, by the gate):")
    assert answer < note < report
    assert "refused  write_draft" in out
