"""The suite's client scenarios against anfitrion's client side: the host with an
:class:`~anfitrion.mcp._toolset.McpToolset` as its tool source (``client.py``), one test per
scenario. Authorization (``auth/*``) scenarios are not run: OAuth is not supported."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
from conformance_suite import CLIENT, CLIENT_SCENARIOS, Outcome, Suite, read_outcomes

# a module's first test also waits for the suite's run (tens of seconds, more under load)
pytestmark = [pytest.mark.mcp_servers, pytest.mark.timeout(300)]

CLIENT_GAPS: dict[str, str] = {}
"""Scenario → why the client fails it (a strict xfail: remove the entry once fixed)."""


def run_client(suite: Suite, scenario: str, results: Path) -> Outcome:
    command = shlex.join([sys.executable, CLIENT])
    anyio.run(lambda: suite.run("client", "--command", command, "--scenario", scenario,
                                "--timeout", "60000", "-o", str(results), cwd=results))
    return read_outcomes(results).get(scenario, Outcome(scenario, ()))


def _case(scenario: str) -> object:
    gap = CLIENT_GAPS.get(scenario)
    if gap is None:
        return scenario
    return pytest.param(scenario, marks=pytest.mark.xfail(reason=gap, strict=True))


@pytest.mark.parametrize("scenario", [_case(s) for s in CLIENT_SCENARIOS])
def test_the_client_toolset_passes_the_scenario(suite: Suite, scenario: str,
                                                tmp_path: Path) -> None:
    outcome = run_client(suite, scenario, tmp_path)
    assert outcome.passed, outcome.failures()


def test_every_client_gap_names_a_scenario_of_the_suite() -> None:
    assert set(CLIENT_GAPS) <= set(CLIENT_SCENARIOS)
