"""``anfitrion gateway --own-names``: one wrapped server presented under its own names, over
stdio as a desktop assistant spawns it; refused when more than one server is wrapped."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
from click.testing import CliRunner
from gateway_helpers import PROTOCOL, approve_all, protocol_server
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from anfitrion._cli.main import cli
from anfitrion.mcp._config import load_config
from anfitrion.store import open_store

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

ANFITRION = str(Path(sys.executable).parent / "anfitrion")


def write_config(path: Path, servers: list[str], **gateway: object) -> Path:
    path.write_text(json.dumps({
        "mcpServers": {s: {"command": sys.executable, "args": [PROTOCOL], "trusted": True}
                       for s in servers},
        "gateway": gateway}))
    return path


async def test_own_names_serve_the_servers_tools_under_the_names_it_gives_them(
        tmp_path: Path) -> None:
    config = write_config(tmp_path / "mcp.json", ["proto"])
    url = f"sqlite:///{tmp_path / 'anfitrion.db'}"
    store = open_store(url)
    try:
        await approve_all(list(load_config(config).servers.values()), store)
    finally:
        await store.close()
    env = {k: os.environ[k] for k in ("PYTHONPATH", "ANFITRION_HOME") if k in os.environ}
    params = StdioServerParameters(command=ANFITRION, env=env, args=[
        "gateway", "--config", str(config), "--store", url, "--own-names"])
    with anyio.fail_after(90):
        async with stdio_client(params, errlog=sys.__stderr__) as (read, write), \
                ClientSession(read, write) as client:
            await client.initialize()
            names = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("text", {})
    assert {"text", "image", "mixed"} <= names
    assert not any(n.startswith("proto.") for n in names)
    assert result.content[0].text == "plain text"  # type: ignore[union-attr]


def test_own_names_are_refused_for_two_servers_from_the_cli_and_the_config(
        tmp_path: Path) -> None:
    flag = write_config(tmp_path / "flag.json", ["a", "b"])
    setting = write_config(tmp_path / "setting.json", ["a", "b"], ownNames=True)
    runner = CliRunner()
    by_flag = runner.invoke(cli, ["gateway", "--config", str(flag), "--own-names"])
    by_setting = runner.invoke(cli, ["gateway", "--config", str(setting)])
    for outcome in (by_flag, by_setting):
        assert outcome.exit_code != 0
        assert "needs exactly one configured server, not 2" in outcome.output


def test_the_config_refuses_an_own_names_that_is_not_a_flag(tmp_path: Path) -> None:
    config = write_config(tmp_path / "mcp.json", ["a"], ownNames="yes")
    outcome = CliRunner().invoke(cli, ["gateway", "--config", str(config)])
    assert outcome.exit_code != 0
    assert "gateway.ownNames" in outcome.output and "true or false" in outcome.output


def test_a_server_entry_refuses_a_sampling_that_is_not_a_flag(tmp_path: Path) -> None:
    from anfitrion.exceptions import ConfigError
    from anfitrion.mcp._config import parse_config

    with pytest.raises(ConfigError, match=r"mcpServers\.a\.sampling"):
        parse_config({"mcpServers": {"a": {"command": "x", "sampling": "always"}}})
    parsed = parse_config({"mcpServers": {"a": {"command": "x", "elicitation": True}}})
    assert parsed.servers["a"].elicitation and not parsed.servers["a"].sampling
    assert protocol_server().sampling is False
