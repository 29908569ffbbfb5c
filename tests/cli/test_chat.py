"""``anfitrion chat`` through click's runner, against a local OpenAI-compatible server."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from anfitrion._cli.chat import command


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
    assert "person declined" in result.output
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


def test_chat_applies_the_project_policy_principal_and_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anfitrion_home: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "anfitrion.toml").write_text(
        '[[rules]]\ntool = "write_draft"\nroles = ["editor"]\nverdict = "allow"\n'
        'reason = "editors write drafts"\n\n[principals.ana]\nroles = ["editor"]\n')
    result = CliRunner().invoke(command, ["--principal", "ana"], input=(
        "Save a note for the team: Lisboa 15 °C, partly cloudy.\n"))
    assert result.exit_code == 0, result.output
    assert "as ana (policy anfitrion.toml" in result.output
    assert f"store sqlite:///{anfitrion_home / 'anfitrion.db'}" in result.output
    assert "host decided: allow — editors write drafts" in result.output
    assert "approval needed" not in result.output
    assert (anfitrion_home / "anfitrion.db").exists()
    other = CliRunner().invoke(command, ["--principal", "bob"], input=(
        "Save a note for the team: Lisboa 15 °C, partly cloudy.\nn\n"))
    assert "approval needed" in other.output


def test_ctrl_c_during_a_request_cancels_the_turn_and_the_chat_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    import anyio

    from anfitrion._cli import chat
    from anfitrion.models._base import ModelRequest
    from anfitrion.testing import ScriptedModel

    asked: list[ModelRequest] = []

    async def think(request: ModelRequest) -> str:
        asked.append(request)
        if len(asked) == 1:  # the first request: the person presses Ctrl-C
            signal.raise_signal(signal.SIGINT)
            await anyio.Event().wait()  # never set: only the cancellation ends it
        return "the second answer"

    monkeypatch.setattr(chat, "resolve_model", lambda spec, base_url: ScriptedModel(think))
    result = CliRunner().invoke(command, ["--store", "memory://"],
                                input="first question\nsecond question\n")
    assert result.exit_code == 0, result.output
    assert "[turn cancelled]" in result.output
    assert "Aborted" not in result.output
    assert "the second answer" in result.output


def test_a_base_url_that_wants_a_key_says_to_set_openai_api_key() -> None:
    pytest.importorskip("openai")
    refused = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                         "code": "invalid_api_key"}}
    with serve(lambda path, body: (401, refused)) as server:
        result = CliRunner().invoke(command, [
            "--model", "openai-chat:local-test", "--base-url", f"{server.url}/v1",
            "--store", "memory://"], input="Hello?\n", env={"OPENAI_API_KEY": ""})
    assert result.exit_code == 0, result.output
    assert f"hint: the server at {server.url}/v1 wants an API key: set OPENAI_API_KEY" \
        in result.output


def test_tools_in_the_current_folder_load_without_pythonpath(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "chat_folder_tools.py").write_text(
        "from anfitrion._demo import demo_toolbox\n\ndef tools():\n    return demo_toolbox()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    result = CliRunner().invoke(command, ["--tools", "chat_folder_tools:tools",
                                          "--store", "memory://"], input="Weather in Lisboa?\n")
    assert result.exit_code == 0, result.output
    assert "host ran get_weather" in result.output
