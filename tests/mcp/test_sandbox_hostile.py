"""A hostile MCP server inside its bubblewrap sandbox, behind a real gateway: every escape it
tries is refused or contained, its calls get the error, the gateway keeps serving the other
server, and what the gateway can see is audited.

The hostile server (servers/hostile.py) claims to be a trusted read-only server and is
approved: the gate lets each call through, so the sandbox alone stands in the way.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from gateway_helpers import approve_all, connected, writes_allowed

from anfitrion.mcp import _sandbox, _sandbox_run, _stderr
from anfitrion.mcp._config import McpConfig, ServerConfig, parse_config
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import Store
from anfitrion.store._sqlite import SQLiteStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

HOSTILE = str(Path(__file__).parent / "servers" / "hostile.py")


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    problem = _sandbox.bwrap_problem()
    if problem is not None:
        if os.environ.get("ANFITRION_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox cannot run: {problem} (tests/mcp/install_sandbox.sh)")
        pytest.skip(f"the sandbox cannot run: {problem}")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder granted read-only, holding the store, the config and the policy; a
    work folder inside it granted read-write; a secret outside both."""
    folder = tmp_path / "project"
    (folder / "work").mkdir(parents=True)
    (folder / "notes.txt").write_text("public notes")
    (folder / "anfitrion.toml").write_text("# the policy: SECRET-POLICY\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("SECRET-OUTSIDE")
    return folder


def _config(project: Path, *, sandbox: Any = None, extra: dict[str, Any] | None = None
            ) -> McpConfig:
    hostile: dict[str, Any] = {"command": sys.executable, "args": [HOSTILE], "trusted": True,
                               "sandbox": sandbox or {"paths": [
                                   {"path": str(project), "mode": "ro"},
                                   {"path": str(project / "work"), "mode": "rw"}]}}
    servers = {"hostile": hostile,
               "time": {"command": sys.executable, "trusted": True,
                        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
               **(extra or {})}
    data = {"mcpServers": servers, "gateway": {"policy": "anfitrion.toml"}}
    (project / "mcp.json").write_text(json.dumps(data))
    return parse_config(data, path=str(project / "mcp.json"))


@asynccontextmanager
async def _gateway(config: McpConfig, store: Store) -> AsyncIterator[Callable[..., Any]]:
    await approve_all(list(config.servers.values()), store)
    async with McpServers(config, store) as servers:
        gateway = Gateway(servers, store=store, policy=writes_allowed(), approval_wait=5,
                          poll_interval=0.05)
        async with connected(gateway.build_server()) as client:
            async def call(tool: str, /, **arguments: Any) -> str:
                result = await client.call_tool(tool, arguments)
                text = "".join(getattr(b, "text", "") for b in result.content)
                assert not result.is_error or tool.startswith("hostile."), text
                return text
            yield call


@pytest.fixture
async def sqlite_store(project: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(project / "anfitrion.db")
    yield store
    await store.close()


async def _time_still_served(call: Callable[..., Any]) -> None:
    text = await call("time.get_current_time", timezone="UTC")
    assert '"timezone": "UTC"' in text or '"timezone":"UTC"' in text, text


async def test_reads_outside_the_profile_fail_and_protected_files_read_empty(
        project: Path, sqlite_store: SQLiteStore) -> None:
    await sqlite_store.put_record("secrets", "token", {"value": "SECRET-IN-STORE"})
    outside = project.parent / "outside" / "secret.txt"
    async with _gateway(_config(project), sqlite_store) as call:
        assert (await call("hostile.read", path=str(project / "notes.txt"))) == \
            "OK: public notes"  # granted: the sandbox is not simply closed
        for path in (str(outside), "/etc/shadow", str(Path.home() / ".bashrc"),
                     str(Path.home() / ".ssh" / "id_ed25519"),
                     str(project / "work" / ".." / ".." / "outside" / "secret.txt")):
            assert (await call("hostile.read", path=path)).startswith("BLOCKED"), path
        assert not any("protected" in str(r.data) for r in await sqlite_store.audit_records())
        for path in ("anfitrion.db", "anfitrion.db-wal", "mcp.json", "anfitrion.toml"):
            text = await call("hostile.read", path=str(project / path))
            assert "SECRET" not in text and "hostile" not in text, (path, text)
        opened = [str(r.data) for r in await sqlite_store.audit_records()
                  if "hostile.sandbox" in str(r.data) and "opened the protected" in str(r.data)]
        for path in ("anfitrion.db", "mcp.json", "anfitrion.toml"):  # seen by the gateway
            assert any(str(project / path) + " (masked" in d for d in opened), (path, opened)
        home = await call("hostile.listdir", path=str(Path.home()))
        assert not ({".ssh", ".bashrc", ".profile", ".npm"} & set(home[4:].split())), home
        assert "BLOCKED" in await call("hostile.listdir", path=str(project.parent / "outside"))
        # a symlink made inside a writable folder points into the sandbox, not the host
        assert (await call("hostile.symlink", target=str(outside),
                           link=str(project / "work" / "link"))).startswith("OK")
        assert (await call("hostile.read", path=str(project / "work" / "link"))
                ).startswith("BLOCKED")
        await _time_still_served(call)


async def test_opening_a_masked_file_or_folder_is_seen_by_the_gateway_and_audited(
        tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id").write_text("SECRET-KEY")
    (tmp_path / "secret.txt").write_text("SECRET-FILE")
    (tmp_path / "notes.txt").write_text("notes")
    hidden = [str(tmp_path / "keys"), str(tmp_path / "secret.txt"), str(tmp_path / "absent")]
    profile = _sandbox.SandboxProfile(paths=(_sandbox.PathGrant(str(tmp_path)),))

    async def run(script: str) -> tuple[str, list[str]]:
        audited: list[str] = []

        async def audit(detail: str) -> None:
            audited.append(detail)
        async with _sandbox_run.sandboxed(profile, ["sh", "-c", script],
                                          {"PATH": "/usr/bin:/bin"}, cwd=str(tmp_path),
                                          hidden=hidden, audit=audit) as launch:
            done = await anyio.run_process(launch.argv, env=launch.env, check=False)
            await anyio.sleep(0.2)  # the watcher reads its events
        return done.stdout.decode(), audited

    out, audited = await run("cat notes.txt; ls -a keys; echo done")
    assert "SECRET" not in out and out.startswith("notes") and "done" in out, out
    assert audited == [f"refused: the server opened the protected folder {tmp_path / 'keys'} "
                       "(masked in its sandbox: it read nothing)"], audited
    out, audited = await run("cat secret.txt secret.txt; cat keys/id; echo done")
    assert "SECRET" not in out and "done" in out, out
    assert audited == [f"refused: the server opened the protected file {tmp_path / 'secret.txt'}"
                       " (masked in its sandbox: it read nothing)"], audited  # once, not twice
    out, audited = await run("cat notes.txt; ls; echo done")  # names are seen, nothing opened
    assert "secret.txt" in out and audited == [], audited


async def test_writes_land_only_in_rw_paths_and_a_private_tmp(
        project: Path, sqlite_store: SQLiteStore) -> None:
    async with _gateway(_config(project), sqlite_store) as call:
        for path in (str(project / "planted.txt"), "/usr/planted", "/etc/planted",
                     str(project.parent / "outside" / "planted.txt"), "/root/planted"):
            assert (await call("hostile.write", path=path)).startswith("BLOCKED"), path
            assert not Path(path).exists()
        assert await call("hostile.write", path=str(project / "work" / "ok.txt"),
                          text="fine") == "OK: written"
        assert (project / "work" / "ok.txt").read_text() == "fine"
        marker = f"/tmp/anfitrion-sandbox-{uuid.uuid4().hex}"
        assert await call("hostile.write", path=marker) == "OK: written"
        assert not Path(marker).exists()  # the server's /tmp is its own
        await _time_still_served(call)
        # what the server says of the refusals on its stderr is audited as its own words,
        # at most MAX_REPORTED lines (a server cannot flood the audit log)
        assert (await call("hostile.say", line="EACCES: permission denied, open '/x'",
                           times=50)).startswith("OK")
        await anyio.sleep(0.5)
    reported = [str(r.data) for r in await sqlite_store.audit_records()
                if "hostile.sandbox" in str(r.data) and "reported a refusal" in str(r.data)]
    assert any("Read-only file system" in d and "/usr/planted" in d for d in reported), reported
    assert len(reported) == _stderr.MAX_REPORTED, reported
    assert "further reports are not audited" in reported[-1]


@pytest.fixture
def listener() -> Any:
    """A loopback TCP service standing for the inbox or the gateway's HTTP port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


async def test_no_network_by_default_not_even_loopback_or_dns(
        project: Path, sqlite_store: SQLiteStore, listener: int) -> None:
    async with _gateway(_config(project), sqlite_store) as call:
        for host, port in (("127.0.0.1", 5432), ("127.0.0.1", listener), ("::1", listener),
                           ("1.1.1.1", 443)):
            text = await call("hostile.connect", host=host, port=port)
            assert text.startswith("BLOCKED"), (host, port, text)
        for name in ("example.com", f"{uuid.uuid4().hex}.exfil.example", "localhost.evil"):
            assert (await call("hostile.resolve", name=name)).startswith("BLOCKED")
        assert (await call("hostile.proxy", target="example.com:443")) == "BLOCKED: no proxy"
        await _time_still_served(call)


async def test_declared_destinations_only_through_the_proxy_and_refusals_are_audited(
        project: Path, sqlite_store: SQLiteStore, listener: int) -> None:
    declared = f"127.0.0.1:{listener}"
    config = _config(project, sandbox={"paths": [str(project)], "network": [declared]})
    async with _gateway(config, sqlite_store) as call:
        # the declared local service, on the namespace's own loopback
        assert (await call("hostile.connect", host="127.0.0.1", port=listener)
                ).startswith("OK")
        assert (await call("hostile.proxy", target=declared)).startswith("OK")
        for target in ("127.0.0.1:5432", "example.com:443", f"127.0.0.1:{listener + 1}",
                       "[::1]:5432", "169.254.169.254:80", "localhost:5432"):
            text = await call("hostile.proxy", target=target)
            assert text.startswith("BLOCKED") and "403" in text, (target, text)
        assert (await call("hostile.connect", host="127.0.0.1", port=5432)).startswith("BLOCKED")
        assert (await call("hostile.resolve", name="example.com")).startswith("BLOCKED")
        await _time_still_served(call)
    details = [str(r.data) for r in await sqlite_store.audit_records()]
    assert any("hostile.sandbox" in d and "127.0.0.1:5432" in d and "not declared" in d
               for d in details), details


class _Recorder:
    """A loopback HTTP service that records every byte each connection brought, answers
    ``200 hello`` after a request's head and body, and keeps reading a moment (a pipelined
    second request would be recorded too)."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        data = b""
        with conn, suppress(OSError):
            conn.settimeout(3)
            while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                data += chunk
            head = data.split(b"\r\n\r\n", 1)[0].lower()
            length = int(head.split(b"content-length:", 1)[1].split(b"\r\n")[0]) \
                if b"content-length:" in head else 0
            while len(data) < len(head) + 4 + length and (chunk := conn.recv(65536)):
                data += chunk
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n"
                         b"\r\nhello")
            conn.settimeout(0.5)
            while chunk := conn.recv(65536):
                data += chunk
        self.received.append(data)

    def close(self) -> None:
        self.server.close()


def _internal_names(port: int) -> list[str]:
    """Names that resolve to an address of this machine or its network, without DNS: a
    number (``2130706433`` is 127.0.0.1 to the resolver), hex forms, and this host's name
    when it resolves to a private address."""
    names = [f"2130706433:{port}", f"0x7f.1:{port}"]
    with suppress(OSError, ValueError):
        found = socket.getaddrinfo(socket.gethostname(), port, type=socket.SOCK_STREAM)
        if found and not all(ipaddress.ip_address(str(f[4][0])).is_global for f in found):
            names.append(f"{socket.gethostname().lower()}:{port}")
    return names


async def test_plain_http_reaches_only_declared_hosts_under_their_own_name(
        project: Path, sqlite_store: SQLiteStore) -> None:
    web = _Recorder()
    port, here = web.port, f"127.0.0.1:{web.port}"
    rebinding = _internal_names(port)
    config = _config(project, sandbox={"paths": [str(project)],
                                       "network": [here, "169.254.169.254:80", *rebinding]})
    try:
        async with _gateway(config, sqlite_store) as call:
            ok = await call("hostile.http", request=f"GET http://{here}/ok?x=1 HTTP/1.1\r\n"
                            f"Host: {here}\r\nProxy-Authorization: Basic eDp5\r\n\r\n")
            assert ok.startswith("OK") and ok.endswith("hello"), ok
            sent = web.received[-1]
            assert sent.startswith(b"GET /ok?x=1 HTTP/1.1\r\n"), sent
            assert b"Connection: close" in sent and b"Proxy-Authorization" not in sent
            refused = [
                (f"GET http://{here}/ HTTP/1.1\r\nHost: metadata.internal\r\n\r\n", "400",
                 "Host header"),
                (f"GET http://{here}/ HTTP/1.1\r\nHost: {here}\r\nHost: x\r\n\r\n", "400",
                 "two Host"),
                ("GET http://127.0.0.1:5432/ HTTP/1.1\r\n\r\n", "403", "not declared"),
                ("GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\n\r\n", "403",
                 "not a public address"),  # declared, and still refused
                *[(f"GET http://{name}/ HTTP/1.1\r\n\r\n", "403", "non-public")
                  for name in rebinding],
                (f"GET http://x@{here}/ HTTP/1.1\r\n\r\n", "400", "authority"),
                (f"GET / HTTP/1.1\r\nHost: {here}\r\n\r\n", "400", "absolute"),
                (f"GET https://{here}/ HTTP/1.1\r\n\r\n", "400", "CONNECT"),
                (f"TRACE http://{here}/ HTTP/1.1\r\n\r\n", "405", "TRACE"),
                (f"POST http://{here}/ HTTP/1.1\r\nContent-Length: 5\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "411", "Transfer-Encoding"),
                (f"GET http://{here}/ HTTP/1.1\r\nX-A: a\r\n folded\r\n\r\n", "400", "NAME"),
            ]
            before = len(web.received)
            for request, status, words in refused:
                text = await call("hostile.http", request=request)
                assert text.startswith(f"BLOCKED: HTTP/1.1 {status}") and words in text, (
                    request, text)
            assert len(web.received) == before  # nothing reached the service
            # a body goes on to its declared length; a request pipelined after it goes nowhere
            text = await call("hostile.http", request=f"POST http://{here}/a HTTP/1.1\r\n"
                              f"Content-Length: 3\r\n\r\nabcGET http://{here}/b HTTP/1.1\r\n"
                              "Host: metadata.internal\r\n\r\n")
            assert text.startswith("OK"), text
            with anyio.fail_after(5):
                while len(web.received) == before:
                    await anyio.sleep(0.05)
            assert web.received[-1].startswith(b"POST /a ") and \
                web.received[-1].endswith(b"\r\n\r\nabc"), web.received[-1]
            await _time_still_served(call)
    finally:
        web.close()
    details = [str(r.data) for r in await sqlite_store.audit_records()]
    for words in ("Host header", "not a public address", "127.0.0.1:5432", "Transfer-Encoding"):
        assert any("hostile.sandbox" in d and "refused http request" in d and words in d
                   for d in details), (words, details)


async def test_a_fork_bomb_stops_at_the_process_limit(
        project: Path, sqlite_store: SQLiteStore) -> None:
    config = _config(project, sandbox={"paths": [str(project)], "limits": {"processes": 24}})
    async with _gateway(config, sqlite_store) as call:
        text = await call("hostile.forks", count=300)
        started = int(text.split()[1])
        assert started < 24, text
        await _time_still_served(call)
        assert (await call("hostile.forks", count=5)).startswith("started 5 of 5")
    probe = _sandbox_run.make_pids_cgroup(1)
    if probe is not None:  # audited where a cgroup counts them
        probe.rmdir()
        details = [str(r.data) for r in await sqlite_store.audit_records()]
        assert any("hostile.sandbox" in d and "process limit (24) was reached" in d
                   for d in details), details


_KILLED_GATEWAY = """
import subprocess, sys, anyio
from anfitrion.mcp._sandbox import SandboxProfile
from anfitrion.mcp._sandbox_run import sandboxed

async def main() -> None:
    async def audit(_: str) -> None: ...
    async with sandboxed(SandboxProfile(), ["sleep", "600"], {"PATH": "/usr/bin:/bin"},
                         cwd=None, hidden=(), audit=audit) as launch:
        subprocess.Popen(launch.argv, env=launch.env, start_new_session=True)
        print(launch.cgroup, flush=True)
        await anyio.sleep(600)

anyio.run(main)
"""


async def test_the_cgroup_of_a_gateway_killed_by_a_signal_is_removed_at_the_next_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _sandbox_run.make_pids_cgroup(1)
    if probe is None:
        pytest.skip("no pids cgroup can be made here (nothing is left behind either)")
    probe.rmdir()
    parent, namespace = probe.parent, os.stat("/proc/self/ns/pid").st_ino
    gateway = subprocess.Popen([sys.executable, "-c", _KILLED_GATEWAY], stdout=subprocess.PIPE,
                               text=True)
    made: list[Path] = []
    left: subprocess.Popen[bytes] | None = None
    try:
        assert gateway.stdout is not None
        stale = Path(gateway.stdout.readline().strip())
        assert stale.parent == parent and stale.name.startswith(f"anfitrion-{namespace}-")
        gateway.kill()
        gateway.wait()
        assert stale.is_dir()  # what the killed gateway could not remove
        # a process still in it (say, one that outlived its sandbox) goes with it
        left = subprocess.Popen(["sh", "-c", f'echo $$ > "{stale}/cgroup.procs"; '
                                 'exec sleep 600'], start_new_session=True)
        with anyio.fail_after(5):
            while left.pid not in _sandbox_run._cgroup_pids(stale):
                await anyio.sleep(0.02)
        # and what is not a dead gateway's of this namespace stays: a live gateway's, another
        # namespace's (its PIDs mean other processes), anything not named by anfitrion
        made = [parent / f"anfitrion-{namespace}-{os.getpid()}-9999",
                parent / f"anfitrion-{namespace + 1}-{gateway.pid}-9999",
                parent / f"anfitrion-tests-{gateway.pid}-9999"]
        for folder in made:
            folder.mkdir()
        monkeypatch.setattr(_sandbox_run, "_cleaned", set())
        fresh = await anyio.to_thread.run_sync(_sandbox_run.make_pids_cgroup, 4)
        assert fresh is not None
        made.append(fresh)
        assert not stale.exists()
        assert left.wait(timeout=5) == -signal.SIGKILL
        assert all(folder.is_dir() for folder in made)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
        if gateway.stdout is not None:
            gateway.stdout.close()
        if left is not None and left.poll() is None:
            left.kill()
            left.wait()
        for folder in made:
            with suppress(OSError):
                folder.rmdir()


def _running(token: str) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


async def test_a_child_in_a_session_of_its_own_ends_with_the_server(
        project: Path, sqlite_store: SQLiteStore) -> None:
    token = f"anfitrion-left-behind-{uuid.uuid4().hex}"
    async with _gateway(_config(project), sqlite_store) as call:
        assert (await call("hostile.leave_child", token=token)).startswith("OK")
        assert _running(token)  # it runs while the server does
        await _time_still_served(call)
    with anyio.fail_after(10):
        while _running(token):
            await anyio.sleep(0.05)


async def test_the_environment_and_descriptors_of_the_gateway_stay_out(
        project: Path, sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANFITRION_TEST_SECRET", "SECRET-ENV")
    async with _gateway(_config(project), sqlite_store) as call:
        text = await call("hostile.environ")
        assert "SECRET" not in text and "ANFITRION" not in text, text
        names = set(text.split("||")[0].removeprefix("names:").split())
        assert names <= {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "TMPDIR", "LANG",
                         "LC_CTYPE", "PWD"}, names
        fds = (await call("hostile.fds")).split()
        ours = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                if os.path.exists(f"/proc/self/fd/{fd}")}
        held = [f for f in fds if "anfitrion.db" in f or "project" in f
                or (f.partition("->")[2].startswith("socket:") and f.partition("->")[2] in ours)]
        assert not held and len(fds) <= 12, fds
        assert int(max((await call("hostile.processes")).split(), key=int)) < 100
        gateway_proc = f"/proc/{os.getpid()}/environ"
        assert "SECRET" not in await call("hostile.read", path=gateway_proc)
        await _time_still_served(call)


async def test_without_bubblewrap_a_server_is_not_started_unless_its_entry_says_off(
        project: Path, sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sandbox, "bwrap_problem", lambda: "bubblewrap (bwrap) is not installed")
    off = ServerConfig(id="plain", command=sys.executable,
                       args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
                       trusted=True, sandbox=_sandbox.OFF)
    config = _config(project)
    boxed = config.servers["time"]
    async with McpServers([boxed, off], sqlite_store) as servers:
        result = await servers.refresh()
        error = str(result["time"])
        assert "not started unsandboxed" in error and "apt-get install bubblewrap" in error
        assert not isinstance(result["plain"], Exception)
    details = [str(r.data) for r in await sqlite_store.audit_records()]
    assert any("time.sandbox" in d and "refused to start" in d for d in details), details


async def test_a_widened_profile_or_a_changed_program_is_not_started_and_is_audited(
        project: Path, sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    copy = tmp_path / "srv" / "hostile.py"
    copy.parent.mkdir()
    copy.write_text(Path(HOSTILE).read_text())
    narrow = {"paths": [str(project)]}
    hostile = {"command": sys.executable, "args": [str(copy)], "trusted": True,
               "sandbox": narrow}
    config = _config(project, extra={"hostile": hostile})
    async with _gateway(config, sqlite_store) as call:
        assert (await call("hostile.read", path=str(project / "notes.txt"))).startswith("OK")
    widened = {**hostile, "sandbox": {"paths": [{"path": str(project), "mode": "rw"}]}}
    changed = [_config(project, extra={"hostile": widened})]
    copy.write_text(copy.read_text() + "\n# an update under the same command\n")
    changed.append(_config(project, extra={"hostile": hostile}))
    for edited, why in zip(changed, ("sandbox: can write", "script_sha256"), strict=True):
        async with McpServers(edited, sqlite_store) as servers:
            result = await servers.refresh()
            assert isinstance(result["hostile"], Exception), result["hostile"]
            assert why in str(result["hostile"]), result["hostile"]
            assert not isinstance(result["time"], Exception)  # the others keep serving
        details = [str(r.data) for r in await sqlite_store.audit_records()]
        assert any("hostile.launch" in d and why in d for d in details), why
