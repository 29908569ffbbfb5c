"""anfitrion — the host for tool-calling language models.

The model proposes; the host disposes. Every proposed tool call passes one gate: resolve,
validate, decide, approve, execute, shape — and every stage is audited.
"""

from __future__ import annotations

from ._answers import Refusal, answer, votes_needed
from ._approvals import (
    ApprovalAnswer,
    ApprovalRequest,
    Approver,
    CallbackApprover,
    DeferredApprover,
    DenyAllApprover,
    Quorum,
    Reviewer,
)
from ._cli.terminal import TerminalApprover
from ._conversation import (
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
from ._dataflow import Dataflow
from ._events import EventType, HostEvent
from ._gate import GateLimits
from ._home import default_store_url
from ._host import Host, RunResult, RunStatus, StopSignal
from ._logging import RedactingFilter
from ._media import MediaResult
from ._principal import Principal
from ._rollout import ReplayRefused, ReplayReport, replay
from ._runtime import GatedSession, Runtime, Submission, SubmissionStatus
from ._session import Session
from ._tools import Effect, Tool, Toolbox, ToolContext
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
from .models import Model, ModelRequest, ScriptedModel
from .policy import Decision, Policy, PolicyContext, Verdict, load_policy

__all__ = [
    "AdapterError",
    "AnfitrionError",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "CallbackApprover",
    "ConfigError",
    "ConflictError",
    "Dataflow",
    "Decision",
    "DeferredApprover",
    "DenyAllApprover",
    "Effect",
    "EventType",
    "GateLimits",
    "GatedSession",
    "Host",
    "HostEvent",
    "MediaResult",
    "Model",
    "ModelError",
    "ModelRequest",
    "Policy",
    "PolicyContext",
    "Principal",
    "Provenance",
    "Quorum",
    "RedactingFilter",
    "Refusal",
    "ReplayRefused",
    "ReplayReport",
    "Reply",
    "Reviewer",
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
    "answer",
    "default_store_url",
    "load_policy",
    "replay",
    "votes_needed",
]

__version__ = "0.1.0"
