"""Names of the apps a session can belong to (who may resume it), shared by the doors."""

from __future__ import annotations

__all__ = ["DEMO_APP", "FRAMEWORK_RESUMES", "GATEWAY_APP", "framework_app"]

DEMO_APP = "anfitrion:demo"
"""Sessions of ``anfitrion demo``: ``anfitrion resume`` continues them with the demo's parts."""
GATEWAY_APP = "anfitrion:gateway"
"""Sessions of the MCP gateway: its client continues them by calling again."""

FRAMEWORK_RESUMES: dict[str, str] = {
    "anfitrion:pydantic-ai": (
        "Pydantic AI: in the application, `results = await gated.results(requests)`, then "
        "`agent.run(message_history=..., deferred_tool_results=results)` "
        "(docs/integrations/pydantic-ai.md)"),
    "anfitrion:openai-agents": (
        "OpenAI Agents SDK: in the application, `await gate.apply_answers(state)`, then "
        "`Runner.run(agent, state)` (docs/integrations/openai-agents.md)"),
    "anfitrion:langgraph": (
        "LangGraph / LangChain: resume the thread with `Command(resume=\"answered\")` and the "
        "same config (thread_id); the gate finds the answer (docs/integrations/langchain.md)"),
    "anfitrion:langchain": (
        "LangChain: resume the thread with `Command(resume=\"answered\")` and the same config "
        "(thread_id); the gate finds the answer (docs/integrations/langchain.md)"),
    "anfitrion:claude-agent-sdk": (
        "Claude Agent SDK: run the same call again (same tool use id, same input); the gate "
        "allows it now (docs/integrations/claude-agent-sdk.md)"),
}
"""Sessions of a framework integration, tagged by the integration: how each continues. Only its
own application can: ``anfitrion resume`` cannot run a framework's agent."""


def framework_app(via: str) -> str:
    """The app an integration tags its sessions with (``anfitrion:pydantic-ai``)."""
    return f"anfitrion:{via}"
