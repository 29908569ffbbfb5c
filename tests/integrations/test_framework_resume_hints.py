"""A framework's session names the framework's own way to continue (#36 item 6): each
integration tags its sessions (``anfitrion:<framework>``), and the CLI's hints — after
`approvals approve`, in `sessions show`, from `resume` — say `deferred_tool_results`,
`apply_answers`, `Command(resume=...)`, not `host.resume(...)`. Runs offline (each framework's
test model) on a SQLite file, the CLI as a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anfitrion import DeferredApprover, Runtime
from anfitrion._apps import FRAMEWORK_RESUMES

from .fakes import THREAD, calls

pytestmark = pytest.mark.anyio
ANFITRION = [sys.executable, "-c", "from anfitrion._cli.main import main; main()"]
ROOT = Path(__file__).resolve().parents[2]


def anfitrion(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*ANFITRION, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env=os.environ.copy())
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def _the_cli_names(url: str, session_id: str, request_id: str, *words: str) -> None:
    """`sessions show`, `approvals approve` and `resume` all name the framework's way."""
    shown = anfitrion("sessions", "show", session_id, "--store", url).stdout
    approved = anfitrion("approvals", "approve", request_id, "--store", url, "--as", "bob").stdout
    resumed = anfitrion("resume", session_id, "--store", url, check=False)
    assert resumed.returncode != 0 and "Traceback" not in resumed.stderr
    for text in (shown, approved, resumed.stderr):
        assert "host.resume" not in text and "--app module:attr" not in text, text
        for word in words:
            assert word in text, (word, text)


async def test_a_pydantic_ai_session_is_continued_with_deferred_tool_results(
        tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.tools import DeferredToolRequests
    from pydantic_ai.toolsets import FunctionToolset

    from anfitrion.integrations.pydantic_ai import REQUEST_ID, GatedToolset

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("send_mail", {"to": "ana@example.org"},
                                                     tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool_plain
    def send_mail(to: str) -> str:
        """Send an e-mail."""
        return f"sent to {to}"

    url = f"sqlite:///{tmp_path / 'agent.db'}"
    runtime = Runtime(approver=DeferredApprover(), store=url)
    session = await runtime.open("alice")
    gated = GatedToolset(tools, session=session)
    agent = Agent(FunctionModel(respond), toolsets=[gated],
                  output_type=[str, DeferredToolRequests])
    first = await agent.run("Mail Ana")
    assert isinstance(first.output, DeferredToolRequests)
    request_id = first.output.metadata["c1"][REQUEST_ID]
    await session.suspend()
    await runtime.store.close()
    _the_cli_names(url, session.id, request_id, "Pydantic AI", "deferred_tool_results",
                   "docs/integrations/pydantic-ai.md")


async def test_an_openai_agents_session_is_continued_with_apply_answers(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from anfitrion.integrations.openai_agents import AgentsGate

    @function_tool
    def send_mail(to: str) -> str:
        """Send an e-mail."""
        return f"sent to {to}"

    url = f"sqlite:///{tmp_path / 'agent.db'}"
    runtime = Runtime(approver=DeferredApprover(), store=url)
    session = await runtime.open("alice")
    gate = AgentsGate(session)
    agent = Agent(name="assistant", instructions="Help.", tools=gate.tools([send_mail]),
                  model=ScriptedModel([[function_call("send_mail", {"to": "ana@example.org"},
                                                      call_id="c1")],
                                       [assistant_message("done")]]))
    result = await Runner.run(agent, "Mail Ana", run_config=RunConfig(tracing_disabled=True))
    assert result.interruptions
    request_id = session.pending["c1"]
    await session.suspend()
    await runtime.store.close()
    _the_cli_names(url, session.id, request_id, "OpenAI Agents SDK", "apply_answers",
                   "docs/integrations/openai-agents.md")


async def test_a_langgraph_session_is_continued_with_command_resume(
        tmp_path: Path, lc_tools: list[Any]) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from anfitrion.integrations.langgraph import ToolGate, gated_tools

    url = f"sqlite:///{tmp_path / 'agent.db'}"
    runtime = Runtime(gated_tools(lc_tools), approver=DeferredApprover(), store=url)
    replies = [calls(("send_mail", {"to": "ana@example.org", "body": "hi"}, "c1"))]

    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [replies[0]]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolGate(runtime).tool_node(lc_tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, ["tools", END])
    builder.add_edge("tools", "model")
    graph = builder.compile(checkpointer=InMemorySaver())
    result = await graph.ainvoke({"messages": [("user", "Mail Ana")]}, THREAD)
    value = result["__interrupt__"][0].value
    await runtime.store.close()
    _the_cli_names(url, value["session_id"], value["request_id"], "LangGraph",
                   "Command(resume=", "docs/integrations/langchain.md")


async def test_a_session_whose_app_was_set_keeps_it() -> None:
    """The tag is a default: a runtime's own app (`anfitrion resume --app`) stays."""
    pytest.importorskip("agents")
    from anfitrion.integrations.openai_agents import AgentsGate

    runtime = Runtime(approver=DeferredApprover(), app="myapp:host")
    session = await runtime.open("alice")
    AgentsGate(session)
    assert session.session.app == "myapp:host"
    plain = await runtime.open("bob", app=None)
    assert plain.session.app == "myapp:host"


def test_each_hint_says_what_its_integration_page_says() -> None:
    for app, hint in FRAMEWORK_RESUMES.items():
        page = re.search(r"docs/integrations/[\w.-]+\.md", hint)
        assert page is not None, app
        text = (ROOT / page.group(0)).read_text(encoding="utf-8")
        for code in re.findall(r"`([^`]+)`", hint):
            key = re.split(r"[(=]", code.replace("await ", ""), maxsplit=1)[0].split(".")[-1]
            assert key.strip() in text, (app, code)


async def test_the_claude_agent_sdk_gate_tags_its_session() -> None:
    pytest.importorskip("claude_agent_sdk")
    from anfitrion.integrations.claude_agent_sdk import ClaudeGate

    runtime = Runtime(approver=DeferredApprover())
    session = await runtime.open("alice")
    ClaudeGate(session, schemas={"send_mail": None})
    assert session.session.app in FRAMEWORK_RESUMES
    assert "same tool use id" in FRAMEWORK_RESUMES[str(session.session.app)]
