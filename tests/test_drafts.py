"""The propose-then-confirm primitive."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from anfitrion import Principal, ToolContext
from anfitrion._drafts import Draft, Drafts, draft_digest
from anfitrion.exceptions import ToolError
from anfitrion.store import ClaimState, MemoryStore


def ctx(principal: str = "alice", call_id: str = "c1") -> ToolContext:
    return ToolContext(Principal(principal), "s1", call_id, "commit_note")


@pytest.mark.anyio
async def test_a_proposal_is_stored_with_its_digest_and_changes_nothing_else() -> None:
    store = MemoryStore()
    drafts = Drafts(store, kind="note")
    draft = await drafts.propose({"text": "hi"}, ctx())
    assert draft.digest == draft_digest("note", {"text": "hi"})
    assert draft.status == "pending"
    assert draft.principal_id == "alice"
    assert await drafts.get(draft.id) == draft
    assert [k for k, _ in await store.list_records("drafts")] == [draft.id]


def test_the_digest_covers_kind_and_content() -> None:
    base = draft_digest("note", {"text": "hi"})
    assert draft_digest("note", {"text": "hi"}) == base
    assert draft_digest("note", {"text": "hi "}) != base
    assert draft_digest("email", {"text": "hi"}) != base


@pytest.mark.anyio
async def test_commit_runs_the_action_once_with_the_stored_draft() -> None:
    drafts = Drafts(MemoryStore(), kind="note")
    draft = await drafts.propose({"text": "hi"}, ctx())
    ran: list[Draft] = []

    async def action(d: Draft) -> str:
        ran.append(d)
        return "done"

    assert await drafts.commit(draft.id, {"text": "hi"}, ctx(), action) == "done"
    assert ran == [draft]
    with pytest.raises(ToolError, match="already committed"):
        await drafts.commit(draft.id, {"text": "hi"}, ctx(call_id="c2"), action)
    assert len(ran) == 1
    stored = await drafts.get(draft.id)
    assert stored is not None
    assert stored.status == "committed"


@pytest.mark.anyio
async def test_commit_refuses_content_other_than_the_draft() -> None:
    drafts = Drafts(MemoryStore(), kind="note")
    draft = await drafts.propose({"text": "hi"}, ctx())

    async def action(d: Draft) -> None:
        raise AssertionError("must not run")

    with pytest.raises(ToolError, match="differ from draft"):
        await drafts.commit(draft.id, {"text": "hi!"}, ctx(), action)


@pytest.mark.anyio
@pytest.mark.parametrize(("principal", "kind"), [("mallory", "note"), ("alice", "email")])
async def test_commit_refuses_another_principals_or_kinds_draft(principal: str,
                                                                kind: str) -> None:
    store = MemoryStore()
    draft = await Drafts(store, kind="note").propose({"text": "hi"}, ctx())

    async def action(d: Draft) -> None:
        raise AssertionError("must not run")

    with pytest.raises(ToolError, match="no pending"):
        await Drafts(store, kind=kind).commit(draft.id, {"text": "hi"}, ctx(principal), action)


@pytest.mark.anyio
async def test_a_failed_commit_is_settled_and_not_run_again() -> None:
    store = MemoryStore()
    drafts = Drafts(store, kind="note")
    draft = await drafts.propose({"text": "hi"}, ctx())

    async def boom(d: Draft) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        await drafts.commit(draft.id, {"text": "hi"}, ctx(), boom)
    stored = await drafts.get(draft.id)
    assert stored is not None
    assert stored.status == "failed"
    with pytest.raises(ToolError, match="already committed"):
        await drafts.commit(draft.id, {"text": "hi"}, ctx(), boom)


@pytest.mark.anyio
async def test_a_commit_interrupted_before_settling_is_reported_as_unknown() -> None:
    store = MemoryStore()
    drafts = Drafts(store, kind="note")
    draft = await drafts.propose({"text": "hi"}, ctx())
    claim = await store.claim_execution(f"draft:drafts:{draft.id}", "commit", draft.digest)
    assert claim.state is ClaimState.CLAIMED  # a crashed process claimed it and never settled

    async def action(d: Draft) -> None:
        raise AssertionError("must not run")

    with pytest.raises(ToolError, match="outcome is unknown"):
        await drafts.commit(draft.id, {"text": "hi"}, ctx(), action)


@pytest.mark.anyio
async def test_concurrent_commits_of_one_draft_run_the_action_once() -> None:
    drafts = Drafts(MemoryStore(), kind="note")
    draft = await drafts.propose({"text": "hi"}, ctx())
    ran: list[int] = []
    refused: list[str] = []

    async def attempt(n: int) -> None:
        async def action(d: Draft) -> None:
            ran.append(n)
            await anyio.sleep(0)

        try:
            await drafts.commit(draft.id, {"text": "hi"}, ctx(call_id=f"c{n}"), action)
        except ToolError as exc:
            refused.append(str(exc))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for n in range(10):
                tg.start_soon(attempt, n)
    assert len(ran) == 1
    assert len(refused) == 9


@pytest.mark.anyio
async def test_drafts_are_listed_per_principal_and_status() -> None:
    drafts = Drafts(MemoryStore(), kind="note")
    a = await drafts.propose({"text": "a"}, ctx("alice"))
    b = await drafts.propose({"text": "b"}, ctx("bob"))

    async def action(d: Draft) -> Any:
        return None

    await drafts.commit(b.id, {"text": "b"}, ctx("bob"), action)
    assert [d.id for d in await drafts.list(principal_id="alice")] == [a.id]
    assert [d.id for d in await drafts.list(status="committed")] == [b.id]
    assert len(await drafts.list()) == 2


REFUND = {"type": "object", "properties": {"order": {"type": "string"},
                                           "amount": {"type": "integer", "minimum": 1}},
          "required": ["order", "amount"]}


def refund_tools(store: MemoryStore, done: list[Any]) -> Any:
    from anfitrion._drafts import draft_tools

    def check(arguments: Any) -> None:
        if arguments.get("amount", 0) > 100:
            raise ValueError("amount: refunds above 100 need a manager")

    def refund(draft: Draft, context: ToolContext) -> str:
        done.append((dict(draft.content), context.principal.id))
        return f"refunded {draft.content['amount']} on {draft.content['order']}"

    return draft_tools(store, kind="refund", input_schema=REFUND, action=refund,
                       validator=check)


@pytest.mark.anyio
async def test_draft_tools_propose_freely_and_commit_after_approval_exactly_once() -> None:
    from anfitrion import CallbackApprover, Host, Toolbox
    from anfitrion._approvals import ApprovalRequest
    from anfitrion.models._scripted import ScriptedModel, call

    store = MemoryStore()
    done: list[Any] = []
    asked: list[ApprovalRequest] = []
    tools = Toolbox(refund_tools(store, done))
    args = {"order": "A-17", "amount": 40}

    def step(request: Any) -> Any:
        results = request.messages[-1].parts if request.messages else ()
        last = results[-1] if results else None
        if last is None or not hasattr(last, "call_id"):
            return call("draft_refund", args)
        if last.name == "draft_refund":
            import json

            draft_id = json.loads(last.content)["draft_id"]
            return [call("commit_refund", {"draft_id": draft_id, **args}),
                    call("commit_refund", {"draft_id": draft_id, **args})]
        return "ok"

    def person(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    host = Host(model=ScriptedModel(step), tools=tools, store=store,
                approver=CallbackApprover(person))
    run = await host.run("refund A-17", principal="alice")
    results = run.transcript.tool_results
    assert [r.name for r in results] == ["draft_refund", "commit_refund", "commit_refund"]
    assert results[1].content == "refunded 40 on A-17"
    assert "already committed" in results[2].content
    # the second commit of the same draft is refused before anyone is asked
    assert [r.tool_name for r in asked] == ["commit_refund"]
    assert {k: v for k, v in asked[0].arguments.items() if k != "draft_id"} == args
    assert done == [(args, "alice")]


def test_draft_tools_validate_both_steps_and_reserve_draft_id() -> None:
    from anfitrion import ToolDefinitionError
    from anfitrion._drafts import draft_tools
    from anfitrion.exceptions import ArgumentError

    propose, commit = refund_tools(MemoryStore(), [])
    with pytest.raises(ArgumentError, match="need a manager"):
        propose.validate({"order": "A", "amount": 500})
    with pytest.raises(ArgumentError, match="need a manager"):
        commit.validate({"draft_id": "refund-1", "order": "A", "amount": 500})
    with pytest.raises(ArgumentError, match="draft_id"):
        commit.validate({"order": "A", "amount": 5})
    assert (propose.effect.value, commit.effect.value) == ("read", "write")
    bad = {"type": "object", "properties": {"draft_id": {"type": "string"}}}
    with pytest.raises(ToolDefinitionError, match="reserved"):
        draft_tools(MemoryStore(), kind="x", input_schema=bad, action=lambda d, c: None)


@pytest.mark.anyio
async def test_a_commit_whose_arguments_differ_from_the_draft_is_refused_before_asking() -> None:
    from anfitrion import CallbackApprover, Host, Toolbox
    from anfitrion._approvals import ApprovalRequest
    from anfitrion.models._scripted import ScriptedModel, call

    store = MemoryStore()
    done: list[Any] = []
    asked: list[ApprovalRequest] = []
    tools = Toolbox(refund_tools(store, done))

    def step(request: Any) -> Any:
        results = request.messages[-1].parts if request.messages else ()
        last = results[-1] if results else None
        if last is None or not hasattr(last, "call_id"):
            return call("draft_refund", {"order": "A-17", "amount": 40})
        if last.name == "draft_refund":
            import json

            draft_id = json.loads(last.content)["draft_id"]
            return call("commit_refund", {"draft_id": draft_id, "order": "A-17",
                                          "amount": 41})
        return "ok"

    host = Host(model=ScriptedModel(step), tools=tools, store=store,
                approver=CallbackApprover(lambda r: asked.append(r) or True))
    run = await host.run("refund A-17", principal="alice")
    refused = run.transcript.tool_results[-1]
    assert refused.error_kind == "refused" and "differ from draft" in refused.content
    assert asked == [] and done == []
