"""anfitrion — the host for tool-calling language models.

The model proposes; the host disposes. Every proposed tool call passes one gate: resolve,
validate, decide, approve, execute, shape — and every stage is audited.
"""

from __future__ import annotations

from ._home import default_store_url
from .approvals import (
    ApprovalAnswer,
    ApprovalRequest,
    Approver,
    CallbackApprover,
    DeferredApprover,
    DenyAllApprover,
    TerminalApprover,
)
from .conversation import (
    Provenance,
    Reply,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
    Transcript,
    Usage,
    UserMessage,
)
from .events import EventType, HostEvent
from .exceptions import (
    AdapterError,
    AnfitrionError,
    ConfigError,
    ConflictError,
    ModelError,
    RunError,
    SessionNotFound,
    StoreError,
    ToolDefinitionError,
    ToolError,
    ToolNotExecuted,
    UserError,
)
from .gate import GateLimits
from .host import Host, RunResult, RunStatus, StopSignal
from .models import Model, ModelRequest, ScriptedModel
from .policy import Decision, Policy, PolicyContext, Verdict, load_policy
from .principal import Principal
from .runtime import GatedSession, Runtime, Submission, SubmissionStatus
from .session import Session
from .tools import Effect, Tool, Toolbox, ToolContext

__all__ = [
    "AdapterError",
    "AnfitrionError",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "CallbackApprover",
    "ConfigError",
    "ConflictError",
    "Decision",
    "DeferredApprover",
    "DenyAllApprover",
    "Effect",
    "EventType",
    "GateLimits",
    "GatedSession",
    "Host",
    "HostEvent",
    "Model",
    "ModelError",
    "ModelRequest",
    "Policy",
    "PolicyContext",
    "Principal",
    "Provenance",
    "Reply",
    "RunError",
    "RunResult",
    "RunStatus",
    "Runtime",
    "ScriptedModel",
    "Session",
    "SessionNotFound",
    "StopReason",
    "StopSignal",
    "StoreError",
    "Submission",
    "SubmissionStatus",
    "TerminalApprover",
    "Text",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolNotExecuted",
    "ToolResult",
    "Toolbox",
    "Transcript",
    "Usage",
    "UserError",
    "UserMessage",
    "Verdict",
    "__version__",
    "default_store_url",
    "load_policy",
]

__version__ = "0.1.0"
