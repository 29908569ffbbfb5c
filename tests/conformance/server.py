"""The conformance test server: every tool, resource and prompt the suite's server scenarios ask
for (``@modelcontextprotocol/conformance`` 0.1.16, ``src/scenarios/server/*.ts``), written with
the official ``mcp`` SDK.

    python tests/conformance/server.py                  # stdio (what the gateway wraps)
    python tests/conformance/server.py --http --port N  # streamable HTTP at /mcp (direct runs)

Results are exactly the ones the scenarios' descriptions give; nothing here knows about the
gateway.
"""

from __future__ import annotations

import argparse
import base64
import json
from typing import Any

import anyio
import mcp.types as mt
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore

# a 1x1 red PNG and a WAV with one sample
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJ"
       "RU5ErkJggg==")
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
STEP = 0.05
"""The pause the logging and progress scenarios ask for between two notifications."""

JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}
ELICIT_USER: dict[str, Any] = {
    "type": "object",
    "properties": {"username": {"type": "string", "description": "User's response"},
                   "email": {"type": "string", "description": "User's email address"}},
    "required": ["username", "email"],
}
ELICIT_DEFAULTS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {"type": "string", "description": "User status",
                   "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
}
ELICIT_ENUMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {"type": "string", "oneOf": [
            {"const": "value1", "title": "First Option"},
            {"const": "value2", "title": "Second Option"},
            {"const": "value3", "title": "Third Option"}]},
        "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                       "enumNames": ["Option One", "Option Two", "Option Three"]},
        "untitledMulti": {"type": "array", "items": {
            "type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {"type": "array", "items": {"anyOf": [
            {"const": "value1", "title": "First Choice"},
            {"const": "value2", "title": "Second Choice"},
            {"const": "value3", "title": "Third Choice"}]}},
    },
}


class MemoryEventStore(EventStore):
    """Every SSE event kept in memory, so a client can resume a stream (SEP-1699 polling)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, mt.JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: mt.JSONRPCMessage | None) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str,
                                  send_callback: EventCallback) -> str | None:
        stream = next((s for s, e, _ in self.events if e == last_event_id), None)
        if stream is None:
            return None
        for s, e, message in self.events:
            if s == stream and int(e) > int(last_event_id) and message is not None:
                await send_callback(EventMessage(message, e))
        return stream


async def _info(ctx: Context, text: str) -> None:  # type: ignore[type-arg]
    """A log message on the call's stream (``ctx.info`` warns: logging is deprecated in
    2026-07-28; the scenarios speak 2025-11-25)."""
    await ctx.request_context.session.send_notification(mt.LoggingMessageNotification(
        params=mt.LoggingMessageNotificationParams(level="info", data=text)),
        related_request_id=ctx.request_context.request_id)


def build() -> MCPServer:
    server = MCPServer("anfitrion-conformance-server", log_level="WARNING")
    _content_tools(server)
    _protocol_tools(server)
    _resources_and_prompts(server)
    _low_level(server)
    return server


def _content_tools(server: MCPServer) -> None:
    @server.tool(description="Returns simple text")
    def test_simple_text() -> str:
        return "This is a simple text response for testing."

    @server.tool(description="Returns an image")
    def test_image_content() -> list[mt.ImageContent]:
        return [mt.ImageContent(type="image", data=PNG, mimeType="image/png")]

    @server.tool(description="Returns audio")
    def test_audio_content() -> list[mt.AudioContent]:
        return [mt.AudioContent(type="audio", data=WAV, mimeType="audio/wav")]

    @server.tool(description="Returns an embedded resource")
    def test_embedded_resource() -> list[mt.EmbeddedResource]:
        return [mt.EmbeddedResource(type="resource", resource=mt.TextResourceContents(
            uri="test://embedded-resource", mimeType="text/plain",  # type: ignore[arg-type]
            text="This is an embedded resource content."))]

    @server.tool(description="Returns text, an image and an embedded resource")
    def test_multiple_content_types() -> list[mt.ContentBlock]:
        return [
            mt.TextContent(type="text", text="Multiple content types test:"),
            mt.ImageContent(type="image", data=PNG, mimeType="image/png"),
            mt.EmbeddedResource(type="resource", resource=mt.TextResourceContents(
                uri="test://mixed-content-resource",  # type: ignore[arg-type]
                mimeType="application/json", text='{"test":"data","value":123}')),
        ]


def _protocol_tools(server: MCPServer) -> None:
    @server.tool(description="Sends three log messages while it runs")
    async def test_tool_with_logging(ctx: Context) -> str:  # type: ignore[type-arg]
        await _info(ctx, "Tool execution started")
        await anyio.sleep(STEP)
        await _info(ctx, "Tool processing data")
        await anyio.sleep(STEP)
        await _info(ctx, "Tool execution completed")
        return "Tool with logging executed successfully"

    @server.tool(description="Reports progress 0, 50, 100 of 100")
    async def test_tool_with_progress(ctx: Context) -> str:  # type: ignore[type-arg]
        for done in (0, 50, 100):
            await ctx.report_progress(progress=done, total=100)
            if done < 100:
                await anyio.sleep(STEP)
        return "Tool with progress executed successfully"

    @server.tool(description="Always fails")
    def test_error_handling() -> str:
        raise ToolError("This tool intentionally returns an error for testing")

    @server.tool(description="Asks the client's model (sampling)")
    async def test_sampling(prompt: str, ctx: Context) -> str:  # type: ignore[type-arg]
        result = await ctx.session.create_message(
            [mt.SamplingMessage(role="user", content=mt.TextContent(type="text", text=prompt))],
            max_tokens=100, related_request_id=ctx.request_context.request_id)
        content = result.content
        text = content.text if isinstance(content, mt.TextContent) else "No response"
        return f"LLM response: {text}"

    async def elicit(ctx: Context, message: str, schema: dict[str, Any]  # type: ignore[type-arg]
                     ) -> mt.ElicitResult:
        return await ctx.session.elicit(message, schema,  # type: ignore[arg-type]
                                        related_request_id=ctx.request_context.request_id)

    @server.tool(description="Asks the user (elicitation)")
    async def test_elicitation(message: str, ctx: Context) -> str:  # type: ignore[type-arg]
        result = await elicit(ctx, message, ELICIT_USER)
        return f"User response: action={result.action}, content={json.dumps(result.content)}"

    @server.tool(description="Asks the user with defaults for every primitive type (SEP-1034)")
    async def test_elicitation_sep1034_defaults(ctx: Context) -> str:  # type: ignore[type-arg]
        result = await elicit(ctx, "Please provide user information", ELICIT_DEFAULTS)
        return (f"Elicitation completed: action={result.action}, "
                f"content={json.dumps(result.content)}")

    @server.tool(description="Asks the user with every enum form (SEP-1330)")
    async def test_elicitation_sep1330_enums(ctx: Context) -> str:  # type: ignore[type-arg]
        result = await elicit(ctx, "Please select values", ELICIT_ENUMS)
        return (f"Elicitation completed: action={result.action}, "
                f"content={json.dumps(result.content)}")

    @server.tool(description="Closes its SSE stream during the call (SEP-1699)")
    async def test_reconnection(ctx: Context) -> str:  # type: ignore[type-arg]
        await _info(ctx, "Before disconnect")
        await ctx.close_sse_stream()
        await anyio.sleep(0.2)  # the client reconnects meanwhile
        await _info(ctx, "After reconnect")
        return "Reconnection test completed"

    @server.tool(name="json_schema_2020_12_tool",
                 description="Tool with JSON Schema 2020-12 features")
    def json_schema_2020_12_tool(name: str = "", address: dict[str, Any] | None = None) -> str:
        return f"name={name} address={json.dumps(address)}"

    # the listed schema is the scenario's, word for word (MCPServer would derive its own)
    tool = server._tool_manager.get_tool("json_schema_2020_12_tool")
    assert tool is not None
    tool.parameters = JSON_SCHEMA_2020_12


def _resources_and_prompts(server: MCPServer) -> None:
    @server.resource("test://static-text", description="A static text resource",
                     mime_type="text/plain")
    def static_text() -> str:
        return "This is the content of the static text resource."

    @server.resource("test://static-binary", description="A static binary resource",
                     mime_type="image/png")
    def static_binary() -> bytes:
        return base64.b64decode(PNG)

    @server.resource("test://template/{id}/data", description="A resource template",
                     mime_type="application/json")
    def template(id: str) -> str:
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"},
                          separators=(",", ":"))

    @server.resource("test://watched-resource", description="A resource to subscribe to",
                     mime_type="text/plain")
    def watched() -> str:
        return "Watched resource content"

    @server.prompt(description="A simple prompt")
    def test_simple_prompt() -> list[UserMessage]:
        return [UserMessage(mt.TextContent(type="text",
                                           text="This is a simple prompt for testing."))]

    @server.prompt(description="A prompt with arguments")
    def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
        return [UserMessage(mt.TextContent(
            type="text", text=f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"))]

    @server.prompt(description="A prompt with an embedded resource")
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:  # noqa: N803
        return [
            UserMessage(mt.EmbeddedResource(type="resource", resource=mt.TextResourceContents(
                uri=resourceUri, mimeType="text/plain",  # type: ignore[arg-type]
                text="Embedded resource content for testing."))),
            UserMessage(mt.TextContent(type="text",
                                       text="Please process the embedded resource above.")),
        ]

    @server.prompt(description="A prompt with an image")
    def test_prompt_with_image() -> list[UserMessage]:
        return [
            UserMessage(mt.ImageContent(type="image", data=PNG, mimeType="image/png")),
            UserMessage(mt.TextContent(type="text", text="Please analyze the image above.")),
        ]


def _low_level(server: MCPServer) -> None:
    subscriptions: set[str] = set()
    low = server._lowlevel_server  # the SDK offers these three on the low-level server only

    async def set_level(ctx: Any, params: mt.SetLevelRequestParams) -> mt.EmptyResult:
        return mt.EmptyResult()

    async def subscribe(ctx: Any, params: mt.SubscribeRequestParams) -> mt.EmptyResult:
        subscriptions.add(str(params.uri))
        return mt.EmptyResult()

    async def unsubscribe(ctx: Any, params: mt.UnsubscribeRequestParams) -> mt.EmptyResult:
        subscriptions.discard(str(params.uri))
        return mt.EmptyResult()

    low.add_request_handler("logging/setLevel", mt.SetLevelRequestParams, set_level)
    low.add_request_handler("resources/subscribe", mt.SubscribeRequestParams, subscribe)
    low.add_request_handler("resources/unsubscribe", mt.UnsubscribeRequestParams, unsubscribe)

    @server.completion()  # type: ignore[misc]
    async def complete(ref: Any, argument: mt.CompletionArgument,
                       context: mt.CompletionContext | None) -> mt.Completion:
        values = [v for v in ("hello", "help", "world") if v.startswith(argument.value)]
        return mt.Completion(values=values, total=len(values), hasMore=False)



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    server = build()
    if args.http:
        server.run("streamable-http", port=args.port, event_store=MemoryEventStore(),
                   retry_interval=100)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
