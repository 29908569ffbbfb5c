"""Agent frameworks behind the gate: each module wraps one framework's tools and approvals.

``langchain`` and ``langgraph`` (extra ``langgraph``), ``pydantic_ai`` (extra ``pydantic-ai``),
``openai_agents`` (extra ``openai-agents``), ``claude_agent_sdk`` (extra ``claude-agent-sdk``).
Each module imports its framework itself; importing this package imports none of them.
"""

__all__: list[str] = []
