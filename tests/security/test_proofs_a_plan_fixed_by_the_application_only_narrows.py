"""Monotonic confinement through the host: the application fixes a session's plan with
``Host.run(plan=...)`` before the model answers. Under ``plan = "before-taint"`` a tool the
model proposes outside it — before or after the injection — asks; a later run on the same
session narrows it further and never widens it back; the narrowing is stored with the session
(it holds after a resume in another process)."""

from __future__ import annotations

from typing import Any

import pytest

from anfitrion import CallbackApprover, Host, Principal
from anfitrion._approvals import ApprovalRequest
from anfitrion._session import Session
from anfitrion.exceptions import UserError
from anfitrion.models._scripted import ScriptedModel, call
from anfitrion.policy import parse_policy
from anfitrion.store import MemoryStore

from ._proofs import ME, POLICY, Office

pytestmark = pytest.mark.anyio

PLANNED = POLICY.replace('reads = "proven"', 'reads = "proven"\nplan = "before-taint"')


def _host(office: Office, script: list[Any], store: MemoryStore,
          asked: list[ApprovalRequest]) -> Host:
    def person(request: ApprovalRequest) -> bool:
        asked.append(request)
        return False
    return Host(model=ScriptedModel(script), tools=office.tools(),
                policy=parse_policy(PLANNED), store=store,
                approver=CallbackApprover(person, name="tester"), max_turns=len(script) + 1)


async def test_a_tool_outside_the_applications_plan_asks_even_when_proposed_before_taint(
        ) -> None:
    office, asked, store = Office(), [], MemoryStore()
    mail = {"to": ["dave@corp.example"], "subject": "Hi", "body": "Lunch?"}
    again = {**mail, "subject": "Hi again"}
    # in its first reply, before any result, the model proposes delete_file, send_email and
    # read_inbox: without the application's plan all three would be the plan; with it
    # delete_file is not
    script = [[call("delete_file", {"file_id": "13"}), call("send_email", mail),
               call("read_inbox", {})], call("send_email", again),
              call("delete_file", {"file_id": "4"}), "done"]
    host = _host(office, script, store, asked)
    principal = Principal("emma", attributes={"addresses": [ME]})
    result = await host.run("Delete files 13 and file 4, then tell dave@corp.example",
                            principal=principal, plan=["read_*", "send_email", "list_files"])
    # before taint nothing asks; after it, send_email is in the plan and delete_file is not
    assert office.done == [("delete_file", {"file_id": "13"}), ("send_email", mail),
                           ("send_email", again)]
    (request,) = asked
    assert request.tool_name == "delete_file" and any(
        "outside the plan" in w and "the session's narrowed plan" in w
        for w in request.warnings), request.warnings
    stored = Session.from_state(await store.load_session(result.session_id))
    assert stored.narrow_plan(["*"]) == ("send_email", "read_inbox")  # never widens back


async def test_a_later_run_narrows_further_and_a_resumed_session_keeps_the_narrowing() -> None:
    office, asked, store = Office(), [], MemoryStore()
    principal = Principal("emma", attributes={"addresses": [ME]})
    mail = {"to": ["dave@corp.example"], "subject": "Hi", "body": "Lunch?"}
    first = _host(office, [call("read_inbox", {}), "ok"], store, asked)
    result = await first.run("Read my mail", principal=principal,
                             plan=["read_*", "send_email"])
    later = _host(office, [call("send_email", mail), "done"], store, asked)
    await later.run("Now tell Dave", principal=principal, session_id=result.session_id,
                    plan=["read_*", "list_files", "send_email_*"])  # no send_email: narrower
    assert office.done == [] and [r.tool_name for r in asked] == ["send_email"]
    assert any("the session's narrowed plan (read_*, list_files, send_email_*)" in w
               for w in asked[0].warnings), asked[0].warnings
    stored = Session.from_state(await store.load_session(result.session_id))
    assert [list(g) for g in stored.to_state().data["plan_limits"]] == [
        ["read_*", "send_email"], ["read_*", "list_files", "send_email_*"]]


async def test_a_plan_given_as_one_string_is_refused_before_anything_runs() -> None:
    office, asked, store = Office(), [], MemoryStore()
    host = _host(office, [call("read_inbox", {}), "ok"], store, asked)
    with pytest.raises(UserError, match="list of tool-name globs"):
        await host.run("Read my mail", plan="read_*")
    assert await store.list_sessions() == []
