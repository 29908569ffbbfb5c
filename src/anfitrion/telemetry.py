"""OpenTelemetry traces and metrics for every run, model request and tool call (extra ``otel``).

:func:`instrument` attaches a listener to a host. Spans follow the OpenTelemetry GenAI semantic
conventions: ``invoke_agent`` per run, ``chat {model}`` per model request, ``execute_tool
{tool}`` per tool call, with the gate's stages as span events (``anfitrion.call.decided`` with
the rule id, ``anfitrion.approval.requested`` / ``answered`` with the wait, ledger states).
Content (arguments, results, prompts) is *off* by default; when enabled it passes through the
audit log's redaction.

Nothing here runs unless :func:`instrument` is called: a host that is not instrumented pays
nothing, and an instrumented host with no SDK configured uses the API's no-op providers.

Example:
    >>> from anfitrion import Host, ScriptedModel
    >>> from anfitrion.telemetry import instrument
    >>> host = Host(model=ScriptedModel(["hi"]))
    >>> instrument(host)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ._canonical import canonical_json
from ._events import EventType, HostEvent
from ._redaction import redact
from .exceptions import MissingDependencyError

if TYPE_CHECKING:
    from ._host import Host

__all__ = ["HostTelemetry", "extracted_context", "instrument", "trace_headers", "trace_meta"]

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover - exercised by the bare-install import test
    trace = None  # type: ignore[assignment]

INSTRUMENTATION = "anfitrion"
CONTENT_CHARS = 1000


def _require() -> None:
    if trace is None:  # pragma: no cover - the extra is installed in the test environment
        raise MissingDependencyError("otel", "opentelemetry-api")


def trace_headers() -> dict[str, str]:
    """W3C trace-context headers for the current span (for MCP over HTTP and the gateway)."""
    _require()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def trace_meta() -> dict[str, str] | None:
    """The current trace context for an MCP request's ``params._meta`` (``traceparent``,
    ``tracestate``), or ``None`` — also when the ``otel`` extra is not installed."""
    if trace is None:  # pragma: no cover - the extra is installed in the test environment
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


@contextmanager
def extracted_context(meta: Mapping[str, Any] | None) -> Iterator[None]:
    """Continue the trace an incoming MCP request carried in its ``_meta``, if any."""
    if trace is None or not meta or "traceparent" not in meta:
        yield
        return
    carrier = {k: str(v) for k, v in meta.items() if k in ("traceparent", "tracestate")}
    token = otel_context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


@dataclass
class _SessionSpans:
    run: Any = None
    run_token: object | None = None
    chat: Any = None
    tools: dict[str, tuple[Any, object]] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    asked: dict[str, float] = field(default_factory=dict)


class HostTelemetry:
    """The listener :func:`instrument` attaches; holds the open spans of each session."""

    kinds = frozenset({
        EventType.RUN_STARTED, EventType.RUN_RESUMED, EventType.RUN_ENDED,
        EventType.MODEL_REQUESTED, EventType.MODEL_REPLIED, EventType.CALL_PROPOSED,
        EventType.CALL_REJECTED, EventType.CALL_DECIDED, EventType.CALL_SHADOW_DECIDED,
        EventType.APPROVAL_REQUESTED, EventType.APPROVAL_ANSWERED,
        EventType.EXECUTION_CLAIMED, EventType.EXECUTION_SETTLED, EventType.RESULT_RETURNED})
    """The kinds it makes spans, span events or metrics of: the host builds no other event
    for it (see :data:`~anfitrion._events.Listener`)."""

    def __init__(self, *, model_name: str, provider: str | None, agent_name: str,
                 tracer_provider: Any = None, meter_provider: Any = None,
                 capture_content: bool = False) -> None:
        _require()
        self._tracer = trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
        self._model = model_name
        self._provider = provider
        self._agent = agent_name
        self._capture = capture_content
        self._sessions: dict[str, _SessionSpans] = {}
        self.tool_calls = meter.create_counter(
            "anfitrion.tool.calls", unit="{call}", description="Tool calls by tool and decision")
        self.approvals = meter.create_counter(
            "anfitrion.approvals", unit="{approval}",
            description="Approvals asked, approved, denied and expired")
        self.approval_wait = meter.create_histogram(
            "anfitrion.approval.wait", unit="s", description="Time a call waited for a person")
        self.tool_duration = meter.create_histogram(
            "gen_ai.execute_tool.duration", unit="s", description="Tool execution duration")
        self.shadow_decisions = meter.create_counter(
            "anfitrion.shadow.decisions", unit="{call}",
            description="Shadow policy decisions by tool, enforced and shadow verdict")
        self.runs = meter.create_counter(
            "anfitrion.runs", unit="{run}", description="Runs by final status")
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens per model request")

    def _content(self, value: Any) -> str:
        text = value if isinstance(value, str) else canonical_json(value)
        return redact(text, CONTENT_CHARS)

    def _base(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"gen_ai.request.model": self._model}
        if self._provider:
            attrs["gen_ai.provider.name"] = self._provider
        return attrs

    def _start(self, name: str, parent: Any, attributes: Mapping[str, Any],
               kind: Any = None) -> Any:
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(name, context=ctx, kind=kind or SpanKind.INTERNAL,
                                       attributes=dict(attributes))

    def __call__(self, event: HostEvent) -> None:
        spans = self._sessions.setdefault(event.session_id, _SessionSpans())
        on_event = self._ON_EVENT.get(event.type)
        if on_event is not None:
            on_event(self, spans, event)

    # -- one method per event type (_ON_EVENT, below) -----------------------------------------

    def _run_started(self, spans: _SessionSpans, event: HostEvent) -> None:
        attrs = {**self._base(), "gen_ai.operation.name": "invoke_agent",
                 "gen_ai.agent.name": self._agent, "gen_ai.conversation.id": event.session_id,
                 "anfitrion.resumed": event.type is EventType.RUN_RESUMED}
        if event.principal_id:
            attrs["anfitrion.principal"] = redact(event.principal_id, 120)
        spans.run = self._start(f"invoke_agent {self._agent}", None, attrs)
        spans.run_token = otel_context.attach(trace.set_span_in_context(spans.run))

    def _model_requested(self, spans: _SessionSpans, event: HostEvent) -> None:
        spans.chat = self._start(f"chat {self._model}", spans.run,
                                 {**self._base(), "gen_ai.operation.name": "chat"},
                                 SpanKind.CLIENT)

    def _model_replied(self, spans: _SessionSpans, event: HostEvent) -> None:
        if spans.chat is None or event.reply is None:
            return
        usage = event.reply.usage
        spans.chat.set_attributes({
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.response.finish_reasons": [event.reply.stop_reason.value],
        })
        if self._capture and event.reply.text:
            spans.chat.set_attribute("anfitrion.reply.text", self._content(event.reply.text))
        spans.chat.end()
        spans.chat = None
        for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            self.tokens.record(count, {**self._base(), "gen_ai.token.type": kind,
                                       "gen_ai.operation.name": "chat"})

    def _call_proposed(self, spans: _SessionSpans, event: HostEvent) -> None:
        if event.call_id is None:
            return
        attrs = {**self._base(), "gen_ai.operation.name": "execute_tool",
                 "gen_ai.tool.name": event.tool or "", "gen_ai.tool.call.id": event.call_id,
                 "gen_ai.tool.type": "function"}
        if self._capture and event.call is not None:
            attrs["gen_ai.tool.call.arguments"] = self._content(event.call.raw_arguments)
        span = self._start(f"execute_tool {event.tool}", spans.run, attrs)
        token = otel_context.attach(trace.set_span_in_context(span))
        spans.tools[event.call_id] = (span, token)
        spans.started[event.call_id] = event.at

    def _call_rejected(self, spans: _SessionSpans, event: HostEvent) -> None:
        self._tool_event(spans, event, "anfitrion.call.rejected",
                         {"anfitrion.detail": redact(event.detail or "")})
        self.tool_calls.add(1, {"gen_ai.tool.name": event.tool or "",
                                "anfitrion.decision": "rejected"})

    def _call_decided(self, spans: _SessionSpans, event: HostEvent) -> None:
        d = event.decision
        if d is None:
            return
        self._tool_event(spans, event, "anfitrion.call.decided",
                         {"anfitrion.decision": d.verdict.value,
                          "anfitrion.rule_id": d.rule_id,
                          "anfitrion.policy.sha256": event.policy_sha256 or ""})
        self.tool_calls.add(1, {"gen_ai.tool.name": event.tool or "",
                                "anfitrion.decision": d.verdict.value})
        spans.started[event.call_id or ""] = event.at

    def _call_shadow_decided(self, spans: _SessionSpans, event: HostEvent) -> None:
        shadow = event.decision.verdict.value if event.decision is not None else "error"
        enforced = event.enforced.verdict.value if event.enforced is not None else ""
        self._tool_event(spans, event, "anfitrion.call.shadow_decided",
                         {"anfitrion.shadow.decision": shadow,
                          "anfitrion.shadow.rule_id": event.decision.rule_id
                          if event.decision is not None else "",
                          "anfitrion.shadow.policy.sha256": event.policy_sha256 or "",
                          "anfitrion.decision": enforced})
        self.shadow_decisions.add(1, {"gen_ai.tool.name": event.tool or "",
                                      "anfitrion.decision": enforced,
                                      "anfitrion.shadow.decision": shadow,
                                      "anfitrion.shadow.agrees": shadow == enforced})

    def _approval_requested(self, spans: _SessionSpans, event: HostEvent) -> None:
        spans.asked[event.call_id or ""] = event.at
        self.approvals.add(1, {"anfitrion.approval.state": "asked"})
        self._tool_event(spans, event, "anfitrion.approval.requested", {})

    def _approval_answered(self, spans: _SessionSpans, event: HostEvent) -> None:
        answer = event.answer
        if answer is None:
            return
        wait = answer.at.timestamp() - (event.request.created_at.timestamp()
                                        if event.request else event.at)
        state = "approved" if answer.approved else "denied"
        if event.request is not None and event.request.expired(answer.at):
            state = "expired"
        self.approvals.add(1, {"anfitrion.approval.state": state})
        self.approval_wait.record(max(wait, 0.0), {"gen_ai.tool.name": event.tool or ""})
        self._tool_event(spans, event, "anfitrion.approval.answered",
                         {"anfitrion.approval.state": state,
                          "anfitrion.approval.wait_s": max(wait, 0.0)})
        spans.started[event.call_id or ""] = time.time()

    def _execution(self, spans: _SessionSpans, event: HostEvent) -> None:
        # the state says duplicate / unknown / claimed_repeat / resolved_… for effects
        self._tool_event(spans, event, f"anfitrion.{event.type.value}",
                         {"anfitrion.ledger.state": event.status or ""}
                         | ({"anfitrion.effect.key": event.effect_key}
                            if event.effect_key else {}))

    def _result_returned(self, spans: _SessionSpans, event: HostEvent) -> None:
        if event.result is not None:
            self._end_tool(spans, event)

    def _run_ended(self, spans: _SessionSpans, event: HostEvent) -> None:
        self._end_run(spans, event)
        del self._sessions[event.session_id]

    _ON_EVENT: ClassVar[dict[EventType, Callable[[HostTelemetry, _SessionSpans, HostEvent],
                                                 None]]] = {
        EventType.RUN_STARTED: _run_started,
        EventType.RUN_RESUMED: _run_started,
        EventType.MODEL_REQUESTED: _model_requested,
        EventType.MODEL_REPLIED: _model_replied,
        EventType.CALL_PROPOSED: _call_proposed,
        EventType.CALL_REJECTED: _call_rejected,
        EventType.CALL_DECIDED: _call_decided,
        EventType.CALL_SHADOW_DECIDED: _call_shadow_decided,
        EventType.APPROVAL_REQUESTED: _approval_requested,
        EventType.APPROVAL_ANSWERED: _approval_answered,
        EventType.EXECUTION_CLAIMED: _execution,
        EventType.EXECUTION_SETTLED: _execution,
        EventType.RESULT_RETURNED: _result_returned,
        EventType.RUN_ENDED: _run_ended,
    }
    """What each event type does; the types not listed only open the session's record."""

    def _tool_event(self, spans: _SessionSpans, event: HostEvent, name: str,
                    attributes: Mapping[str, Any]) -> None:
        entry = spans.tools.get(event.call_id or "")
        if entry is not None:
            entry[0].add_event(name, dict(attributes))

    def _end_tool(self, spans: _SessionSpans, event: HostEvent) -> None:
        entry = spans.tools.pop(event.call_id or "", None)
        if entry is None or event.result is None:
            return
        span, token = entry
        result = event.result
        span.set_attributes({"anfitrion.result.chars": len(result.content),
                             "anfitrion.result.provenance": result.provenance.value,
                             "anfitrion.result.truncated": result.truncated,
                             "anfitrion.stage": event.status or ""})
        if self._capture:
            span.set_attribute("gen_ai.tool.call.result", self._content(result.content))
        if result.is_error:
            span.set_attribute("error.type", result.error_kind or "tool_error")
            span.set_status(Status(StatusCode.ERROR, result.error_kind or "tool_error"))
        if event.status == "execute":
            started = spans.started.pop(event.call_id or "", event.at)
            self.tool_duration.record(max(event.at - started, 0.0),
                                      {"gen_ai.tool.name": result.name,
                                       **({"error.type": result.error_kind}
                                          if result.is_error else {})})
        span.end()
        otel_context.detach(token)  # type: ignore[arg-type]

    def _end_run(self, spans: _SessionSpans, event: HostEvent) -> None:
        for call_id in list(spans.tools)[::-1]:  # still waiting for a person
            span, token = spans.tools.pop(call_id)
            span.add_event("anfitrion.approval.pending", {})
            span.end()
            otel_context.detach(token)  # type: ignore[arg-type]
        if spans.chat is not None:
            spans.chat.end()
        status = event.status or "unknown"
        self.runs.add(1, {"anfitrion.run.status": status})
        if spans.run is not None:
            spans.run.set_attribute("anfitrion.run.status", status)
            if status == "failed":
                spans.run.set_attribute("error.type", "run_failed")
                spans.run.set_status(Status(StatusCode.ERROR, redact(event.detail or "")))
            spans.run.end()
        if spans.run_token is not None:
            otel_context.detach(spans.run_token)  # type: ignore[arg-type]


def instrument(host: Host, *, tracer_provider: Any = None, meter_provider: Any = None,
               capture_content: bool = False, agent_name: str = "anfitrion") -> HostTelemetry:
    """Trace and measure *host*'s runs. Providers default to the global ones.

    Raises:
        MissingDependencyError: the ``otel`` extra is not installed.
    """
    _require()
    telemetry = HostTelemetry(model_name=host.model.name,
                              provider=getattr(host.model, "provider", None),
                              agent_name=agent_name, tracer_provider=tracer_provider,
                              meter_provider=meter_provider, capture_content=capture_content)
    host.add_listener(telemetry)
    return telemetry
