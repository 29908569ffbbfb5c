"""The gate (:mod:`anfitrion._gate`): each stage, driven through the public API with a
scripted model, and the per-call record and its ledger helper, driven directly."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from tests.test_host import results_of, weather_tools

from anfitrion import (
    ApprovalAnswer,
    CallbackApprover,
    DenyAllApprover,
    Effect,
    EventType,
    Host,
    Policy,
    RunStatus,
    ScriptedModel,
    Tool,
    Toolbox,
    ToolError,
    ToolResult,
    UserMessage,
)
from anfitrion._approvals import ApprovalRequest
from anfitrion._conversation import ToolCall
from anfitrion._events import HostEvent
from anfitrion._gate import CallLedger, Gate, GatedCall, _silent
from anfitrion.exceptions import ConflictError
from anfitrion.models import ModelRequest
from anfitrion.policy import Decision
from anfitrion.store import ClaimState, LedgerState, MemoryStore
from anfitrion.testing import call, gate_session

# -- the stages, through the host ------------------------------------------------------------

@pytest.mark.parametrize("name", ["delete_file", "get_wether", "GET_WEATHER", "get_weather ",
                                  "get_weather\u200b"])
def test_unknown_tool_returns_error_result_without_fuzzy_matching(name: str) -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([call(name, {"location": "x"}), "ok"])
    run = Host(model=model, tools=weather_tools(executed)).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.is_error and result.error_kind == "unknown_tool"
    assert result.content.startswith("unknown tool ")
    assert executed == []
    assert run.status is RunStatus.COMPLETED


def test_a_registered_tool_that_is_not_offered_cannot_be_called() -> None:
    tools = Toolbox(list(weather_tools()), offer=lambda tool, ctx: tool.name != "send_note")
    model = ScriptedModel([call("send_note", {"to": "a", "text": "b"}), "ok"])
    run = Host(model=model, tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.error_kind == "unknown_tool"


def test_invalid_arguments_become_an_error_result_the_model_can_fix() -> None:
    executed: list[dict[str, object]] = []

    def respond(request: ModelRequest) -> object:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and isinstance(last.parts[0], ToolResult):
            if last.parts[0].is_error:
                return call("get_weather", {"location": "Porto, PT"})
            return "done"
        return call("get_weather", {"location": 42, "extra": True})

    run = Host(model=ScriptedModel(respond), tools=weather_tools(executed)).run_sync("hi")  # type: ignore[arg-type]
    first, second = results_of(run.transcript)
    assert first.error_kind == "invalid_arguments"
    assert "location: 42 is not of type 'string'" in first.content
    assert "unexpected properties 'extra'" in first.content
    assert not second.is_error
    assert executed == [{"location": "Porto, PT"}]
    assert run.status is RunStatus.COMPLETED


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ('{"location": "a", "location": "b"}', "duplicate key"),
        ('{"location": NaN}', "NaN"),
        ("{not json", "invalid JSON"),
        ("[" * 50 + "]" * 50, "nesting deeper"),
        ('"just a string"', "must be a JSON object"),
        ('{"location": "' + "x" * 300_000 + '"}', "limit"),
    ],
)
def test_malformed_argument_text_is_an_error_result(raw: str, problem: str) -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([call("get_weather", raw=raw), "ok"])
    run = Host(model=model, tools=weather_tools(executed)).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.error_kind == "invalid_arguments"
    assert problem in result.content
    assert executed == []


def test_retries_are_bounded_per_tool() -> None:
    bad = call("get_weather", {"location": 1})
    model = ScriptedModel(lambda request: call("get_weather", {"location": 1}))
    run = Host(model=model, tools=weather_tools(), max_turns=20).run_sync("hi")
    assert run.status is RunStatus.BUDGET_EXHAUSTED
    kinds = [r.error_kind for r in results_of(run.transcript)]
    assert kinds == ["invalid_arguments"] * 3 + ["retry_limit"]
    assert bad.name == "get_weather"


def test_write_without_an_approver_is_denied_saying_a_person_must_approve() -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([call("send_note", {"to": "bob", "text": "hi"}), "could not"])
    run = Host(model=model, tools=weather_tools(executed)).run_sync("send it")
    [result] = results_of(run.transcript)
    assert result.error_kind == "denied"
    assert "a person must approve" in result.content
    assert executed == []
    assert run.calls[0].verdict == "ask"


def test_an_approver_sees_the_exact_arguments_and_its_yes_runs_them() -> None:
    executed: list[dict[str, object]] = []
    seen = []

    def approve(request: object) -> bool:
        seen.append(request)
        return True

    model = ScriptedModel([call("send_note", {"to": "bob", "text": "hi"}), "sent"])
    run = Host(model=model, tools=weather_tools(executed),
               approver=CallbackApprover(approve)).run_sync("send it", principal="alice")
    assert executed == [{"to": "bob", "text": "hi"}]
    [request] = seen
    assert request.arguments == {"to": "bob", "text": "hi"}  # type: ignore[attr-defined]
    assert request.principal_id == "alice"  # type: ignore[attr-defined]
    assert "to = bob" in request.describe()  # type: ignore[attr-defined]
    assert run.status is RunStatus.COMPLETED


def test_an_approvers_no_is_a_denial_the_model_sees() -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([call("send_note", {"to": "bob", "text": "hi"}), "ok"])
    run = Host(model=model, tools=weather_tools(executed),
               approver=CallbackApprover(lambda r: False, name="carol")).run_sync("send it")
    [result] = results_of(run.transcript)
    assert result.content == "declined by a person (no reason given)"
    assert executed == []


def test_an_answer_for_other_arguments_is_refused() -> None:
    executed: list[dict[str, object]] = []

    def forged(request: object) -> ApprovalAnswer:
        return ApprovalAnswer(request.id, "0" * 64, True, "mallory")  # type: ignore[attr-defined]

    model = ScriptedModel([call("send_note", {"to": "bob", "text": "hi"}), "ok"])
    run = Host(model=model, tools=weather_tools(executed),
               approver=CallbackApprover(forged)).run_sync("send it")
    [result] = results_of(run.transcript)
    assert result.error_kind == "denied"
    assert executed == []


def test_a_tool_exception_is_a_short_error_result_and_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def leaky(x: str) -> str:
        """Fails."""
        raise RuntimeError("password=hunter2 at /secret/path")

    model = ScriptedModel([call("leaky", {"x": "a"}), "ok"])
    with caplog.at_level(logging.ERROR, logger="anfitrion.gate"):
        run = Host(model=model, tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.content == "leaky failed with an internal error (RuntimeError)."
    assert "hunter2" not in result.content
    # the operator's log names the error, redacted like the audit log (issue 17)
    assert "RuntimeError: password=[secret]" in caplog.text
    assert "hunter2" not in caplog.text


def test_a_tool_error_message_is_shown_to_the_model() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def picky(x: str) -> str:
        """Fails politely."""
        raise ToolError("no data for that day")

    run = Host(model=ScriptedModel([call("picky", {"x": "a"}), "ok"]), tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.content == "picky failed: no data for that day"
    assert result.error_kind == "tool_error"


def test_a_slow_tool_times_out() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, timeout=0.05)
    async def slow(x: str) -> str:
        """Never returns in time."""
        await anyio.sleep_forever()
        return x

    run = Host(model=ScriptedModel([call("slow", {"x": "a"}), "ok"]), tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.error_kind == "timeout"
    assert "timed out after 0.05 seconds" in result.content


def test_large_results_are_capped_with_a_marker() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, max_result_chars=100)
    def big(x: str) -> str:
        """Returns a lot."""
        return "y" * 1000

    run = Host(model=ScriptedModel([call("big", {"x": "a"}), "ok"]), tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.truncated
    assert result.content == "y" * 100 + "\n[truncated: showing 100 of 1000 characters]"


def test_default_cap_is_16_kib() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def big(x: str) -> list[str]:
        """Returns a lot."""
        return ["z" * 100] * 1000

    run = Host(model=ScriptedModel([call("big", {"x": "a"}), "ok"]), tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.truncated and result.content.startswith('["zzz')
    assert "showing 16384 of" in result.content


# -- the ledger: advance → claim → settle, bound to the call's digest ------------------------

SCHEMA = {"type": "object", "properties": {"payment_id": {"type": "string"}},
          "required": ["payment_id"], "additionalProperties": False}


def _refund(ran: list[dict[str, Any]]) -> Tool:
    def handler(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        return f"refunded {arguments['payment_id']}"
    return Tool.from_schema("refund", SCHEMA, handler, effect=Effect.WRITE)


class _Ledgered(MemoryStore):
    """The in-memory store, keeping the order of the gate's writes to the execution ledger."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    async def advance_execution(self, session_id: str, call_id: str, state: LedgerState,
                                digest: str) -> None:
        self.writes.append(f"advance {state.value}")
        await super().advance_execution(session_id, call_id, state, digest)

    async def claim_execution(self, session_id: str, call_id: str, digest: str,
                              **options: Any) -> Any:
        self.writes.append("claim")
        return await super().claim_execution(session_id, call_id, digest, **options)

    async def settle_execution(self, session_id: str, call_id: str, result: ToolResult,
                               token: str) -> bool:
        self.writes.append("settle")
        return await super().settle_execution(session_id, call_id, result, token)


class _Answers:
    """An approver answering every request with *answer(request)*, keeping what it was asked."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        self.asked.append(request)
        return self.answer(request)  # type: ignore[no-any-return]


def _policy(verdict: str) -> Policy:
    return Policy([lambda c, ctx: getattr(Decision, verdict)("the test says so", verdict)])


async def _propose(gate: Gate, tool: Tool, arguments: str = '{"payment_id": "p1"}') -> Any:
    return await gate.process(ToolCall.from_raw("c1", tool.name, arguments), {tool.name: tool},
                              gate_session("alice", "s1", turn=1))


@pytest.mark.anyio
@pytest.mark.parametrize(("verdict", "approver", "writes"), [
    ("allow", DenyAllApprover(), ["claim", "settle"]),  # the claim is its first ledger write
    ("ask", _Answers(lambda r: ApprovalAnswer.to(r, True, "ops")),
     ["advance decided", "claim", "settle"]),
    ("deny", DenyAllApprover(), ["advance decided"]),
    ("ask", _Answers(lambda r: ApprovalAnswer.to(r, False, "ops")), ["advance decided"]),
])
async def test_a_write_reaches_the_ledger_in_the_order_advance_claim_settle(
        verdict: str, approver: Any, writes: list[str]) -> None:
    store, ran = _Ledgered(), []
    gate = Gate(policy=_policy(verdict), approver=approver, store=store, emit=_silent)
    outcome = await _propose(gate, _refund(ran))
    assert store.writes == writes
    entry = await store.execution_state("s1", "c1")
    assert entry is not None
    assert entry.state is (LedgerState.DONE if "settle" in writes else LedgerState.DECIDED)
    assert (ran == [{"payment_id": "p1"}]) is ("settle" in writes)
    assert outcome.result is not None and outcome.result.is_error is ("settle" not in writes)


@pytest.mark.anyio
async def test_a_read_keeps_no_ledger() -> None:
    store, ran = _Ledgered(), []
    tool = Tool.from_schema("lookup", SCHEMA, lambda a: ran.append(a) or "found",
                            effect=Effect.READ)
    gate = Gate(policy=_policy("allow"), approver=DenyAllApprover(), store=store, emit=_silent)
    outcome = await _propose(gate, tool)
    assert outcome.result is not None and outcome.result.content == "found"
    assert store.writes == [] and await store.execution_state("s1", "c1") is None


@pytest.mark.anyio
async def test_the_ledger_helper_opens_without_writing_and_settles_only_under_its_claim() -> None:
    store, tool = MemoryStore(), _refund([])
    rec = GatedCall(ToolCall.from_raw("c1", "refund", '{"payment_id": "p1"}'),
                    gate_session("alice", "s1", turn=1), {"refund": tool}, None)
    rec.tool, rec.write, rec.parsed = tool, True, {"payment_id": "p1"}
    ledger = CallLedger(store)
    ledger.open(rec)
    assert len(rec.digest) == 64 and rec.effect is not None
    assert await store.execution_state("s1", "c1") is None  # opening writes nothing
    assert not await ledger.ran_before(rec) and not await ledger.approved_before(rec)
    claim = await ledger.claim(rec, None)
    assert claim.state is ClaimState.CLAIMED and claim.token is not None
    assert await ledger.ran_before(rec)
    result = ToolResult("c1", "refund", "refunded p1")
    with pytest.raises(ConflictError, match="taken over by another run"):
        await ledger.settle(rec, result, "not-the-token")
    await ledger.settle(rec, result, claim.token)
    entry = await store.execution_state("s1", "c1")
    assert entry is not None and entry.state is LedgerState.DONE and entry.digest == rec.digest


# -- an approver's edit is a new proposal through every stage ---------------------------------

@pytest.mark.anyio
async def test_an_edit_approved_with_its_making_goes_through_the_stages_again_and_runs_once(
) -> None:
    events: list[HostEvent] = []
    ran: list[dict[str, Any]] = []
    approver = _Answers(lambda r: ApprovalAnswer.edit(r, {"payment_id": "p2"}, "ops",
                                                      approve=True))
    gate = Gate(policy=_policy("ask"), approver=approver, store=MemoryStore(),
                emit=events.append)
    outcome = await _propose(gate, _refund(ran))
    assert ran == [{"payment_id": "p2"}]
    assert outcome.result is not None and outcome.result.content.startswith(
        '[a person edited the arguments to {"payment_id":"p2"}]')
    proposed = [e.detail for e in events if e.type is EventType.CALL_PROPOSED]
    assert proposed == [None, "an approver's edit"]
    decided = [e for e in events if e.type is EventType.CALL_DECIDED]
    assert [e.arguments for e in decided] == [{"payment_id": "p1"}, {"payment_id": "p2"}]
    # the edit raised its own request, approved by the approval given with it: not asked again
    requests = [e.request for e in events if e.type is EventType.APPROVAL_REQUESTED]
    assert len(requests) == 2 and requests[1] is not None
    assert requests[1].edit_of == requests[0].id  # type: ignore[union-attr]
    assert len(approver.asked) == 1


@pytest.mark.anyio
async def test_an_approver_who_only_edits_is_refused_after_the_bound_and_nothing_runs() -> None:
    events: list[HostEvent] = []
    ran: list[dict[str, Any]] = []
    approver = _Answers(lambda r: ApprovalAnswer.edit(
        r, {"payment_id": f"p{len(approver.asked)}"}, "ops"))
    policy = _policy("ask")
    gate = Gate(policy=policy, approver=approver, store=MemoryStore(), emit=events.append)
    outcome = await _propose(gate, _refund(ran))
    assert ran == []
    assert outcome.result is not None and outcome.result.error_kind == "denied"
    assert "edited too many times" in outcome.result.content
    proposed = [e for e in events if e.type is EventType.CALL_PROPOSED]
    assert len(proposed) == policy.approvals.max_edits + 1
