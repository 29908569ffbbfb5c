"""The demo's approval part runs on the files and mail toolkits."""

from __future__ import annotations

import mailbox
from pathlib import Path

import pytest

from anfitrion import CallbackApprover, DenyAllApprover, Host
from anfitrion._approvals import ApprovalRequest
from anfitrion._demo import SCENES, demo_toolbox
from anfitrion.models._demo_script import demo_model


async def play(tmp_path: Path, approver: object) -> list[str]:
    host = Host(model=demo_model(), tools=demo_toolbox(tmp_path), approver=approver,  # type: ignore[arg-type]
                max_turns=4)
    outputs: list[str] = []
    session_id = None
    for _, prompt in SCENES:
        run = await host.run(prompt, principal="demo-user", session_id=session_id)
        session_id = run.session_id
        outputs.append(run.output)
    return outputs


@pytest.mark.anyio
async def test_with_a_person_saying_yes_the_note_is_written_and_the_mail_delivered(
        tmp_path: Path) -> None:
    asked: list[ApprovalRequest] = []

    def person(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    outputs = await play(tmp_path, CallbackApprover(person))
    assert outputs[0] == "done"
    assert [r.tool_name for r in asked] == ["write_draft", "send_email"]
    assert (tmp_path / "workspace" / "drafts" / "weather.md").read_text() == \
        "Lisboa 15 °C, partly cloudy."
    assert outputs[4] == "I can only write inside the workspace, so there is no copy in " \
                         "~/weather.md."
    [message] = list(mailbox.Maildir(str(tmp_path / "Maildir"), create=False))
    assert message["To"] == "team@example.com"
    assert outputs[5] == "Sent the forecast to team@example.com."


@pytest.mark.anyio
async def test_without_an_approver_nothing_is_written_or_sent(tmp_path: Path) -> None:
    outputs = await play(tmp_path, DenyAllApprover())
    assert not (tmp_path / "workspace" / "drafts" / "weather.md").exists()
    assert not (tmp_path / "Maildir").exists() or \
        len(mailbox.Maildir(str(tmp_path / "Maildir"), create=False)) == 0
    assert outputs[5].startswith("The e-mail was not sent: denied")
