"""The sandbox profile: parsed from the MCP config with one-line errors, turned into a bwrap
command line (a pure function), pinned with the server's identity (widening re-blocks,
narrowing does not), and said in words for the review."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion.exceptions import ConfigError
from anfitrion.mcp import _sandbox
from anfitrion.mcp._config import load_config, parse_config
from anfitrion.mcp._pinning import PinBook, PinState, identity_changes, server_identity
from anfitrion.mcp._resolve import package_spec, resolve_program
from anfitrion.mcp._sandbox import (
    OFF,
    PathGrant,
    SandboxLimits,
    SandboxProfile,
    bwrap_argv,
    describe_profile,
    profile_identity,
    program_paths,
    widenings,
)
from anfitrion.store import MemoryStore

HOME = "/home/ada"


def _server(sandbox: Any, **entry: Any) -> dict[str, Any]:
    return {"mcpServers": {"s": {"command": "python3", "args": ["server.py"],
                                 "sandbox": sandbox, **entry}}}


def _profile(sandbox: Any) -> SandboxProfile:
    return parse_config(_server(sandbox), path="/etc/anfitrion/mcp.json",
                        environ={"HOME": HOME}).servers["s"].sandbox


def test_the_default_profile_grants_no_path_no_network_and_bounded_limits() -> None:
    profile = parse_config({"mcpServers": {"s": {"command": "x"}}}).servers["s"].sandbox
    assert profile == SandboxProfile() and profile.enabled
    assert profile.paths == () and profile.network == ()
    assert profile.limits == SandboxLimits(4096, 3600, 256, 1024)


def test_paths_network_and_limits_are_parsed_and_normalised() -> None:
    profile = _profile({"paths": [{"path": "~/projects/x", "mode": "rw"}, "data",
                                  {"path": "/srv/a/", "mode": "ro"}],
                        "network": ["API.GitHub.com:443", "127.0.0.1:5432"],
                        "limits": {"processes": 32, "memoryMB": 512}})
    assert profile.paths == (PathGrant("/etc/anfitrion/data", "ro"),
                             PathGrant(f"{HOME}/projects/x", "rw"), PathGrant("/srv/a", "ro"))
    assert profile.network == ("127.0.0.1:5432", "api.github.com:443")
    assert (profile.limits.processes, profile.limits.memory_mb, profile.limits.open_files) == (
        32, 512, 1024)
    assert _profile("off") == OFF and not OFF.enabled


@pytest.mark.parametrize(("sandbox", "key", "words"), [
    ("on", "mcpServers.s.sandbox", "must be \"off\" or an object"),
    ({"paths": [{"path": "/"}]}, "mcpServers.s.sandbox.paths[0].path", "would undo"),
    ({"paths": [{"path": "/srv/../etc"}]}, "mcpServers.s.sandbox.paths[0].path", "'..'"),
    ({"paths": [{"path": "/srv", "mode": "rwx"}]}, "mcpServers.s.sandbox.paths[0].mode", "ro"),
    ({"paths": [{"path": "/srv\x00x"}]}, "mcpServers.s.sandbox.paths[0].path", "visible"),
    ({"paths": "/srv"}, "mcpServers.s.sandbox.paths", "must be a list"),
    ({"network": "all"}, "mcpServers.s.sandbox.network", "must be \"none\""),
    ({"network": ["*:443"]}, "mcpServers.s.sandbox.network[0]", "no wildcards"),
    ({"network": ["example.com"]}, "mcpServers.s.sandbox.network[0]", "host:port"),
    ({"network": ["example.com:0"]}, "mcpServers.s.sandbox.network[0]", "host:port"),
    ({"network": ["example.com:70000"]}, "mcpServers.s.sandbox.network[0]", "host:port"),
    ({"limits": {"processes": 0}}, "mcpServers.s.sandbox.limits.processes", "whole number"),
    ({"limits": {"processes": True}}, "mcpServers.s.sandbox.limits.processes", "whole"),
    ({"limits": {"memoryMB": 1.5}}, "mcpServers.s.sandbox.limits.memoryMB", "whole number"),
    ({"limits": {"seccomp": 1}}, "mcpServers.s.sandbox.limits", "unknown keys"),
    ({"network": [], "share": True}, "mcpServers.s.sandbox", "unknown keys"),
])
def test_a_bad_profile_is_one_line_naming_the_key(sandbox: Any, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_server(sandbox), path="mcp.json", environ={"HOME": HOME})
    message = str(caught.value)
    assert key in message and words in message and "\n" not in message, message


def test_a_bad_profile_in_a_file_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(_server({"paths": [{"path": "/", "mode": "rw"}]}), indent=2))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and caught.value.line is not None


def test_an_http_server_takes_no_sandbox() -> None:
    with pytest.raises(ConfigError, match="stdio servers"):
        parse_config({"mcpServers": {"h": {"url": "https://x.example/mcp", "sandbox": "off"}}})


@given(st.text(max_size=40))
def test_any_path_text_either_parses_to_a_clean_absolute_path_or_fails_in_one_line(
        text: str) -> None:
    try:
        profile = _profile({"paths": [text]})
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    (grant,) = profile.paths
    assert os.path.isabs(grant.path) and ".." not in Path(grant.path).parts
    assert grant.path != "/" and grant.path == os.path.normpath(grant.path)


# -- the command line ---------------------------------------------------------------------

def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_the_command_line_unshares_everything_and_binds_only_what_is_granted() -> None:
    profile = SandboxProfile(paths=(PathGrant("/srv/data", "rw"), PathGrant("/srv/ref", "ro")))
    argv = bwrap_argv(profile, ["python3", "server.py"], bwrap="/usr/bin/bwrap",
                      program=["/opt/py", "/opt/py/bin/python3"], hidden=[], cwd=None)
    command = argv[argv.index("--") + 1:]
    assert argv[0] == "/usr/bin/bwrap" and command[-2:] == ["python3", "server.py"]
    head = argv[:argv.index("--")]
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                 "--die-with-parent", "--new-session"):
        assert flag in head
    assert "--share-net" not in head
    assert _pairs(head, "--bind-try") == [("/srv/data", "/srv/data")]
    ro = _pairs(head, "--ro-bind-try") + _pairs(head, "--ro-bind")
    assert ("/srv/ref", "/srv/ref") in ro and ("/opt/py", "/opt/py") in ro
    assert ("/opt/py/bin/python3", "/opt/py/bin/python3") not in ro  # inside /opt/py already
    assert not any(src in ("/", os.environ.get("HOME", "/root")) for src, _ in ro)
    assert head[head.index("--tmpfs") + 1] == "/tmp"
    assert head[-2:] == ["--chdir", "/tmp"] and "--remount-ro" in head
    assert command[0] == "prlimit" and "--nproc=256" in command and "--nofile=1024" in command
    assert f"--as={4096 * 1024 * 1024}" in command and "--cpu=3600" in command


def test_protected_files_inside_a_granted_folder_are_masked(tmp_path: Path) -> None:
    (tmp_path / "anfitrion.db").write_text("x")
    (tmp_path / "keys").mkdir()
    profile = SandboxProfile(paths=(PathGrant(str(tmp_path), "rw"),))
    argv = bwrap_argv(profile, ["x"], hidden=[str(tmp_path / "anfitrion.db"),
                                              str(tmp_path / "keys"),
                                              str(tmp_path / "absent")])
    head = argv[:argv.index("--")]
    assert ("/dev/null", str(tmp_path / "anfitrion.db")) in _pairs(head, "--ro-bind")
    keys = head.index(str(tmp_path / "keys"))
    assert head[keys - 1] == "--tmpfs" and head[keys + 1:keys + 3] == ["--remount-ro",
                                                                        str(tmp_path / "keys")]
    assert str(tmp_path / "absent") not in head
    elsewhere = bwrap_argv(SandboxProfile(), ["x"], hidden=[str(tmp_path / "anfitrion.db")])
    assert str(tmp_path / "anfitrion.db") not in elsewhere  # not even its name shows
    # the masks come after the grant, so they cover it
    assert head.index(str(tmp_path / "anfitrion.db")) > head.index(str(tmp_path))


def test_a_proxy_socket_and_the_forwarder_come_with_declared_destinations() -> None:
    profile = SandboxProfile(network=("api.github.com:443",))
    argv = bwrap_argv(profile, ["srv"], proxy_socket="/run/x/egress.sock",
                      forwarder=["py", "fwd.py", "--"])
    assert ("/run/x/egress.sock", _sandbox.PROXY_SOCKET) in _pairs(argv, "--ro-bind")
    assert "--unshare-net" in argv
    assert argv[-4:] == ["py", "fwd.py", "--", "srv"]
    assert _sandbox.sandbox_env({"PATH": "/usr/bin"}, profile)["HTTPS_PROXY"] == \
        f"http://127.0.0.1:{_sandbox.PROXY_PORT}"
    assert _sandbox.sandbox_env({"HOME": "/root"}, SandboxProfile())["HOME"] == "/tmp"


def test_an_off_profile_has_no_command_line() -> None:
    with pytest.raises(ValueError, match="off"):
        bwrap_argv(OFF, ["x"])


def test_the_program_needs_its_interpreter_venv_and_script_folder_but_not_home() -> None:
    script = str(Path(__file__).parent / "servers" / "hostile.py")
    found = program_paths(sys.executable, [script], path=os.environ.get("PATH"),
                          home=os.environ.get("HOME"))
    assert str(Path(script).parent) in found
    assert os.path.realpath(sys.executable) in found or any(
        os.path.realpath(sys.executable).startswith(p + "/") for p in found)
    assert sys.prefix in found  # the venv (and what its .pth files add: the editable src)
    home = os.environ.get("HOME")
    assert home not in found and "/" not in found


def test_a_node_package_brings_the_folder_holding_node_modules(tmp_path: Path) -> None:
    entry = tmp_path / "pkg" / "node_modules" / "@scope" / "srv" / "dist" / "index.js"
    entry.parent.mkdir(parents=True)
    entry.write_text("")
    assert str(tmp_path / "pkg") in program_paths("node", [str(entry)], path="/usr/bin",
                                                  home="/nonexistent")


# -- identity ---------------------------------------------------------------------------------

def _identity(profile: SandboxProfile) -> dict[str, Any]:
    return profile_identity(profile)


@pytest.mark.parametrize(("before", "after", "wider"), [
    (SandboxProfile(), SandboxProfile(paths=(PathGrant("/srv/x"),)), "can read /srv/x"),
    (SandboxProfile(paths=(PathGrant("/srv/x"),)),
     SandboxProfile(paths=(PathGrant("/srv/x", "rw"),)), "can write /srv/x"),
    (SandboxProfile(paths=(PathGrant("/srv/x"),)),
     SandboxProfile(paths=(PathGrant("/srv"),)), "can read /srv"),
    (SandboxProfile(), SandboxProfile(network=("evil.example:443",)), "evil.example:443"),
    (SandboxProfile(), SandboxProfile(limits=SandboxLimits(processes=10_000)), "processes"),
    (SandboxProfile(), OFF, "sandbox turned off"),
])
def test_widening_is_named(before: SandboxProfile, after: SandboxProfile, wider: str) -> None:
    found = widenings(_identity(before), _identity(after))
    assert found and any(wider in w for w in found), found


@pytest.mark.parametrize(("before", "after"), [
    (SandboxProfile(paths=(PathGrant("/srv", "rw"),)),
     SandboxProfile(paths=(PathGrant("/srv/x", "ro"),))),
    (SandboxProfile(network=("a.example:443", "b.example:443")),
     SandboxProfile(network=("a.example:443",))),
    (SandboxProfile(limits=SandboxLimits(processes=64)), SandboxProfile(
        limits=SandboxLimits(processes=8))),
    (OFF, SandboxProfile()),
    (SandboxProfile(), SandboxProfile()),
])
def test_narrowing_is_not_a_widening(before: SandboxProfile, after: SandboxProfile) -> None:
    assert widenings(_identity(before), _identity(after)) == []


def test_a_path_that_only_starts_like_a_granted_one_is_new() -> None:
    before = _identity(SandboxProfile(paths=(PathGrant("/srv/x"),)))
    assert widenings(before, _identity(SandboxProfile(paths=(PathGrant("/srv/x2"),))))


def test_the_profile_in_words() -> None:
    words = describe_profile(SandboxProfile(paths=(PathGrant(f"{HOME}/projects/x"),
                                                   PathGrant("/srv/out", "rw")),
                                            network=("api.github.com:443",)), home=HOME)
    assert "can read ~/projects/x" in words and "can read and write /srv/out" in words
    assert "can reach api.github.com:443" in words and "no other network" in words
    assert "no network" in describe_profile(SandboxProfile(), home=HOME)
    assert describe_profile(OFF)[0].startswith("NOT SANDBOXED")


# -- pinning ----------------------------------------------------------------------------------

def _config(tmp_path: Path, sandbox: Any, args: list[str] | None = None) -> Any:
    script = tmp_path / "server.py"
    if not script.exists():
        script.write_text("print('v1')\n")
    return parse_config({"mcpServers": {"s": {"command": sys.executable,
                                              "args": args or [str(script)],
                                              "sandbox": sandbox}}},
                        path=str(tmp_path / "mcp.json")).servers["s"]


async def _approved(book: PinBook, config: Any) -> None:
    await book.observe_server("s", None, server_identity(config))
    await book.approve("s", by="operator")


@pytest.mark.anyio
@pytest.mark.parametrize("wider", [
    {"paths": [{"path": "/srv/a", "mode": "ro"}, {"path": "/srv/b", "mode": "ro"}]},
    {"paths": [{"path": "/srv/a", "mode": "rw"}]},
    {"paths": [{"path": "/srv/a"}], "network": ["api.example:443"]},
    {"paths": [{"path": "/srv"}]},
    {"paths": [{"path": "/srv/a"}], "limits": {"memoryMB": 65536}},
    "off",
])
async def test_a_profile_widened_in_place_blocks_the_server_until_reviewed(
        tmp_path: Path, wider: Any) -> None:
    book = PinBook(MemoryStore())
    await _approved(book, _config(tmp_path, {"paths": [{"path": "/srv/a"}]}))
    widened = server_identity(_config(tmp_path, wider))
    refused = await book.launch_refused("s", widened)
    assert refused and "sandbox" in refused, refused
    pin = await book.observe_server("s", None, widened)
    assert pin.state is PinState.CHANGED


@pytest.mark.anyio
async def test_a_narrowed_profile_stays_approved(tmp_path: Path) -> None:
    book = PinBook(MemoryStore())
    await _approved(book, _config(tmp_path, {"paths": [{"path": "/srv", "mode": "rw"}],
                                             "network": ["a.example:443"]}))
    narrowed = server_identity(_config(tmp_path, {"paths": [{"path": "/srv/a"}]}))
    assert await book.launch_refused("s", narrowed) is None
    pin = await book.observe_server("s", None, narrowed)
    assert pin.state is PinState.APPROVED and pin.approved_by == "anfitrion (sandbox narrowed)"
    # and widening back to what was approved before is a widening of what is approved now
    back = server_identity(_config(tmp_path, {"paths": [{"path": "/srv", "mode": "rw"}]}))
    assert await book.launch_refused("s", back)


@pytest.mark.anyio
async def test_a_changed_script_or_executable_blocks_the_server(tmp_path: Path) -> None:
    book = PinBook(MemoryStore())
    config = _config(tmp_path, None)
    await _approved(book, config)
    assert await book.launch_refused("s", server_identity(config)) is None
    (tmp_path / "server.py").write_text("print('v2: something else')\n")
    changed = server_identity(config)
    refused = await book.launch_refused("s", changed)
    assert refused and "script_sha256" in refused, refused


def test_a_package_runner_records_the_installed_version(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "@scope" / "srv"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@scope/srv", "version": "1.2.3"}))
    runs = resolve_program("npx", ["-y", "@scope/srv", "/data"], env_path="/usr/bin",
                           cwd=str(tmp_path), environ={"HOME": str(tmp_path / "h")})
    assert (runs["package"], runs["version"], runs["requested"]) == ("@scope/srv", "1.2.3", None)
    (package / "package.json").write_text(json.dumps({"name": "@scope/srv", "version": "1.2.4"}))
    after = resolve_program("npx", ["-y", "@scope/srv", "/data"], env_path="/usr/bin",
                            cwd=str(tmp_path), environ={"HOME": str(tmp_path / "h")})
    before_identity = {"transport": "stdio", "runs": runs, "sandbox": {"mode": "bwrap"}}
    after_identity = {"transport": "stdio", "runs": after, "sandbox": {"mode": "bwrap"}}
    assert any("version '1.2.3' → '1.2.4'" in c
               for c in identity_changes(before_identity, after_identity))


def test_python_module_servers_record_their_distribution_version() -> None:
    runs = resolve_program(sys.executable, ["-m", "mcp_server_time"], env_path=None)
    assert runs["package"] == "mcp-server-time" and runs["version"]
    assert len(runs["sha256"]) == 64


@pytest.mark.parametrize(("command", "args", "spec"), [
    ("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/x"],
     (1, "@modelcontextprotocol/server-filesystem")),
    ("uvx", ["mcp-server-git", "--repository", "."], (0, "mcp-server-git")),
    ("uvx", ["--from", "mcp-server-git==1.0", "mcp-server-git"], (1, "mcp-server-git==1.0")),
    ("pipx", ["run", "mcp-server-time"], (1, "mcp-server-time")),
    ("/usr/bin/npx", ["--yes", "pkg@2"], (1, "pkg@2")),
    ("python3", ["-m", "x"], None),
    ("pipx", ["install", "x"], None),
])
def test_the_package_of_a_runner_is_found(command: str, args: list[str],
                                          spec: tuple[int, str] | None) -> None:
    assert package_spec(command, args) == spec


# -- the CLI: review says the profile in words, lock writes versions ---------------------------

def _cli(*args: str, color: bool = False) -> Any:
    from click.testing import CliRunner

    from anfitrion._cli.mcp import command
    return CliRunner().invoke(command, list(args), obj={"store": MemoryStore()}, color=color)


def test_review_says_the_profile_in_words_before_anything_runs_and_off_in_red(
        tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "boxed": {"command": sys.executable, "args": ["-m", "mcp_server_time"],
                  "sandbox": {"paths": [{"path": str(tmp_path / "x"), "mode": "rw"}],
                              "network": ["api.github.com:443"]}},
        "bare": {"command": sys.executable, "args": ["-m", "mcp_server_time"],
                 "sandbox": "off"}}}))
    result = _cli("review", "--config", str(config), color=True)  # no terminal: starts nothing
    assert result.exit_code != 0
    out = result.output
    assert f"can read and write {tmp_path / 'x'}" in out
    assert "can reach api.github.com:443" in out and "no other network" in out
    assert "package: mcp-server-time" in out
    red = "\x1b[31m"
    assert any(red in line and "NOT SANDBOXED" in line for line in out.splitlines()), out


def test_lock_writes_the_installed_npx_version_and_is_idempotent(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "@scope" / "srv"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"version": "1.2.3"}))
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "@scope/srv", "/data"], "cwd": str(tmp_path)},
        "gone": {"command": "npx", "args": ["-y", "not-installed-anywhere-x"],
                 "cwd": str(tmp_path)},
        "local": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}}}))
    assert _cli("lock", "--config", str(config), "--check").exit_code == 1
    result = _cli("lock", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert "locked fs: @scope/srv@1.2.3" in result.output
    assert "skipped gone: not-installed-anywhere-x: not installed here" in result.output
    data = json.loads(config.read_text())
    assert data["mcpServers"]["fs"]["args"] == ["-y", "@scope/srv@1.2.3", "/data"]
    assert data["mcpServers"]["local"]["args"] == ["-m", "mcp_server_time"]
    again = _cli("lock", "--config", str(config), "--check")
    assert again.exit_code == 0 and "already fs: @scope/srv@1.2.3" in again.output
