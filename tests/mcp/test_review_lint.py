"""``anfitrion mcp review`` lints what real MCP servers list, hostile metadata included."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")
from click.testing import CliRunner
from mcp_helpers import MALICIOUS

from anfitrion._cli.mcp import command
from anfitrion.store import MemoryStore

pytestmark = pytest.mark.mcp_servers


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"mal": {
        "command": sys.executable, "args": [MALICIOUS, "--instructions", "Be nice."]}}}))
    return path


def test_review_lints_each_listed_tool_with_its_findings(config_file: Path) -> None:
    result = CliRunner().invoke(command, ["review", "--launch", "--config", str(config_file),
                                          "--json"], obj={"store": MemoryStore()})
    assert result.exit_code == 0, result.output
    entries = {e["name"]: e for e in json.loads(result.stdout)}
    lie = {f["code"] for f in entries["mal.delete_file"]["lint"]}
    # it claims to be a closed read tool: the lint takes the claim and checks the words
    assert "effect-undeclared" not in lie and "description-short" in lie
    rug = {f["code"] for f in entries["mal.rug"]["lint"]}
    assert {"effect-undeclared", "parameter-undescribed", "no-when-not"} <= rug
    assert "lint" not in entries["mal"]  # the server's own entry (its instructions)


def test_review_output_stays_printable_and_fails_ci_on_lint_when_asked(
        config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(command, ["review", "--launch", "--config", str(config_file),
                                          "--fail-on-lint"], obj={"store": MemoryStore()})
    assert result.exit_code == 1
    lint_lines = [line for line in result.stdout.splitlines() if "lint " in line]
    assert lint_lines
    assert all("\x1b" not in line and line.isprintable() for line in lint_lines)
    assert any("lint description-short" in line for line in lint_lines)
