"""Starting a server runs its command: review shows it first and starts it only with consent.
What a server launches is part of its pinned identity: a different command offering the same
definitions is blocked (and not started) until a person reviews it."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
from click.testing import CliRunner
from mcp_helpers import MALICIOUS

from anfitrion._cli.mcp import command
from anfitrion._tools import OfferContext
from anfitrion.exceptions import McpServerError
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._pinning import NAMESPACE, PinBook, server_key
from anfitrion.mcp._toolset import McpToolset
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]


def _write_config(path: Path, servers: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def _invoke(store: MemoryStore, *args: str) -> Any:
    return CliRunner().invoke(command, list(args), obj={"store": store})


@pytest.fixture
def pasted(tmp_path: Path) -> tuple[Path, Path]:
    """A config someone pasted: its "server" is a shell command that leaves a marker."""
    marker = tmp_path / "it-ran"
    config = _write_config(tmp_path / "mcp.json", {"helper": {
        "command": "sh", "args": ["-c", f"touch {marker}"],
        "env": {"SECRET_TOKEN": "hunter2-do-not-print"}}})
    return config, marker


@pytest.mark.parametrize("extra", [[], ["--json"], ["--all"]])
def test_review_without_consent_shows_the_command_and_runs_nothing(
        pasted: tuple[Path, Path], extra: list[str]) -> None:
    config, marker = pasted
    result = _invoke(MemoryStore(), "review", "--config", str(config), *extra)
    assert result.exit_code != 0
    assert not marker.exists()
    assert "runs:    sh" in result.output
    assert json.dumps(["-c", f"touch {marker}"]) in result.output
    assert "SECRET_TOKEN" in result.output
    assert "hunter2" not in result.output
    assert "nothing was started" in result.output


def test_review_with_launch_consent_starts_the_server(pasted: tuple[Path, Path]) -> None:
    config, marker = pasted
    result = _invoke(MemoryStore(), "review", "--launch", "--config", str(config))
    assert marker.exists()
    assert "── helper  [unreachable]" in result.output  # it was no MCP server at all


def test_an_http_server_shows_its_url_and_header_names_only(tmp_path: Path,
                                                            monkeypatch: Any) -> None:
    monkeypatch.setenv("DOCS_TOKEN", "s3cr3t-value")
    config = _write_config(tmp_path / "mcp.json", {"docs": {
        "url": "https://docs.example/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}})
    result = _invoke(MemoryStore(), "review", "--config", str(config))
    assert result.exit_code != 0
    assert "contacts: https://docs.example/mcp" in result.output
    assert "Authorization" in result.output
    assert "s3cr3t" not in result.output


def _interactive_review(tmp_path: Path, config: Path, answer: bytes) -> str:
    """``anfitrion mcp review`` in a real terminal (a pty), answering the prompt."""
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "anfitrion._cli.main", "mcp", "review", "--config", str(config),
         "--store", f"sqlite:///{tmp_path / 'a.db'}"],
        stdin=secondary, stdout=secondary, stderr=secondary, env=env, close_fds=True)
    os.close(secondary)
    output = b""
    answered = False
    try:
        while True:
            ready, _, _ = select.select([primary], [], [], 60)
            assert ready, f"the review neither asked nor ended: {output!r}"
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            output += chunk
            if not answered and b"as shown above?" in output:
                os.write(primary, answer)
                answered = True
    finally:
        os.close(primary)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert answered, output
    return output.decode("utf-8", "replace")


def test_an_interactive_no_starts_nothing_and_yes_starts_it(
        tmp_path: Path, pasted: tuple[Path, Path]) -> None:
    config, marker = pasted
    said_no = _interactive_review(tmp_path, config, b"n\n")
    assert "nothing was started" in said_no
    assert not marker.exists()
    _interactive_review(tmp_path, config, b"y\n")
    assert marker.exists()


def test_approve_hints_carry_the_store_and_untrusted_servers_say_annotations_are_ignored(
        tmp_path: Path) -> None:
    config = _write_config(tmp_path / "my config.json", {"mal": {
        "command": sys.executable, "args": [MALICIOUS]}})
    url = f"sqlite:///{tmp_path / 'pins.db'}"
    result = _invoke(MemoryStore(), "review", "--launch", "--config", str(config),
                     "--store", url)
    assert result.exit_code == 0, result.output
    assert (f"approve: anfitrion mcp approve --config '{config}' --store {url} mal.rug "
            "--digest ") in result.output
    assert "server 'mal' is not trusted: its annotations (readOnlyHint, idempotentHint, " \
           "openWorldHint) are ignored" in result.output
    assert '"trusted": true' in result.output


# -- identity ---------------------------------------------------------------------------------

async def _approve_everything(config: ServerConfig, store: MemoryStore) -> list[str]:
    async with McpToolset(config, store) as toolset:
        await toolset.refresh()
        for pin in await toolset.pins.pins(config.id):
            await toolset.pins.approve(pin.name, by="operator")
        statuses = await toolset.refresh()
    return sorted(s.name for s in statuses if s.offered)


def _offered(statuses: Any) -> list[str]:
    return sorted(s.name for s in statuses if s.offered)


async def test_the_same_id_launching_another_command_is_not_started_and_offers_nothing(
        tmp_path: Path, store: MemoryStore, offer: OfferContext) -> None:
    original = ServerConfig(id="mal", command=sys.executable, args=(MALICIOUS,))
    approved = await _approve_everything(original, store)
    assert "mal.rug" in approved
    marker = tmp_path / "impostor-ran"
    impostor = ServerConfig(id="mal", command="sh", args=(
        "-c", f'touch {marker}; exec "$0" "$@"', sys.executable, MALICIOUS))
    async with McpToolset(impostor, store) as toolset:
        with pytest.raises(McpServerError, match=r"what it launches changed .* command"):
            await toolset.refresh()
        assert await toolset.list_tools(offer) == []
    assert not marker.exists()


@pytest.mark.parametrize("change", [
    {"args": (MALICIOUS, "--trash", "/tmp")},
    {"env": {"EXTRA": "1"}},
    {"cwd": "/"},
])
async def test_any_change_of_what_is_launched_blocks_every_tool_until_reviewed(
        store: MemoryStore, offer: OfferContext, change: dict[str, Any]) -> None:
    original = ServerConfig(id="mal", command=sys.executable, args=(MALICIOUS,))
    approved = await _approve_everything(original, store)
    changed = ServerConfig(**{"id": "mal", "command": sys.executable, "args": (MALICIOUS,),
                              **change})
    async with McpToolset(changed, store, launch_changed=True) as toolset:  # as review does
        statuses = await toolset.refresh()
        assert _offered(statuses) == []
        rug = next(s for s in statuses if s.name == "mal.rug")
        assert rug.state == "blocked"
        assert f"what server 'mal' launches is not what was approved ({next(iter(change))}" \
            in rug.problem
        await toolset.pins.approve("mal", by="operator")
        assert _offered(await toolset.refresh()) == approved
    async with McpToolset(changed, store) as toolset:  # approved now: starts without consent
        assert _offered(await toolset.refresh()) == approved


async def test_env_values_are_pinned_as_digests_and_a_new_value_blocks(
        store: MemoryStore) -> None:
    original = ServerConfig(id="mal", command=sys.executable, args=(MALICIOUS,),
                            env={"API_TOKEN": "first-secret-value"})
    await _approve_everything(original, store)
    assert "first-secret-value" not in json.dumps(await store.list_records(NAMESPACE))
    rotated = ServerConfig(id="mal", command=sys.executable, args=(MALICIOUS,),
                           env={"API_TOKEN": "second-secret-value"})
    async with McpToolset(rotated, store) as toolset:
        with pytest.raises(McpServerError, match="env API_TOKEN has another value"):
            await toolset.refresh()


async def test_pins_approved_before_identities_existed_need_one_review(
        store: MemoryStore) -> None:
    config = ServerConfig(id="mal", command=sys.executable, args=(MALICIOUS,))
    book = PinBook(store)
    await book.observe_server("mal", None)  # how pins were recorded before: no identity
    await book.approve("mal", by="operator")
    async with McpToolset(config, store) as toolset:
        await toolset.refresh()
        for pin in await book.pins("mal"):
            if pin.tool is not None:
                await book.approve(pin.name, by="operator")
        statuses = await toolset.refresh()
        assert _offered(statuses) == []
        assert "no identity was recorded when the server was approved" in statuses[0].problem
        await book.approve("mal", by="operator")
        assert "mal.rug" in _offered(await toolset.refresh())
    record = await store.get_record(NAMESPACE, server_key("mal"))
    assert record is not None and record["approved_definition"]["launch"]["args"] == [MALICIOUS]


def test_review_shows_what_changed_in_the_launch(tmp_path: Path) -> None:
    store = MemoryStore()
    first = _write_config(tmp_path / "a.json", {"mal": {"command": sys.executable,
                                                         "args": [MALICIOUS]}})
    assert _invoke(store, "review", "--launch", "--config", str(first)).exit_code == 0
    assert _invoke(store, "approve", "mal.*", "--as", "op").exit_code == 0
    again = _invoke(store, "review", "--config", str(first))
    assert again.exit_code == 0 and "[approved before, unchanged]" in again.output
    second = _write_config(tmp_path / "b.json", {"mal": {"command": sys.executable,
                                                          "args": [MALICIOUS, "--notify"]}})
    refused = _invoke(store, "review", "--config", str(second))
    assert refused.exit_code != 0
    assert "needs your consent: changed: args" in refused.output
    shown = _invoke(store, "review", "--launch", "--config", str(second))
    assert "── mal  [changed]" in shown.output
    assert " ! launch:" in shown.output
    assert "what server 'mal' launches is not what was approved" in shown.output


