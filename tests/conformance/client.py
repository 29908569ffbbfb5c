"""The client the conformance suite launches for its client scenarios: anfitrion's host, the
server at the URL (last argument) as its only tool source (:class:`McpToolset`), a scripted
model proposing the calls the scenario (``$MCP_CONFORMANCE_SCENARIO``) expects.

    python tests/conformance/client.py http://127.0.0.1:PORT/mcp

Every listed tool is approved first (the operator's review), every call is allowed; what the
host did is printed, and the exit status is 1 when a call did not succeed. The server may ask
the person (``"elicitation": true``); the person accepts with the server's defaults.

Authorization scenarios (``auth/*``): the server's ``auth`` entry comes from the scenario's
context (``$MCP_CONFORMANCE_CONTEXT``: a pre-registered client, client credentials, a signing
key); the person "authorizes" headlessly: :class:`FollowRedirect` requests the authorization
URL and reads the code from the authorization server's redirect, as a browser would. Tokens
are sealed in the store with a key made for the run.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp.shared.auth import AuthorizationCodeResult

from anfitrion import Host
from anfitrion._approvals import CallbackApprover
from anfitrion._conversation import ToolCall
from anfitrion.mcp import Elicitation, ElicitationAnswer
from anfitrion.mcp._config import AuthSettings, ServerConfig
from anfitrion.mcp._oauth import OAuthAccess, TokenCipher
from anfitrion.mcp._toolset import McpToolset, ToolStatus
from anfitrion.policy import Policy
from anfitrion.testing import MemoryStore, ScriptedModel

SERVER_ID = "conformance"
CALLS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "initialize": [],
    "tools_call": [("add_numbers", {"a": 5, "b": 3})],
    "elicitation-sep1034-client-defaults": [("test_client_elicitation_defaults", {})],
    "sse-retry": [("test_reconnection", {})],
    "json-schema-2020-12-preservation": [("json_schema_echo", {"schema": "FOCAL"})],
    # 2026-07-28 (the prerelease): per-request _meta, the standard headers, multi-round trips
    "request-metadata": [],
    "http-standard-headers": [("test_headers", {}), ("my-hyphenated-tool", {})],
    "json-schema-ref-no-deref": [],  # listed (and pinned, checked) only: no network $ref
    "http-invalid-tool-headers": [("*", {})],  # every tool listed (the SDK drops the others)
    "sep-2322-client-request-state": [
        ("test_mrtr_echo_state", {}), ("test_mrtr_no_state", {}), ("test_mrtr_unrelated", {}),
        ("test_mrtr_no_result_type", {})],
}
"""Scenario → the tools the model calls (by the server's names), in one turn."""
AUTH_CALLS = [("test-tool", {})]
"""What an ``auth/*`` scenario's server offers: one tool behind authorization."""
CIMD_URL = "https://conformance-test.local/client-metadata.json"
"""This client's metadata document URL, as the suite's ``auth/basic-cimd`` expects it."""


class FollowRedirect:
    """The person's browser, headless: GET the authorization URL, take ``code``, ``state`` and
    ``iss`` from the redirect back (the suite's authorization server asks no one)."""

    def __init__(self) -> None:
        self.answer: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=20) as client:
            response = await client.get(url)
        location = response.headers.get("location", "")
        query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        if "code" not in query:
            raise RuntimeError(f"the authorization server answered {response.status_code} "
                               "without a code")
        self.answer = AuthorizationCodeResult(code=query["code"], state=query.get("state"),
                                              iss=query.get("iss"))

    async def callback(self) -> AuthorizationCodeResult:
        assert self.answer is not None
        return self.answer


def auth_settings(context: dict[str, Any]) -> AuthSettings:
    """The ``auth`` entry for the scenario's context (everything on 127.0.0.1: allowInternal)."""
    if "private_key_pem" in context:
        return AuthSettings(client_id=context["client_id"], grant="client_credentials",
                            private_key=context["private_key_pem"],
                            signing_algorithm=context.get("signing_algorithm", "ES256"),
                            allow_internal=True)
    if context.get("name", "").startswith("auth/client-credentials"):
        return AuthSettings(client_id=context["client_id"], grant="client_credentials",
                            client_secret=context["client_secret"], allow_internal=True)
    return AuthSettings(client_id=context.get("client_id"),
                        client_secret=context.get("client_secret"),
                        client_metadata_url=CIMD_URL, allow_internal=True)


async def accept_defaults(asked: Elicitation) -> ElicitationAnswer:
    """The person accepts, leaving every field at the server's default (SEP-1034)."""
    print(f"elicitation from {asked.server}: {asked.message!r} fields={asked.fields}")
    return ElicitationAnswer("accept")


def _echo_focal(statuses: list[ToolStatus], arguments: dict[str, Any]) -> dict[str, Any]:
    """``json-schema-2020-12-preservation``: the focal tool's ``inputSchema`` as the client
    received and pinned it, passed back verbatim (a free-form object argument)."""
    if arguments.get("schema") != "FOCAL":
        return arguments
    focal = [s.pin for s in statuses if s.upstream_name == "json_schema_2020_12_tool"]
    assert focal and focal[0] is not None, "the focal tool was not listed"
    return {"schema": focal[0].seen_definition["inputSchema"]}


def _strings_for(status: ToolStatus) -> dict[str, Any]:
    """Arguments for a tool taking strings: each required one ``"x"``."""
    schema = status.pin.seen_definition.get("inputSchema", {}) if status.pin else {}
    return dict.fromkeys(schema.get("required", []), "x")


def _present(arguments: dict[str, Any]) -> dict[str, Any]:
    """The scenario's arguments less those it gives as ``null``: a model leaves an optional
    argument out (the gate refuses ``null`` for a ``boolean``, as the schema says), and an
    argument left out is what the scenario checks is not mirrored into a header."""
    return {k: v for k, v in arguments.items() if v is not None}


async def main(url: str, scenario: str) -> int:
    store = MemoryStore()
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    calls = AUTH_CALLS if scenario.startswith("auth/") else CALLS.get(scenario)
    if calls is None and isinstance(context.get("toolCalls"), list):  # http-custom-headers
        calls = [(c["name"], _present(c.get("arguments") or {})) for c in context["toolCalls"]]
    if calls is None:
        print(f"client: scenario {scenario!r} is not supported", file=sys.stderr)
        return 2
    oauth, auth = None, None
    if scenario.startswith("auth/"):
        context.setdefault("name", scenario)
        auth = auth_settings(context)
        cipher = TokenCipher.from_env({"ANFITRION_TOKEN_KEY": TokenCipher.new_key()})
        oauth = OAuthAccess(store, cipher,
                            "conformance", FollowRedirect())
    config = ServerConfig(id=SERVER_ID, url=url, timeout=20, elicitation=True, auth=auth)
    async with McpToolset(config, store, elicitation=accept_defaults, oauth=oauth) as toolset:
        statuses = await toolset.refresh()
        for status in statuses:
            await toolset.pins.approve(status.name, by="conformance")
        if calls == [("*", {})]:
            calls = [(s.upstream_name, _strings_for(s)) for s in statuses]
        calls = [(name, _echo_focal(statuses, arguments)) for name, arguments in calls]
        script: list[Any] = []
        if calls:
            script.append([ToolCall.from_object(f"call_{i}", f"{SERVER_ID}.{name}", arguments)
                           for i, (name, arguments) in enumerate(calls)])
        script.append("done")
        host = Host(ScriptedModel(script), toolset, store=store, policy=Policy.default(),
                    approver=CallbackApprover(lambda request: True))
        result = await host.run(f"conformance scenario {scenario}")
    failed = 0
    for record in result.calls:
        print(f"{record.tool}: {record.stage} {record.verdict} error={record.is_error} "
              f"{record.reason or ''}")
        failed += record.is_error is not False
    print(f"run: {result.status.value} {result.error or ''}")
    return 1 if failed or result.error else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")))
