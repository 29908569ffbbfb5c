"""The reference servers work unchanged inside the default sandbox profile: PyPI's
mcp-server-time and mcp-server-git (its repository granted read-write), and npm's
@modelcontextprotocol/server-filesystem with its root granted read-write
(tests/mcp/install_sandbox.sh installs it into ~/.cache/anfitrion/mcp-servers)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp_helpers import through_gate

from anfitrion._approvals import CallbackApprover
from anfitrion._principal import Principal
from anfitrion._tools import OfferContext
from anfitrion.mcp import _sandbox
from anfitrion.mcp._config import ServerConfig, parse_config
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]
_CALLS = itertools.count(1)

SERVERS_HOME = Path(os.environ.get("ANFITRION_MCP_SERVERS_HOME",
                                   Path.home() / ".cache" / "anfitrion" / "mcp-servers"))


def _require(found: bool, what: str) -> None:
    if not found:
        if os.environ.get("ANFITRION_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"{what} (run tests/mcp/install_sandbox.sh)")
        pytest.skip(f"{what} (tests/mcp/install_sandbox.sh installs it)")


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    problem = _sandbox.bwrap_problem()
    _require(problem is None, f"the sandbox cannot run: {problem}")


@pytest.fixture
def filesystem_entry() -> str:
    found = sorted(SERVERS_HOME.glob("filesystem-*/node_modules/@modelcontextprotocol/"
                                     "server-filesystem/dist/index.js"))
    _require(bool(found) and shutil.which("node") is not None,
             "no @modelcontextprotocol/server-filesystem or no node")
    return str(found[-1])


async def _approved_tools(configs: list[ServerConfig], store: MemoryStore) -> list:  # type: ignore[type-arg]
    async with McpServers(configs, store) as servers:
        result = await servers.refresh()
        for server_id, statuses in result.items():
            assert not isinstance(statuses, Exception), (server_id, statuses)
    book = PinBook(store)
    for pin in await book.pins():
        await book.approve(pin.name, by="operator")
    return configs


async def _call(configs: list[ServerConfig], store: MemoryStore, name: str,
                arguments: dict) -> str:  # type: ignore[type-arg]
    async with McpServers(configs, store) as servers:
        tools = await servers.list_tools(OfferContext(Principal("tester"), "session-1"))
        outcome = await through_gate(tools, name, arguments, store,
                                     approver=CallbackApprover(lambda r: True),
                                     call_id=f"call-{next(_CALLS)}")
        assert not outcome.result.is_error, outcome.result.content
        return str(outcome.result.content)


async def test_the_filesystem_server_works_inside_with_its_root_bound_rw(
        filesystem_entry: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "hello.txt").write_text("hello from the host")
    config = parse_config({"mcpServers": {"fs": {
        "command": "node", "args": [filesystem_entry, str(root)],
        "sandbox": {"paths": [{"path": str(root), "mode": "rw"}]}}}}).servers["fs"]
    assert config.sandbox.enabled
    store = MemoryStore()
    await _approved_tools([config], store)
    assert "hello from the host" in await _call([config], store, "fs.read_text_file",
                                                {"path": str(root / "hello.txt")})
    wrote = await _call([config], store, "fs.write_file", {"path": str(root / "new.txt"),
                                                           "content": "written inside"})
    assert "Successfully wrote" in wrote, wrote
    assert (root / "new.txt").read_text() == "written inside"


async def test_time_and_git_work_inside_the_default_profile(
        time_server: ServerConfig, git_repo: Path) -> None:
    git = parse_config({"mcpServers": {"git": {
        "command": sys.executable, "trusted": True,
        "args": ["-m", "mcp_server_git", "--repository", str(git_repo)],
        "sandbox": {"paths": [{"path": str(git_repo), "mode": "rw"}]}}}}).servers["git"]
    assert time_server.sandbox.enabled and git.sandbox.enabled
    store = MemoryStore()
    await _approved_tools([time_server, git], store)
    assert json.loads(await _call([time_server], store, "time.get_current_time",
                                  {"timezone": "UTC"}))["timezone"] == "UTC"
    assert "First commit" in await _call([git], store, "git.git_log",
                                         {"repo_path": str(git_repo)})
    (git_repo / "b.txt").write_text("b")
    await _call([git], store, "git.git_add", {"repo_path": str(git_repo), "files": ["b.txt"]})
    assert "b.txt" in await _call([git], store, "git.git_status", {"repo_path": str(git_repo)})
