"""An approver's edit is a new proposal: validated, decided and approved again."""

from __future__ import annotations

from typing import Any

import pytest

from anfitrion import CallbackApprover, EventType, RunStatus
from anfitrion._approvals import ApprovalAnswer, ApprovalRequest
from anfitrion.policy import ApprovalLimits, ArgumentRule, EmailDomain, Policy, Verdict
from anfitrion.testing import EventCapture, MemoryStore

from .conftest import MAIL, FakeClock, mail_host, resume_host

pytestmark = pytest.mark.anyio

EXAMPLE_ONLY = Policy([ArgumentRule("send_email", {"to": EmailDomain(["example.com"])},
                                    Verdict.ASK, violation="only example.com")])


def _editor(*answers: Any) -> tuple[CallbackApprover, list[ApprovalRequest]]:
    """Answers requests in order: a dict is an edit, a bool a yes/no."""
    seen: list[ApprovalRequest] = []

    def answer(request: ApprovalRequest) -> ApprovalAnswer | bool:
        seen.append(request)
        step = answers[len(seen) - 1]
        if isinstance(step, dict):
            return ApprovalAnswer.edit(request, step, "ana", "fixed the address")
        return bool(step)

    return CallbackApprover(answer), seen


async def test_an_edit_needs_its_own_approval_and_runs_only_the_edit(
        store: MemoryStore, clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    edited = {**MAIL, "to": "bea@example.com"}
    approver, seen = _editor(edited, True)
    events = EventCapture()
    host = mail_host(sent, store, clock, approver=approver, policy=EXAMPLE_ONLY)
    host.add_listener(events)
    run = await host.run("mail")
    assert sent == [edited]
    assert [dict(r.arguments) for r in seen] == [MAIL, edited]
    assert seen[1].edit_of == seen[0].id
    assert seen[1].call_id == seen[0].call_id
    assert seen[0].digest != seen[1].digest
    assert run.transcript[-2].parts[0].call_id == seen[0].call_id
    proposed = events.of(EventType.CALL_PROPOSED)
    assert [e.detail for e in proposed] == [None, "an approver's edit"]


async def test_an_edit_is_decided_again_and_can_be_denied(store: MemoryStore,
                                                          clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    approver, seen = _editor({**MAIL, "to": "eve@evil.com"}, True)
    run = await mail_host(sent, store, clock, approver=approver, policy=EXAMPLE_ONLY).run("m")
    assert sent == []
    assert len(seen) == 1
    assert run.transcript[-2].parts[0].content == "denied by policy: only example.com"


async def test_an_edit_is_validated_again(store: MemoryStore, clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    approver, seen = _editor({"to": "bea@example.com", "bcc": "eve@evil.com"}, True)
    run = await mail_host(sent, store, clock, approver=approver).run("m")
    assert sent == []
    assert len(seen) == 1
    assert run.transcript[-2].parts[0].error_kind == "invalid_arguments"


async def test_an_edit_then_a_no_runs_nothing(store: MemoryStore, clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    approver, _ = _editor({**MAIL, "subject": "Q4"}, False)
    await mail_host(sent, store, clock, approver=approver).run("m")
    assert sent == []


async def test_edits_are_bounded(store: MemoryStore, clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    approver, seen = _editor(*({**MAIL, "subject": f"v{i}"} for i in range(10)))
    policy = Policy(approvals=ApprovalLimits(max_edits=2))
    run = await mail_host(sent, store, clock, approver=approver, policy=policy).run("m")
    assert sent == []
    assert len(seen) == 3
    assert run.transcript[-2].parts[0].content == \
        "denied by policy: the arguments were edited too many times"


async def test_an_edit_answered_later_suspends_again_and_runs_after_its_own_yes(
        store: MemoryStore, clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    run = await mail_host(sent, store, clock).run("mail", principal="alice")
    first = run.pending[0]
    edited = {**MAIL, "body": "numbers attached, see page 2"}
    assert await store.answer_approval(ApprovalAnswer.edit(first, edited, "ana", at=clock()))

    again = await resume_host(sent, store, clock).resume(run.session_id)
    assert again.status is RunStatus.SUSPENDED
    assert sent == []
    second = again.pending[0]
    assert second.edit_of == first.id
    assert dict(second.arguments) == edited

    assert await store.answer_approval(ApprovalAnswer.to(second, True, "ana", at=clock()))
    done = await resume_host(sent, store, clock).resume(run.session_id)
    assert done.status is RunStatus.COMPLETED
    assert sent == [edited]


async def test_a_pending_edit_that_does_not_match_its_origin_is_denied(
        store: MemoryStore, clock: FakeClock) -> None:
    """A request claiming to be an edit must match the edit its parent's answer holds."""
    sent: list[dict[str, Any]] = []
    run = await mail_host(sent, store, clock).run("mail", principal="alice")
    first = run.pending[0]
    assert await store.answer_approval(ApprovalAnswer.edit(first, {**MAIL, "subject": "x"},
                                                           "ana", at=clock()))
    again = await resume_host(sent, store, clock).resume(run.session_id)
    second = again.pending[0]
    forged = ApprovalRequest.for_call(
        session_id=second.session_id, principal_id=second.principal_id,
        call_id=second.call_id, tool_name=second.tool_name,
        tool_definition_hash=second.tool_definition_hash,
        arguments={**MAIL, "to": "eve@evil.com"}, effect="write", reason="", rule_id="",
        now=clock(), edit_of=first.id)
    await store.create_approval(forged)
    assert await store.answer_approval(ApprovalAnswer.to(forged, True, "eve", at=clock()))
    state = await store.load_session(run.session_id)
    assert state is not None
    data = dict(state.data)
    data["pending"] = {second.call_id: forged.id}
    await store.save_session(type(state)(state.session_id, state.principal_id, state.status,
                                         data, state.version))
    final = await resume_host(sent, store, clock).resume(run.session_id)
    assert sent == []
    assert final.transcript[-2].parts[0].content == \
        "denied by policy: the edited call does not match the approval it came from"


def test_an_edit_is_never_an_approval() -> None:
    request = ApprovalRequest.for_call(session_id="s", principal_id="p", call_id="c",
                                       tool_name="t", tool_definition_hash="h",
                                       arguments={"a": 1}, effect="write", reason="r",
                                       rule_id="x")
    answer = ApprovalAnswer.edit(request, {"a": 2}, "ana")
    assert answer.approved is False
    assert answer.digest == request.digest
    assert ApprovalAnswer.from_dict(answer.to_dict()) == answer
    assert ApprovalRequest.from_dict(request.to_dict()) == request


async def test_approve_with_edits_runs_the_edit_without_asking_again(store: MemoryStore,
                                                                     clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    edited = {**MAIL, "to": "bea@example.com"}
    asked: list[ApprovalRequest] = []

    def approve_with_edit(request: ApprovalRequest) -> ApprovalAnswer:
        asked.append(request)
        return ApprovalAnswer.edit(request, edited, "ana", approve=True)

    run = await mail_host(sent, store, clock, approver=CallbackApprover(approve_with_edit),
                          policy=EXAMPLE_ONLY).run("m")
    assert sent == [edited]
    assert len(asked) == 1
    requests = await store.list_approvals(pending_only=False, session_id=run.session_id)
    assert len(requests) == 2
    second = next(r for r in requests if r.edit_of is not None)
    found = await store.get_approval(second.id)
    assert found is not None
    assert found.answer is not None
    assert found.answer.approver == "ana"
    assert found.used is True  # used
    result = run.transcript[-2].parts[0].content
    assert result.startswith('[a person edited the arguments to {"body":')
    assert result.endswith("sent to bea@example.com")


async def test_approve_with_edits_still_obeys_the_policy(store: MemoryStore,
                                                         clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    approver = CallbackApprover(lambda r: ApprovalAnswer.edit(
        r, {**MAIL, "to": "eve@evil.com"}, "ana", approve=True))
    run = await mail_host(sent, store, clock, approver=approver, policy=EXAMPLE_ONLY).run("m")
    assert sent == []
    assert run.transcript[-2].parts[0].content == "denied by policy: only example.com"


async def test_approve_with_edits_from_the_inbox_runs_on_resume(store: MemoryStore,
                                                                clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    run = await mail_host(sent, store, clock).run("mail", principal="alice")
    edited = {**MAIL, "subject": "Q3 (corrected)"}
    assert await store.answer_approval(ApprovalAnswer.edit(run.pending[0], edited, "ana",
                                                           approve=True, at=clock()))
    done = await resume_host(sent, store, clock).resume(run.session_id)
    assert done.status is RunStatus.COMPLETED
    assert sent == [edited]
