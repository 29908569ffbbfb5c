"""``anfitrion policy``: tools from the current folder, and the tools left untrusted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from anfitrion._cli.main import cli

TOOLS = '''
from anfitrion import Effect, Toolbox

toolbox = Toolbox()

@toolbox.tool(effect=Effect.READ)
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    return ""

@toolbox.tool(effect=Effect.READ, provenance="trusted")
def get_time() -> str:
    """The time."""
    return "12:00"
'''


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder holds ``my_project_tools.py`` and ``anfitrion.toml``; not on sys.path."""
    (tmp_path / "my_project_tools.py").write_text(TOOLS)
    (tmp_path / "anfitrion.toml").write_text('[defaults]\nread = "allow"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "my_project_tools", raising=False)
    return tmp_path


def test_a_toolbox_in_the_current_folder_loads_without_pythonpath(project: Path) -> None:
    result = invoke("policy", "check", "--toolbox", "my_project_tools:toolbox",
                    "--tool", "get_time", "--principal", "alice")
    assert result.exit_code == 0, result.output
    assert "get_time (read) for alice: ALLOW" in result.output


def test_validate_lists_the_tools_left_untrusted_and_how_to_declare_them(project: Path) -> None:
    result = invoke("policy", "validate", "--toolbox", "my_project_tools:toolbox")
    assert result.exit_code == 0, result.output
    assert "untrusted (the default provenance): fetch_page" in result.output
    assert "get_time" not in result.output
    assert 'provenance="trusted"' in result.output
    listed = json.loads(invoke("policy", "validate", "--toolbox", "my_project_tools:toolbox",
                               "--json").output)
    assert listed["untrusted_tools"] == ["fetch_page"]


def test_validate_without_a_file_here_says_what_to_give(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("policy", "validate")
    assert result.exit_code == 1
    assert "no ./anfitrion.toml in this folder" in result.output


def test_a_toolbox_that_cannot_be_imported_is_a_usage_error(project: Path) -> None:
    result = invoke("policy", "check", "--toolbox", "no_such_module:toolbox",
                    "--tool", "x", "--principal", "alice")
    assert result.exit_code == 2
    assert "cannot load 'no_such_module:toolbox'" in result.output


@pytest.mark.parametrize(("declared", "verdict"), [("write", "ask"), ("read", "allow")])
def test_check_sees_the_tool_as_the_policy_declares_it(project: Path, declared: str,
                                                       verdict: str) -> None:
    """``[tools."NAME"] effect`` changes what the gate decides; ``policy check`` must show that
    decision, not the one for the tool as its code declares it."""
    (project / "anfitrion.toml").write_text(
        f'[defaults]\nread = "allow"\nwrite = "ask"\n\n[tools."fetch_page"]\n'
        f'effect = "{declared}"\n')
    result = invoke("policy", "check", "--toolbox", "my_project_tools:toolbox",
                    "--tool", "fetch_page", "--args", '{"url": "https://example.org"}',
                    "--principal", "alice", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["decision"]["verdict"] == verdict
    bare = invoke("policy", "check", "--tool", "fetch_page", "--effect",
                  "read" if declared == "write" else "write", "--principal", "alice", "--json")
    assert bare.exit_code == 0, bare.output
    assert json.loads(bare.output)["decision"]["verdict"] == verdict  # as in the gate
