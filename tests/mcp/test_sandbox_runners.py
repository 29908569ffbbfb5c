"""What a ``uvx`` or ``pipx run`` server runs is resolved offline, pinned, and a different
version under the same command blocks the server until reviewed.

The real ``uv`` and ``pipx`` (the test extra installs both) install a package built here
into folders of the test's own, offline (``--no-index``, ``--find-links`` a folder of
wheels): the version the resolution reads from disk is the one the runner then runs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from anfitrion.mcp._config import ServerConfig, parse_config
from anfitrion.mcp._pinning import PinBook, server_identity
from anfitrion.mcp._resolve import resolve_program
from anfitrion.store import MemoryStore

PACKAGE = "anfitrion-probe-server"
MODULE = "anfitrion_probe_server"


def _runner(name: str) -> str:
    found = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}"
                                    f"{os.environ.get('PATH', '')}")
    if found is None:
        message = f"{name} is not installed (pip install -e '.[test]' installs it)"
        if os.environ.get("ANFITRION_REQUIRE_SANDBOX") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _wheel(folder: Path, version: str) -> None:
    """A wheel of a package that prints its version: no dependency, nothing to download."""
    info = f"{MODULE}-{version}.dist-info"
    files = {
        f"{MODULE}/__init__.py": f"def main():\n    print('probe {version}')\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: anfitrion-tests\n"
                         "Root-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{PACKAGE} = {MODULE}:main\n",
    }
    record = []
    with zipfile.ZipFile(folder / f"{MODULE}-{version}-py3-none-any.whl", "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest())
            record.append(f"{name},sha256={digest.rstrip(b'=').decode()},{len(text.encode())}")
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The runners' folders (all under *tmp_path*) and an offline index of two versions."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0.0", "1.1.0"):
        _wheel(wheels, version)
    bin_dir = str(Path(sys.executable).parent)
    return {
        "HOME": str(tmp_path / "home"), "PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "UV_TOOL_DIR": str(tmp_path / "uv-tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "uv-bin"),
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(tmp_path / "pipx-bin"), "UV_PYTHON": os.path.realpath(sys.executable),
        "UV_PYTHON_DOWNLOADS": "never", "UV_OFFLINE": "1", "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(wheels), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels),
        "PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1", "PIPX_DEFAULT_BACKEND": "uv",
    }


def _run(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout.strip()


def _entry(command: str, args: list[str], env: dict[str, str]) -> ServerConfig:
    """A server entry whose ``env`` carries the runner's folders, as a config would."""
    keys = ("UV_TOOL_DIR", "UV_CACHE_DIR", "PIPX_HOME", "UV_OFFLINE", "UV_NO_INDEX",
            "UV_FIND_LINKS", "UV_PYTHON", "UV_PYTHON_DOWNLOADS", "PIPX_DEFAULT_BACKEND")
    return parse_config({"mcpServers": {"s": {
        "command": command, "args": args, "env": {k: env[k] for k in keys}}}}).servers["s"]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection or name lookup from this process fails the test."""
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the resolution reached for the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


async def _approve(book: PinBook, config: ServerConfig) -> None:
    await book.observe_server("s", None, server_identity(config))
    await book.approve("s", by="operator")


@pytest.mark.anyio
async def test_uvx_runs_the_installed_tool_its_version_is_pinned_and_an_upgrade_reblocks(
        env: dict[str, str], offline: None) -> None:
    uv, uvx = _runner("uv"), _runner("uvx")
    _run(env, uv, "tool", "install", f"{PACKAGE}==1.0.0")
    assert _run(env, uvx, PACKAGE) == "probe 1.0.0"
    config = _entry(uvx, [PACKAGE], env)
    runs = server_identity(config)["runs"]
    assert (runs["package"], runs["version"], runs["requested"]) == (PACKAGE, "1.0.0", None)
    book = PinBook(MemoryStore())
    await _approve(book, config)
    assert await book.launch_refused("s", server_identity(config)) is None
    _run(env, uv, "tool", "install", "--force", f"{PACKAGE}==1.1.0")  # the same command...
    assert _run(env, uvx, PACKAGE) == "probe 1.1.0"  # ...now runs something else
    refused = await book.launch_refused("s", server_identity(config))
    assert refused and "version '1.0.0' → '1.1.0'" in refused, refused


def test_uvx_with_a_requested_version_resolves_the_cached_environment_of_that_version(
        env: dict[str, str], offline: None) -> None:
    uv, uvx = _runner("uv"), _runner("uvx")
    _run(env, uv, "tool", "install", f"{PACKAGE}==1.0.0")
    assert _run(env, uvx, f"{PACKAGE}@1.1.0") == "probe 1.1.0"
    environ = {**env}
    runs = resolve_program(uvx, [f"{PACKAGE}@1.1.0"], env_path=env["PATH"], environ=environ)
    assert (runs["requested"], runs["version"]) == ("1.1.0", "1.1.0")
    # the installed tool answers a request for its own version, and no other
    runs = resolve_program(uvx, ["--from", f"{PACKAGE}==1.0.0", PACKAGE],
                           env_path=env["PATH"], environ=environ)
    assert (runs["requested"], runs["version"]) == ("1.0.0", "1.0.0")
    runs = resolve_program(uvx, [f"{PACKAGE}@9.9.9"], env_path=env["PATH"], environ=environ)
    assert (runs["requested"], runs["version"]) == ("9.9.9", None)  # uvx would download it


@pytest.mark.anyio
async def test_pipx_run_resolves_its_newest_cached_environment_and_a_new_one_reblocks(
        env: dict[str, str], offline: None) -> None:
    pipx = _runner("pipx")
    _runner("uv")  # pipx runs through uv's cache when uv is installed (its uv backend)
    assert _run(env, pipx, "run", f"{PACKAGE}==1.0.0") == "probe 1.0.0"
    # what `pipx install` makes is never what `pipx run` runs
    _run(env, pipx, "install", f"{PACKAGE}==1.1.0")
    config = _entry(pipx, ["run", PACKAGE], env)
    runs = server_identity(config)["runs"]
    assert (runs["package"], runs["version"]) == (PACKAGE, "1.0.0"), runs
    book = PinBook(MemoryStore())
    await _approve(book, config)
    assert _run(env, pipx, "run", f"{PACKAGE}==1.1.0") == "probe 1.1.0"
    refused = await book.launch_refused("s", server_identity(config))
    assert refused and "version '1.0.0' → '1.1.0'" in refused, refused


def test_lock_writes_the_versions_uvx_and_pipx_run_will_run(
        env: dict[str, str], tmp_path: Path, offline: None) -> None:
    from click.testing import CliRunner

    from anfitrion._cli.mcp import command
    uv, uvx, pipx = _runner("uv"), _runner("uvx"), _runner("pipx")
    _run(env, uv, "tool", "install", f"{PACKAGE}==1.0.0")
    _run(env, pipx, "run", f"{PACKAGE}==1.1.0")
    config = tmp_path / "mcp.json"
    uvx_entry = _entry(uvx, [PACKAGE], env)
    config.write_text(json.dumps({"mcpServers": {
        "u": {"command": uvx, "args": [PACKAGE], "env": dict(uvx_entry.env)},
        "p": {"command": pipx, "args": ["run", PACKAGE], "env": dict(uvx_entry.env)}}}))
    result = CliRunner().invoke(command, ["lock", "--config", str(config)],
                                obj={"store": MemoryStore()})
    assert result.exit_code == 0, result.output
    args = {k: v["args"] for k, v in json.loads(config.read_text())["mcpServers"].items()}
    assert args == {"u": [f"{PACKAGE}@1.0.0"], "p": ["run", f"{PACKAGE}==1.1.0"]}
    # the locked commands run the locked versions
    assert _run(env, uvx, *args["u"]) == "probe 1.0.0"
    assert _run(env, pipx, *args["p"]) == "probe 1.1.0"
    again = CliRunner().invoke(command, ["lock", "--config", str(config), "--check"],
                               obj={"store": MemoryStore()})
    assert again.exit_code == 0 and "already u" in again.output and "already p" in again.output
