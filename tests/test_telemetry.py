"""OpenTelemetry: the span tree, GenAI attribute names, metrics, redaction and the no-op path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra and the SDK")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from anfitrion import CallbackApprover, Effect, Host, Policy, RunStatus, ScriptedModel, Toolbox
from anfitrion._demo import SCENES, demo_toolbox
from anfitrion.models._demo_script import demo_model
from anfitrion.telemetry import instrument, trace_headers
from anfitrion.testing import call

SECRET = "sk-live-0123456789abcdefghijklmnop"


@pytest.fixture
def otel() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader, dict[str, Any]]]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield exporter, reader, {"tracer_provider": tracer_provider,
                             "meter_provider": meter_provider}
    meter_provider.shutdown()
    tracer_provider.shutdown()


def tree(spans: tuple[ReadableSpan, ...]) -> list[str]:
    by_id = {s.context.span_id: s for s in spans}

    def depth(span: ReadableSpan) -> int:
        d = 0
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            d += 1
        return d

    ordered = sorted(spans, key=lambda s: s.start_time or 0)
    return ["  " * depth(s) + s.name for s in ordered]


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out[metric.name] = list(metric.data.data_points)
    return out


def test_the_demo_produces_the_documented_span_tree(otel: Any) -> None:
    exporter, reader, providers = otel
    host = Host(model=demo_model(), tools=demo_toolbox(), max_turns=4)
    instrument(host, **providers)
    session = None
    for _, prompt in SCENES[:3]:
        session = host.run_sync(prompt, principal="demo-user", session_id=session).session_id
    assert tree(exporter.get_finished_spans()) == [
        "invoke_agent anfitrion",
        "  chat scripted-demo",
        "  execute_tool get_weather",
        "  chat scripted-demo",
        "invoke_agent anfitrion",
        "  chat scripted-demo",
        "  execute_tool delete_file",
        "  chat scripted-demo",
        "invoke_agent anfitrion",
        "  chat scripted-demo",
        "  execute_tool get_weather",
        "  chat scripted-demo",
        "  execute_tool get_weather",
        "  chat scripted-demo",
    ]
    spans = exporter.get_finished_spans()
    tool = next(s for s in spans if s.name == "execute_tool get_weather")
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "get_weather"
    assert str(tool.attributes["gen_ai.tool.call.id"]).startswith("call_")
    assert tool.attributes["gen_ai.request.model"] == "scripted-demo"
    decided = [e for e in tool.events if e.name == "anfitrion.call.decided"]
    assert decided[0].attributes == {"anfitrion.decision": "allow",
                                     "anfitrion.rule_id": "default.read",
                                     "anfitrion.policy.sha256": host.policy.sha256}
    unknown = next(s for s in spans if s.name == "execute_tool delete_file")
    assert unknown.attributes is not None
    assert unknown.attributes["error.type"] == "unknown_tool"
    chat = next(s for s in spans if s.name.startswith("chat"))
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert "gen_ai.usage.input_tokens" in chat.attributes
    run = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert run.attributes is not None
    assert run.attributes["anfitrion.run.status"] == "completed"
    assert run.attributes["gen_ai.conversation.id"] == session

    points = metric_points(reader)
    calls = {(p.attributes["gen_ai.tool.name"], p.attributes["anfitrion.decision"]): p.value
             for p in points["anfitrion.tool.calls"]}
    assert calls == {("get_weather", "allow"): 2, ("get_weather", "rejected"): 1,
                     ("delete_file", "rejected"): 1}
    runs = {p.attributes["anfitrion.run.status"]: p.value for p in points["anfitrion.runs"]}
    assert runs == {"completed": 3}
    assert sum(p.count for p in points["gen_ai.execute_tool.duration"]) == 2


def test_approvals_are_counted_and_their_wait_recorded(otel: Any) -> None:
    exporter, reader, providers = otel
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE)
    def send(to: str) -> str:
        """Send."""
        return "sent"

    model = ScriptedModel([call("send", {"to": "a"}), call("send", {"to": "b"}), "done"])
    host = Host(model=model, tools=tools,
                approver=CallbackApprover(lambda r: r.arguments["to"] == "a"))
    instrument(host, **providers)
    host.run_sync("go")
    points = metric_points(reader)
    states = {p.attributes["anfitrion.approval.state"]: p.value
              for p in points["anfitrion.approvals"]}
    assert states == {"asked": 2, "approved": 1, "denied": 1}
    assert sum(p.count for p in points["anfitrion.approval.wait"]) == 2
    names = [e.name for s in exporter.get_finished_spans() if s.name == "execute_tool send"
             for e in s.events]
    assert "anfitrion.approval.requested" in names
    assert "anfitrion.execution.claimed" in names


def test_a_planted_secret_never_appears_in_any_attribute(otel: Any) -> None:
    exporter, _, providers = otel
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def echo(text: str) -> str:
        """Echo."""
        return f"you said {text}"

    model = ScriptedModel([call("echo", {"text": f"key {SECRET} mail bob@example.com"}),
                           f"the key is {SECRET}"])
    host = Host(model=model, tools=tools, policy=Policy([]))  # the call runs: its result too
    instrument(host, capture_content=True, **providers)
    run = host.run_sync(f"remember {SECRET}", principal="alice@example.com")
    assert run.status is RunStatus.COMPLETED
    dumped = json.dumps([{"attributes": dict(s.attributes or {}),
                          "events": [dict(e.attributes or {}) for e in s.events]}
                         for s in exporter.get_finished_spans()], default=str)
    assert SECRET not in dumped
    assert "bob@example.com" not in dumped
    assert "alice@example.com" not in dumped
    assert "gen_ai.tool.call.arguments" in dumped  # content was captured, redacted


PRIVATE = {"card": "4111 1111 1111 1111", "iban": "DE89 3704 0044 0532 0130 00",
           "prose password": "hunter2hunter2", "aws": "AKIAIOSFODNN7EXAMPLE",
           "private key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "phone": "+351 912 345 678"}
PRIVATE_TEXT = (f"card {PRIVATE['card']}, iban {PRIVATE['iban']}, my password is "
                f"{PRIVATE['prose password']}, aws {PRIVATE['aws']}, phone {PRIVATE['phone']}, "
                f"-----BEGIN PRIVATE KEY-----\n{PRIVATE['private key']}\n-----END PRIVATE KEY-----")


def test_cards_ibans_and_prose_passwords_are_redacted_in_captured_content(otel: Any) -> None:
    exporter, _, providers = otel
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def echo(text: str) -> str:
        """Echo."""
        return f"you said {text}"

    model = ScriptedModel([call("echo", {"text": PRIVATE_TEXT}), f"noted: {PRIVATE_TEXT}"])
    host = Host(model=model, tools=tools, policy=Policy([]))  # the call runs: its result too
    instrument(host, capture_content=True, **providers)
    run = host.run_sync("hi")
    assert run.status is RunStatus.COMPLETED
    attributes: dict[str, str] = {}
    for span in exporter.get_finished_spans():
        attributes.update({k: str(v) for k, v in (span.attributes or {}).items()})
    dumped = json.dumps(attributes).replace(" ", "")
    for name, value in PRIVATE.items():
        assert value.replace(" ", "") not in dumped, name
    for key in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "anfitrion.reply.text"):
        assert "[card]" in attributes[key] and "[iban]" in attributes[key], key


def test_content_is_off_by_default(otel: Any) -> None:
    exporter, _, providers = otel
    host = Host(model=ScriptedModel([call("get_weather", {"location": "Lisboa, PT"}), "ok"]),
                tools=demo_toolbox())
    instrument(host, **providers)
    host.run_sync("hi")
    for span in exporter.get_finished_spans():
        keys = set(span.attributes or {})
        assert not keys & {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
                           "anfitrion.reply.text"}


def test_the_no_op_path_runs_with_the_global_api_providers() -> None:
    host = Host(model=ScriptedModel([call("get_weather", {"location": "Lisboa, PT"}), "ok"]),
                tools=demo_toolbox())
    instrument(host)
    assert host.run_sync("hi").status is RunStatus.COMPLETED


def test_tool_handlers_run_inside_the_execute_tool_span(otel: Any) -> None:
    exporter, _, providers = otel
    seen: list[dict[str, str]] = []
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    async def remote(x: str) -> str:
        """Calls a remote server that wants trace context."""
        seen.append(trace_headers())
        return "ok"

    host = Host(model=ScriptedModel([call("remote", {"x": "a"}), "ok"]), tools=tools)
    instrument(host, **providers)
    host.run_sync("hi")
    tool_span = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool remote")
    assert seen[0]["traceparent"].split("-")[2] == f"{tool_span.context.span_id:016x}"


def test_a_suspended_call_closes_its_span_as_pending(otel: Any) -> None:
    from anfitrion import DeferredApprover

    exporter, _, providers = otel
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE)
    def send(to: str) -> str:
        """Send."""
        return "sent"

    host = Host(model=ScriptedModel([call("send", {"to": "a"})]), tools=tools,
                approver=DeferredApprover())
    instrument(host, **providers)
    assert host.run_sync("go").status is RunStatus.SUSPENDED
    span = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool send")
    assert [e.name for e in span.events][-1] == "anfitrion.approval.pending"


def test_provider_adapters_name_their_provider_for_gen_ai_provider_name() -> None:
    pytest.importorskip("anthropic")
    pytest.importorskip("openai")
    from anfitrion.models.anthropic import AnthropicModel
    from anfitrion.models.openai_chat import OpenAIChatModel
    from anfitrion.models.openai_responses import OpenAIResponsesModel

    assert AnthropicModel("m", api_key="k").provider == "anthropic"
    assert OpenAIResponsesModel("m", api_key="k").provider == "openai"
    assert OpenAIChatModel("m", api_key="k", base_url="http://127.0.0.1:9/v1").provider == \
        "openai"


def test_a_shadow_decision_is_a_span_event_and_a_metric_beside_the_enforced_one(
        otel: Any) -> None:
    from anfitrion.policy import parse_policy

    exporter, reader, providers = otel
    shadow = parse_policy('[defaults]\nread = "deny"\n')
    host = Host(model=demo_model(), tools=demo_toolbox(), max_turns=4, shadow_policy=shadow)
    instrument(host, **providers)
    host.run_sync(SCENES[0][1], principal="demo-user")
    tool = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool get_weather")
    event = next(e for e in tool.events if e.name == "anfitrion.call.shadow_decided")
    assert event.attributes == {"anfitrion.shadow.decision": "deny",
                                "anfitrion.shadow.rule_id": "default.read",
                                "anfitrion.shadow.policy.sha256": shadow.sha256,
                                "anfitrion.decision": "allow"}
    assert tool.status.is_ok  # the shadow's deny was not enforced
    points = metric_points(reader)["anfitrion.shadow.decisions"]
    assert [(p.attributes["anfitrion.shadow.agrees"], p.value) for p in points] == [(False, 1)]
