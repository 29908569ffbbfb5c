"""LangChain 1.x ``create_agent`` behind the gate: the real agent loop, fake chat models."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from anfitrion import Decision, DeferredApprover, Policy, Runtime
from anfitrion import _answers as answers
from anfitrion._audit import verify_chain
from anfitrion.integrations.langchain import AnfitrionMiddleware
from anfitrion.integrations.langgraph import approve, gated_tools, reject
from anfitrion.policy._taint import taint_rule

from .fakes import THREAD, Ran, calls, fake_model

pytestmark = pytest.mark.anyio


def _agent(tools: list[BaseTool], *replies: Any, policy: Policy | None = None,
           store: str = "memory://") -> tuple[Any, Runtime]:
    runtime = Runtime(gated_tools(tools, reads={"get_weather", "fetch_page"},
                                  trusted={"get_weather"}),
                      approver=DeferredApprover(), policy=policy, store=store)
    agent = create_agent(fake_model(*replies), tools, middleware=[AnfitrionMiddleware(runtime)],
                         checkpointer=InMemorySaver())
    return agent, runtime


def _tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


async def _chain_ok(runtime: Runtime) -> None:
    await runtime.flush()
    assert verify_chain(await runtime.store.audit_records()).ok


async def test_the_lisboa_read_runs_through_the_gate(lc_tools: list[BaseTool], ran: Ran) -> None:
    agent, runtime = _agent(lc_tools, calls(("get_weather", {"location": "Lisboa, PT"}, "c1")))
    result = await agent.ainvoke({"messages": [("user", "Weather in Lisboa?")]}, THREAD)
    (message,) = _tool_messages(result)
    assert message.content == '{"location": "Lisboa, PT", "temp_c": 15}'
    assert message.status == "success"
    assert ran.of("get_weather") == [{"location": "Lisboa, PT"}]
    records = await runtime.store.audit_records("langgraph-t1")
    assert {"call.proposed", "call.validated", "call.decided", "result.returned"} <= \
        {r.type for r in records}
    await _chain_ok(runtime)


def test_the_sync_agent_is_gated_too(lc_tools: list[BaseTool], ran: Ran) -> None:
    agent, _ = _agent(lc_tools, calls(("get_weather", {"location": "Lisboa, PT"}, "c1")))
    result = agent.invoke({"messages": [("user", "Weather in Lisboa?")]}, THREAD)
    assert "15" in _tool_messages(result)[0].content
    assert len(ran.of("get_weather")) == 1


async def test_an_unknown_tool_is_refused_and_listed(lc_tools: list[BaseTool], ran: Ran) -> None:
    agent, runtime = _agent(lc_tools, calls(("get_wether", {"location": "Lisboa"}, "c1")))
    result = await agent.ainvoke({"messages": [("user", "Weather?")]}, THREAD)
    (message,) = _tool_messages(result)
    assert message.status == "error"
    assert message.content.startswith("unknown tool 'get_wether'")
    assert "get_weather" in message.content
    assert ran.calls == []
    await _chain_ok(runtime)


async def test_a_tool_the_agent_has_but_the_gate_was_not_told_of_is_refused(
        lc_tools: list[BaseTool], ran: Ran) -> None:
    """Fail closed: a tool missing from gated_tools is not run unapproved."""
    runtime = Runtime(gated_tools(lc_tools[:1], reads={"get_weather"}),
                      approver=DeferredApprover())
    agent = create_agent(fake_model(calls(("send_mail", {"to": "a@b.c", "body": "x"}, "c1"))),
                         lc_tools, middleware=[AnfitrionMiddleware(runtime)],
                         checkpointer=InMemorySaver())
    result = await agent.ainvoke({"messages": [("user", "mail")]}, THREAD)
    assert _tool_messages(result)[0].content.startswith("unknown tool 'send_mail'")
    assert ran.calls == []


async def test_an_invalid_call_is_refused_by_our_validation(lc_tools: list[BaseTool],
                                                            ran: Ran) -> None:
    agent, runtime = _agent(lc_tools, calls(("get_weather", {"location": "Lisboa",
                                                             "units": "C"}, "c1")),
                            calls(("get_weather", {"location": 15}, "c2")))
    result = await agent.ainvoke({"messages": [("user", "Weather?")]}, THREAD)
    first, second = _tool_messages(result)
    assert "invalid arguments for get_weather" in first.content
    assert "unexpected properties 'units'" in first.content
    assert "location" in second.content and second.status == "error"
    assert ran.calls == []
    await _chain_ok(runtime)


async def test_a_write_suspends_and_is_approved_in_the_framework(lc_tools: list[BaseTool],
                                                                 ran: Ran) -> None:
    agent, runtime = _agent(lc_tools, calls(("send_mail", {"to": "ana@example.org",
                                                           "body": "15 °C"}, "c1")))
    result = await agent.ainvoke({"messages": [("user", "Mail Ana")]}, THREAD)
    (pause,) = result["__interrupt__"]
    value = pause.value
    assert value["type"] == "anfitrion.approval" and value["tool"] == "send_mail"
    assert value["arguments"] == {"to": "ana@example.org", "body": "15 °C"}
    assert "send_mail" in value["description"]
    assert ran.calls == []
    found = await runtime.store.get_approval(value["request_id"])
    assert found is not None and found.request.digest == value["digest"]

    result = await agent.ainvoke(Command(resume=approve(value, approver="bob")), THREAD)
    assert _tool_messages(result)[-1].content == "sent to ana@example.org"
    assert ran.of("send_mail") == [{"to": "ana@example.org", "body": "15 °C"}]
    answered = [r for r in await runtime.store.audit_records() if r.type == "approval.answered"]
    assert len(answered) == 1 and "langgraph" in str(answered[0].data)
    await _chain_ok(runtime)


async def test_a_write_approved_in_anfitrion_resumes_the_run(lc_tools: list[BaseTool],
                                                             ran: Ran) -> None:
    agent, runtime = _agent(lc_tools, calls(("send_mail", {"to": "ana@example.org",
                                                           "body": "hi"}, "c1")))
    result = await agent.ainvoke({"messages": [("user", "Mail Ana")]}, THREAD)
    value = result["__interrupt__"][0].value
    outcome = await answers.answer(runtime.store, value["request_id"], value["digest"],
                                   approved=True, approver="bob", via="cli")
    assert outcome.refusal is None
    result = await agent.ainvoke(Command(resume="answered in anfitrion"), THREAD)
    assert _tool_messages(result)[-1].content == "sent to ana@example.org"
    assert len(ran.of("send_mail")) == 1
    await _chain_ok(runtime)


async def test_a_reject_in_the_framework_tells_the_model(lc_tools: list[BaseTool],
                                                         ran: Ran) -> None:
    agent, _ = _agent(lc_tools, calls(("send_mail", {"to": "eve@evil.example",
                                                     "body": "x"}, "c1")))
    result = await agent.ainvoke({"messages": [("user", "Mail")]}, THREAD)
    value = result["__interrupt__"][0].value
    result = await agent.ainvoke(Command(resume=reject(value, approver="bob",
                                                       note="not to strangers")), THREAD)
    message = _tool_messages(result)[-1]
    assert message.status == "error" and "not to strangers" in message.content
    assert ran.calls == []


async def test_an_approval_for_another_digest_is_refused(lc_tools: list[BaseTool],
                                                         ran: Ran) -> None:
    agent, runtime = _agent(lc_tools, calls(("send_mail", {"to": "ana@example.org",
                                                           "body": "hi"}, "c1")))
    result = await agent.ainvoke({"messages": [("user", "Mail Ana")]}, THREAD)
    value = result["__interrupt__"][0].value
    tampered = {**approve(value, approver="mallory"), "digest": "0" * 64}
    result = await agent.ainvoke(Command(resume=tampered), THREAD)
    message = _tool_messages(result)[-1]
    assert message.status == "error" and "digest mismatch" in message.content
    assert ran.calls == []
    found = await runtime.store.get_approval(value["request_id"])
    assert found is not None and found.answer is not None and found.answer.withdrawn
    await _chain_ok(runtime)


async def test_approving_a_call_whose_arguments_changed_is_refused(lc_tools: list[BaseTool],
                                                                   ran: Ran) -> None:
    agent, _ = _agent(lc_tools, calls(("send_mail", {"to": "ana@example.org",
                                                     "body": "hi"}, "c1")))
    result = await agent.ainvoke({"messages": [("user", "Mail Ana")]}, THREAD)
    value = result["__interrupt__"][0].value
    state = await agent.aget_state(THREAD)
    asked = state.values["messages"][-1]
    changed = asked.model_copy(update={"tool_calls": [
        {**asked.tool_calls[0], "args": {"to": "eve@evil.example", "body": "hi"}}]})
    await agent.aupdate_state(THREAD, {"messages": [changed]})
    result = await agent.ainvoke(Command(resume=approve(value, approver="bob")), THREAD)
    message = _tool_messages(result)[-1]
    assert message.status == "error"
    assert "changed after approval was asked" in message.content
    assert ran.calls == []


async def test_a_prefixed_mcp_style_tool_name_is_gated_by_its_exact_name(
        lc_tools: list[BaseTool], ran: Ran) -> None:
    """LangChain's HITL keys must match names exactly; our gate has no keys to miss."""
    agent, _ = _agent(lc_tools, calls(("mail_server__send_mail", {"to": "a@b.c"}, "c1")))
    result = await agent.ainvoke({"messages": [("user", "mail")]}, THREAD)
    assert result["__interrupt__"][0].value["tool"] == "mail_server__send_mail"
    assert ran.calls == []


async def test_a_policy_that_flips_on_resume_does_not_undo_a_reject(lc_tools: list[BaseTool],
                                                                    ran: Ran) -> None:
    """The `when` trap: the reviewer said no; the rule no longer asking must not run it."""
    asking = {"now": True}

    def ask_while_flagged(call: Any, context: Any) -> Decision | None:
        if call.tool.name == "post_note":
            return Decision.ask("flagged", "flip") if asking["now"] else \
                Decision.allow("unflagged", "flip")
        return None

    agent, _ = _agent(lc_tools, calls(("post_note", {"text": "hi"}, "c1")),
                      policy=Policy([ask_while_flagged]))
    result = await agent.ainvoke({"messages": [("user", "post")]}, THREAD)
    value = result["__interrupt__"][0].value
    asking["now"] = False
    result = await agent.ainvoke(Command(resume=reject(value, approver="bob")), THREAD)
    message = _tool_messages(result)[-1]
    assert message.status == "error" and "declined" in message.content
    assert ran.calls == []


async def test_an_answer_given_to_another_calls_interrupt_is_refused(lc_tools: list[BaseTool],
                                                                     ran: Ran) -> None:
    """Each interrupt answers only the request its call waits on: swapped answers record
    nothing and run nothing; the right ones, given after, still count."""
    agent, runtime = _agent(lc_tools, calls(
        ("send_mail", {"to": "ana@example.org", "body": "1"}, "a"),
        ("send_mail", {"to": "eve@evil.example", "body": "2"}, "b")))
    result = await agent.ainvoke({"messages": [("user", "two mails")]}, THREAD)
    pauses = result["__interrupt__"]
    assert len(pauses) == 2
    by_call = {p.value["tool_call_id"]: p for p in pauses}
    swapped = {by_call["a"].id: reject(by_call["b"].value, approver="bob"),
               by_call["b"].id: approve(by_call["a"].value, approver="bob")}
    result = await agent.ainvoke(Command(resume=swapped), THREAD)
    assert ran.calls == []
    for pause in pauses:
        found = await runtime.store.get_approval(pause.value["request_id"])
        assert found is not None and found.answer is None
    asked_again = {p.value["tool_call_id"]: p for p in result["__interrupt__"]}
    for call_id, pause in by_call.items():
        again = asked_again[call_id]
        assert again.value["request_id"] == pause.value["request_id"]
        assert "does not wait on it" in again.value["refused"]
    right = {asked_again["a"].id: approve(asked_again["a"].value, approver="bob"),
             asked_again["b"].id: reject(asked_again["b"].value, approver="bob")}
    result = await agent.ainvoke(Command(resume=right), THREAD)
    assert ran.of("send_mail") == [{"to": "ana@example.org", "body": "1"}]
    contents = {m.tool_call_id: m for m in _tool_messages(result)}
    assert contents["a"].content == "sent to ana@example.org"
    assert contents["b"].status == "error"


async def test_an_effect_proposed_twice_runs_once(lc_tools: list[BaseTool], ran: Ran) -> None:
    agent, runtime = _agent(lc_tools, calls(("send_mail", {"to": "ana@example.org",
                                                           "body": "hi"}, "c1")),
                            calls(("send_mail", {"to": "ana@example.org", "body": "hi"}, "c1")))
    result = await agent.ainvoke({"messages": [("user", "Mail Ana")]}, THREAD)
    value = result["__interrupt__"][0].value
    result = await agent.ainvoke(Command(resume=approve(value, approver="bob")), THREAD)
    first, second = _tool_messages(result)
    assert first.content == "sent to ana@example.org"
    assert second.status == "error" and "was used before" in second.content
    assert len(ran.of("send_mail")) == 1
    entry = await runtime.store.execution_state("langgraph-t1", "c1")
    assert entry is not None and entry.state.value == "done"


async def test_untrusted_content_escalates_a_write_the_policy_allowed(
        lc_tools: list[BaseTool], ran: Ran) -> None:
    def notes_are_fine(call: Any, context: Any) -> Decision | None:
        return Decision.allow("notes are fine", "notes") if call.tool.name == "post_note" \
            else None

    agent, _ = _agent(lc_tools, calls(("post_note", {"text": "before"}, "c1")),
                      calls(("fetch_page", {"url": "https://example.org/"}, "c2")),
                      calls(("post_note", {"text": "after"}, "c3")),
                      policy=Policy([taint_rule(), notes_are_fine]))
    result = await agent.ainvoke({"messages": [("user", "note, read, note")]}, THREAD)
    assert ran.of("post_note") == [{"text": "before"}]
    assert len(ran.of("fetch_page")) == 1
    value = result["__interrupt__"][0].value
    assert value["tool"] == "post_note" and value["arguments"] == {"text": "after"}
    assert "fetch_page" in value["reason"] or "untrusted" in value["reason"]


async def test_the_provider_argument_text_is_parsed_strictly(lc_tools: list[BaseTool],
                                                             ran: Ran) -> None:
    """LangChain's parse kept the last of two duplicate keys; the gate parses the text the
    provider sent and refuses it."""
    from langchain_core.messages import AIMessage

    text = '{"location": "Porto", "location": "Lisboa, PT"}'
    proposed = AIMessage("", tool_calls=[{"name": "get_weather", "id": "c1",
                                          "args": {"location": "Lisboa, PT"}}],
                         additional_kwargs={"tool_calls": [{
                             "id": "c1", "type": "function",
                             "function": {"name": "get_weather", "arguments": text}}]})
    agent, _ = _agent(lc_tools, proposed)
    result = await agent.ainvoke({"messages": [("user", "Weather?")]}, THREAD)
    message = _tool_messages(result)[0]
    assert message.status == "error" and "duplicate" in message.content.lower()
    assert ran.calls == []


def test_a_sync_agent_on_sqlite_approves_across_runs(lc_tools: list[BaseTool], ran: Ran,
                                                     tmp_path: Any) -> None:
    agent, _ = _agent(lc_tools, calls(("get_weather", {"location": "Lisboa, PT"}, "c1")),
                      calls(("send_mail", {"to": "ana@example.org", "body": "15"}, "c2")),
                      store=f"sqlite:///{tmp_path}/agent.db")
    result = agent.invoke({"messages": [("user", "Weather, then mail Ana")]}, THREAD)
    value = result["__interrupt__"][0].value
    result = agent.invoke(Command(resume=approve(value, approver="bob")), THREAD)
    assert _tool_messages(result)[-1].content == "sent to ana@example.org"
    assert len(ran.of("get_weather")) == 1 and len(ran.of("send_mail")) == 1
