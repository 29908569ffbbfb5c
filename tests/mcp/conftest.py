"""Fixtures for the MCP tests: real servers over stdio, the hostile one, a memory store."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# tests/mcp is not a package (its name would shadow the `mcp` SDK): its helper module is
# imported from this folder.
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "servers"))  # the servers' helper, for imports
from mcp_helpers import MALICIOUS

from anfitrion._principal import Principal
from anfitrion._tools import OfferContext
from anfitrion.mcp._config import ServerConfig
from anfitrion.store import MemoryStore


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def offer() -> OfferContext:
    return OfferContext(Principal("tester"), "session-1")


@pytest.fixture
def malicious(tmp_path: Path) -> Callable[..., ServerConfig]:
    def make(*extra: str, server_id: str = "mal", **options: Any) -> ServerConfig:
        return ServerConfig(id=server_id, command=sys.executable,
                            args=(MALICIOUS, "--trash", str(tmp_path), *extra), **options)
    return make


@pytest.fixture
def time_server() -> ServerConfig:
    return ServerConfig(id="time", command=sys.executable,
                        args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
                        trusted=True)


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.org",
           "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "README").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "README"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "First commit"], check=True,
                   env=env)
    return repo


@pytest.fixture
def git_server(git_repo: Path) -> ServerConfig:
    return ServerConfig(id="git", command=sys.executable,
                        args=("-m", "mcp_server_git", "--repository", str(git_repo)),
                        trusted=True)

