"""``anfitrion mcp review|approve|list``."""

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


def run(store: MemoryStore, *args: str) -> str:
    result = CliRunner().invoke(command, list(args), obj={"store": store})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_review_shows_full_definitions_with_hidden_text_visible_and_poison_marked(
        config_file: Path) -> None:
    output = run(MemoryStore(), "review", "--launch", "--config", str(config_file))
    assert "── mal.poisoned  [new]" in output
    assert "⟨U+E0069⟩" in output  # an invisible tag character, made visible
    assert "»<IMPORTANT>«" in output
    assert "⚠ description: hidden or control characters" in output
    assert "⚠ inputSchema.properties.a.description: tells the model to ignore" in output
    assert "── mal.g\u0456t_log  [invalid]" in output
    assert "── mal  [new]" in output  # the server's instructions need a person too
    assert "anfitrion mcp approve --config" in output


def test_review_json_then_approve_then_nothing_left_to_review(config_file: Path) -> None:
    store = MemoryStore()
    entries = json.loads(run(store, "review", "--launch", "--config", str(config_file), "--json"))
    rug = next(e for e in entries if e["name"] == "mal.rug")
    assert rug["state"] == "new"
    assert rug["findings"] == []
    out = run(store, "approve", "mal.rug", "--digest", rug["digest"][:12], "--as", "alice")
    assert f"approved mal.rug ({rug['digest'][:12]}) as alice" in out
    run(store, "approve", "mal.*", "--as", "alice")
    listed = json.loads(run(store, "list", "--json"))
    assert {p["state"] for p in listed} == {"approved"}
    again = run(store, "review", "--launch", "--config", str(config_file))
    assert "[new]" not in again
    assert "[changed]" not in again
    assert "mal.g\u0456t_log  [invalid]" in again  # never approvable: reported each time


def test_approve_refuses_a_digest_that_is_not_the_one_reviewed(config_file: Path) -> None:
    store = MemoryStore()
    run(store, "review", "--launch", "--config", str(config_file))
    result = CliRunner().invoke(command, ["approve", "mal.rug", "--digest", "0123456789ab"],
                                obj={"store": store})
    assert result.exit_code != 0
    assert "not the one reviewed" in result.output


def test_list_without_any_review_says_what_to_do() -> None:
    assert "run `anfitrion mcp review" in run(MemoryStore(), "list")
