"""The prerelease suite's server scenarios of MCP 2026-07-28 (``--requirements 2026-07-28``):
against the conformance server directly, and through ``anfitrion gateway --http`` wrapping it
(over stdio, in the 2025 era: the gateway speaks 2026-07-28 to its client and the older
revision to the server).

The gateway must pass every scenario the server passes directly. What the server itself fails
is listed in :data:`SERVER_GAPS` with the reason (a strict xfail, through the gateway as well:
a scenario the gateway cannot pass when the server behind it does not).
"""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")
from conformance_suite import Outcome, RequirementsSuite, Suite
from test_server_scenarios import run_direct, run_through_gateway

pytestmark = [pytest.mark.mcp_servers, pytest.mark.timeout(600)]

_INPUT_REQUIRED = ("the conformance server (tests/conformance/server.py, on the SDK's 2025-era "
                   "tools) has no multi-round-trip tools: it answers complete results where the "
                   "scenario expects input_required")
_TASKS = ("the conformance server implements no tasks (the io.modelcontextprotocol/tasks "
          "extension): no task-creating tools, no tasks/* methods. Through the gateway, which "
          "serves the extension for calls waiting for a person, the checks that need no "
          "task-creating upstream tool pass (the extension advertised, -32021 without it, "
          "-32602 for an unknown task id: capability-negotiation 4 of 5 checks, "
          "dispatch-and-envelope 7 of 9); those needing slow_compute & co. still fail, since "
          "upstream tasks are not forwarded")
SERVER_GAPS: dict[str, str] = {
    **{f"input-required-result-{name}": _INPUT_REQUIRED for name in (
        "basic-elicitation", "basic-list-roots", "basic-sampling", "capability-check",
        "multi-round", "multiple-input-requests", "non-tool-request", "request-state",
        "result-type", "tampered-state")},
    **{f"tasks-{name}": _TASKS for name in (
        "capability-negotiation", "dispatch-and-envelope", "lifecycle", "mrtr-composition",
        "mrtr-input", "request-headers", "request-state-removal", "required-task-error",
        "wire-fields")},
    "http-custom-header-server-validation": (
        "the conformance server lists no tool with x-mcp-header annotations, so the scenario "
        "has nothing to test"),
    "json-schema-2020-12": (
        "the conformance server's json_schema_2020_12_tool predates SEP-2106: its schema has "
        "no allOf/anyOf, if/then/else or $anchor"),
    "server-stateless": (
        "the conformance server lists no test_missing_capability tool and runs its sampling "
        "tool for a client that did not declare sampling (no -32021)"),
}
"""Scenario → why the conformance server fails it directly (so through the gateway too)."""


def _next(suite: Suite) -> RequirementsSuite:
    return RequirementsSuite(suite.node, suite.entry)


@pytest.fixture(scope="module")
def direct_2026(next_suite: Suite, tmp_path_factory: pytest.TempPathFactory
                ) -> dict[str, Outcome]:
    return run_direct(_next(next_suite), tmp_path_factory.mktemp("direct-2026"))


@pytest.fixture(scope="module")
def gateway_2026(next_suite: Suite, tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, Outcome]:
    return run_through_gateway(_next(next_suite), tmp_path_factory.mktemp("gw-2026")).outcomes


def test_the_server_fails_exactly_the_listed_scenarios(direct_2026: dict[str, Outcome]) -> None:
    """A server that learns a scenario (or a suite that changes) must be looked at."""
    failed = sorted(s for s, o in direct_2026.items() if not o.passed)
    assert failed == sorted(SERVER_GAPS), {s: direct_2026[s].failures()[:300] for s in failed}
    assert len(direct_2026) >= 40


def test_the_gateway_passes_every_scenario_the_server_passes(
        direct_2026: dict[str, Outcome], gateway_2026: dict[str, Outcome]) -> None:
    expected = sorted(s for s, o in direct_2026.items() if o.passed)
    failed = {s: gateway_2026.get(s, Outcome(s, ())).failures()[:400] for s in expected
              if not gateway_2026.get(s, Outcome(s, ())).passed}
    assert not failed, failed
    assert sorted(gateway_2026) == sorted(direct_2026)
