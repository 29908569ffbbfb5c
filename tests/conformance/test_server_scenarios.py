"""The suite's server scenarios against the conformance server, directly and through
``anfitrion gateway --http`` wrapping it (over stdio), one test per scenario.

Scenarios the gateway does not pass yet are strict xfails listed in :data:`GATEWAY_GAPS`: when
the gateway learns one, its test fails until the entry is removed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")
import mcp.types as mt
from conformance_suite import (
    SERVER,
    SERVER_SCENARIOS,
    BearerProxy,
    Outcome,
    Suite,
    free_port,
    process,
    read_outcomes,
    serving,
)
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from anfitrion.mcp._config import ServerConfig, load_config
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import open_store

# a module's first test also waits for the suite's run (tens of seconds, more under load)
pytestmark = [pytest.mark.mcp_servers, pytest.mark.timeout(300)]

ANFITRION = str(Path(sys.executable).parent / "anfitrion")
SERVER_ID = "conformance"


def _gateway_options() -> tuple[str, ...]:
    from anfitrion._cli.gateway import command

    own_names = any(p.name == "own_names" for p in command.params)
    return ("--own-names",) if own_names else ()


def _relays() -> dict[str, bool]:
    names = {f.name for f in dataclasses.fields(ServerConfig)}
    return {key: True for key in ("sampling", "elicitation") if key in names}


GATEWAY_OPTIONS = _gateway_options()
"""How the gateway is started besides config, store, policy and port: under the tools' own
names (``--own-names``) where this anfitrion has the option (the suite calls them so)."""
RELAYS = _relays()
"""The server's sampling and elicitation requests relayed to the suite, where the config has
these keys (the scenarios answer them)."""
POLICY = """\
# the suite's calls are the operator's own: every call allowed, nothing waits for a person
[defaults]
read = "allow"
write = "allow"

[taint]
enabled = false

[secrets]
verdict = "off"
"""
GATEWAY_GAPS: dict[str, str] = {}
"""Scenario → why the gateway fails it (a strict xfail: remove the entry once fixed). Empty
since the gateway forwards the whole protocol (issue 18); ``tools-call-simple-text`` and
``tools-call-error`` would pass even with wrong names, as the suite accepts any text or error
result: :func:`test_the_gateway_calls_a_tool_by_its_own_name` checks the exact answer."""


def run_direct(suite: Suite, results: Path) -> dict[str, Outcome]:
    async def main() -> None:
        port = free_port()
        async with process([sys.executable, SERVER, "--http", "--port", str(port)], port):
            await suite.run("server", "--url", f"http://127.0.0.1:{port}/mcp",
                            "-o", str(results), cwd=results)
    anyio.run(main)
    return read_outcomes(results, "server-")


@dataclass(frozen=True)
class GatewayRun:
    outcomes: dict[str, Outcome]
    simple_text: mt.CallToolResult
    """``test_simple_text`` called by its own name through the gateway (the official client)."""


async def call_by_own_name(url: str, token: str) -> mt.CallToolResult:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300),
                                  headers={"Authorization": f"Bearer {token}"},
                                  trust_env=False) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        return await session.call_tool("test_simple_text", {})


async def approve_prompts(pins: PinBook) -> None:
    """The operator's review of the server's prompts, where this anfitrion pins them (the
    gateway serves only approved prompts): each listed prompt recorded, then approved."""
    from anfitrion.mcp import _pinning as pinning

    observe = getattr(pins, "observe_prompt", None)
    if observe is None:
        return
    params = StdioServerParameters(command=sys.executable, args=[SERVER])
    async with stdio_client(params, errlog=sys.__stderr__) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        prompts = (await session.list_prompts()).prompts
    for prompt in prompts:
        await observe(SERVER_ID, pinning.pinned_prompt_fields(  # type: ignore[attr-defined]
            prompt.model_dump(mode="json", by_alias=True, exclude_none=True)))
        await pins.approve(pinning.prompt_pin_name(SERVER_ID, prompt.name),  # type: ignore[attr-defined]
                           by="operator")


def run_through_gateway(suite: Suite, results: Path) -> GatewayRun:
    config = results / "mcp.json"
    gateway_port = free_port()
    # the gateway's own origin is allowed (the DNS-rebinding scenario sends it); the suite's
    # other origins and hosts are not
    config.write_text(json.dumps({
        # the conformance server asks with server-to-client requests: the 2025 handshake
        "mcpServers": {SERVER_ID: {"command": sys.executable, "args": [SERVER], **RELAYS,
                                   "protocol": "legacy"}},
        "gateway": {"principal": "conformance", "allowedOrigins": [
            f"http://127.0.0.1:{gateway_port}", f"http://localhost:{gateway_port}"]}}))
    policy = results / "anfitrion.toml"
    policy.write_text(POLICY)
    store_url = f"sqlite:///{results / 'anfitrion.db'}"
    token = secrets.token_urlsafe(24)
    called: list[mt.CallToolResult] = []

    async def approve_everything() -> None:
        store = open_store(store_url)
        try:
            async with McpServers(load_config(config), store) as servers:
                found = await servers.refresh()
            statuses = found[SERVER_ID]
            assert not isinstance(statuses, Exception), statuses
            pins = PinBook(store)
            for status in statuses:
                await pins.approve(status.name, by="operator")
            await approve_prompts(pins)
        finally:
            await store.close()

    async def main() -> None:
        await approve_everything()
        command = [ANFITRION, "gateway", "--config", str(config), "--store", store_url,
                   "--policy", str(policy), "--http", "--port", str(gateway_port),
                   *GATEWAY_OPTIONS]
        ready = re.compile(r"anfitrion gateway: http://127\.0\.0\.1:(\d+)/mcp")
        async with process(command, ready, env={"ANFITRION_GATEWAY_TOKEN": token}) as found:
            assert found is not None
            called.append(await call_by_own_name(found.group(0).split(": ", 1)[1], token))
            proxy = BearerProxy(int(found.group(1)), token)
            async with serving(proxy) as port:
                proxy.port = port
                await suite.run("server", "--url", f"http://127.0.0.1:{port}/mcp",
                                "-o", str(results), cwd=results)
                await proxy.client.aclose()  # ends the SSE streams still open
    anyio.run(main)
    return GatewayRun(read_outcomes(results, "server-"), called[0])


@pytest.fixture(scope="module")
def direct(suite: Suite, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    return run_direct(suite, tmp_path_factory.mktemp("direct"))


@pytest.fixture(scope="module")
def gateway(suite: Suite, tmp_path_factory: pytest.TempPathFactory) -> GatewayRun:
    return run_through_gateway(suite, tmp_path_factory.mktemp("gateway"))


def test_the_suite_runs_the_scenarios_listed_here(direct: dict[str, Outcome]) -> None:
    """A new suite version with other scenarios must be looked at, not silently half-run."""
    assert sorted(direct) == sorted(SERVER_SCENARIOS)


@pytest.mark.parametrize("scenario", SERVER_SCENARIOS)
def test_the_conformance_server_passes_the_scenario(direct: dict[str, Outcome],
                                                    scenario: str) -> None:
    outcome = direct.get(scenario, Outcome(scenario, ()))
    assert outcome.passed, outcome.failures()


def _gateway_case(scenario: str) -> object:
    gap = GATEWAY_GAPS.get(scenario)
    if gap is None:
        return scenario
    return pytest.param(scenario, marks=pytest.mark.xfail(reason=gap, strict=True))


@pytest.mark.parametrize("scenario", [_gateway_case(s) for s in SERVER_SCENARIOS])
def test_the_gateway_passes_the_scenario(gateway: GatewayRun, scenario: str) -> None:
    outcome = gateway.outcomes.get(scenario, Outcome(scenario, ()))
    assert outcome.passed, outcome.failures()


@pytest.mark.xfail(not GATEWAY_OPTIONS, strict=True,
                   reason="the gateway presents tools as <server>.<tool> only (no --own-names)")
def test_the_gateway_calls_a_tool_by_its_own_name(gateway: GatewayRun) -> None:
    """The suite accepts any text result, an 'unknown tool' error too: the answer is checked
    here, word for word."""
    result = gateway.simple_text
    assert not result.is_error, result.content
    assert [c.model_dump(exclude_none=True) for c in result.content] == [
        {"type": "text", "text": "This is a simple text response for testing."}]


def test_every_gap_names_a_scenario_of_the_suite() -> None:
    assert set(GATEWAY_GAPS) <= set(SERVER_SCENARIOS)


