"""``anfitrion chat`` through click's runner, against a local OpenAI-compatible server."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from anfitrion.cli.chat import command


def _load_fake_providers() -> ModuleType:
    """tests/models/fake_providers.py, loaded by path: it works in every pytest import mode."""
    path = Path(__file__).resolve().parents[1] / "models" / "fake_providers.py"
    spec = importlib.util.spec_from_file_location("_anfitrion_fake_providers", path)
    assert spec is not None
    assert spec.loader is not None
    module = sys.modules.get(spec.name) or importlib.util.module_from_spec(spec)
    if spec.name not in sys.modules:
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


fakes = _load_fake_providers()
FINAL, anthropic_brain, chat_brain, serve = (
    fakes.FINAL, fakes.anthropic_brain, fakes.chat_brain, fakes.serve)


def test_chat_against_a_compatible_server_streams_the_answer_and_shows_the_gate() -> None:
    pytest.importorskip("openai")
    with serve(chat_brain()) as server:
        result = CliRunner().invoke(command, [
            "--model", "openai-chat:local-test", "--base-url", f"{server.url}/v1"],
            input="Weather in Lisboa?\n/quit\n")
    assert result.exit_code == 0, result.output
    assert "chatting with openai-chat:local-test" in result.output
    assert 'model proposes get_weather({"location": "Lisboa, PT"})' in result.output
    assert "host decided: allow" in result.output
    assert f"\n{FINAL}\n" in result.output
    assert len(server.requests) == 2
    assert server.requests[0].body["stream"] is True


def test_chat_keeps_one_session_across_prompts() -> None:
    pytest.importorskip("anthropic")
    with serve(anthropic_brain()) as server:
        result = CliRunner().invoke(command, [
            "--model", "anthropic:claude-test", "--base-url", server.url],
            input="Weather in Lisboa?\nAnd again?\n", env={"ANTHROPIC_API_KEY": "test-key"})
    assert result.exit_code == 0, result.output
    assert result.output.count(FINAL) == 2
    last = server.requests[-1].body["messages"]
    assert [m["role"] for m in last][:5] == ["user", "assistant", "user", "assistant", "user"]
    assert last[4]["content"] == "And again?"


def test_chat_asks_on_the_terminal_before_a_write() -> None:
    result = CliRunner().invoke(command, ["--model", "scripted:demo"], input=(
        "Save a note for the team: Lisboa 15 °C, partly cloudy.\ny\n"))
    assert result.exit_code == 0, result.output
    assert "approval needed" in result.output
    assert "person approved" in result.output
    assert "Saved the note to drafts/weather.md." in result.output


def test_a_denied_write_is_reported_to_the_model() -> None:
    result = CliRunner().invoke(command, ["--model", "scripted:demo"], input=(
        "Save a note for the team: Lisboa 15 °C, partly cloudy.\nn\n"))
    assert result.exit_code == 0, result.output
    assert "person denied" in result.output
    assert "I could not save the note" in result.output


def test_a_missing_key_is_one_line_naming_the_variable() -> None:
    pytest.importorskip("anthropic")
    result = CliRunner().invoke(command, ["--model", "anthropic:claude-test"],
                                env={"ANTHROPIC_API_KEY": ""})
    assert result.exit_code == 1
    assert result.output.strip() == "Error: no Anthropic API key: set ANTHROPIC_API_KEY"


@pytest.mark.parametrize(("reference", "message"), [
    ("nowhere", "must look like module:attribute"),
    ("anfitrion._demo:nothing", "has no attribute 'nothing'"),
    ("anfitrion._demo:SCENES", "is not a Toolbox or tool source"),
])
def test_a_bad_tools_reference_is_a_clear_error(reference: str, message: str) -> None:
    result = CliRunner().invoke(command, ["--tools", reference])
    assert result.exit_code == 1
    assert message in result.output


def test_tools_given_as_a_factory_are_offered() -> None:
    result = CliRunner().invoke(command, ["--tools", "anfitrion._demo:demo_toolbox"],
                                input="Weather in Lisboa?\n")
    assert result.exit_code == 0, result.output
    assert "host ran get_weather" in result.output
