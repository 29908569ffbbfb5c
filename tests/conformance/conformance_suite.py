"""Running the official MCP conformance suite (``@modelcontextprotocol/conformance``, an npm
package on Node 22) from the tests: where it is installed, one run, and what each scenario gave.

``tests/conformance/install.sh`` installs it (``make install-conformance``); without it the
tests skip, unless ``ANFITRION_REQUIRE_CONFORMANCE=1`` (CI) makes a missing suite a failure.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

HERE = Path(__file__).parent
SERVER = str(HERE / "server.py")
CLIENT = str(HERE / "client.py")
INSTALL = HERE / "install.sh"
REQUIRE = "ANFITRION_REQUIRE_CONFORMANCE"
SUITE_TIMEOUT = 240.0
"""Seconds one run of the suite may take (a direct run of every server scenario takes ~3 s)."""

SERVER_SCENARIOS = (
    "server-initialize", "logging-set-level", "ping", "completion-complete", "tools-list",
    "tools-call-simple-text", "tools-call-image", "tools-call-audio",
    "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-with-logging",
    "tools-call-error", "tools-call-with-progress", "tools-call-sampling",
    "tools-call-elicitation", "elicitation-sep1034-defaults",
    "server-sse-multiple-streams", "elicitation-sep1330-enums", "resources-list",
    "resources-read-text", "resources-read-binary", "resources-templates-read",
    "resources-subscribe", "resources-unsubscribe", "prompts-list", "prompts-get-simple",
    "prompts-get-with-args", "prompts-get-embedded-resource", "prompts-get-with-image",
    "dns-rebinding-protection",
)
"""The suite's active server scenarios (0.1.16): ``conformance list``, less the pending
``json-schema-2020-12`` and ``server-sse-polling`` (the conformance server implements both)."""

CLIENT_SCENARIOS = ("initialize", "tools_call", "elicitation-sep1034-client-defaults",
                    "sse-retry")
"""The suite's client scenarios but authorization."""

NEXT_CLIENT_SCENARIOS = ("json-schema-2020-12-preservation", "request-metadata",
                         "http-standard-headers", "http-custom-headers",
                         "sep-2322-client-request-state", "http-invalid-tool-headers",
                         "json-schema-ref-no-deref",
                         # the Skills extension (SEP-2640): the client reads no skill on
                         # its own, which these scenarios accept (none is fetched unchecked)
                         "sep-2640-client-no-prefetch", "sep-2640-client-verify-digest",
                         "sep-2640-client-verify-size", "sep-2640-client-verify-frontmatter")
"""The prerelease's client scenarios beyond authorization: a free-form object argument, and
2026-07-28 spoken to a server that does (per-request ``_meta`` and version header, the
``Mcp-Method``/``Mcp-Name`` and ``Mcp-Param-*`` headers, ``requestState`` echoed)."""

AUTH_SCENARIOS = (
    # 2025-11-25 (and 2025-06-18)
    "auth/metadata-default", "auth/metadata-var1", "auth/metadata-var2", "auth/metadata-var3",
    "auth/basic-cimd", "auth/scope-from-www-authenticate", "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined", "auth/scope-step-up", "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none", "auth/pre-registration",
    # 2025-03-26
    "auth/2025-03-26-oauth-metadata-backcompat", "auth/2025-03-26-oauth-endpoint-fallback",
    # draft in 0.1.16, 2026-07-28 in the prerelease
    "auth/resource-mismatch", "auth/offline-access-scope", "auth/offline-access-not-supported",
    # the client-credentials extension (service accounts)
    "auth/client-credentials-jwt", "auth/client-credentials-basic",
)
"""The authorization scenarios (``auth/*``) of the client, in both suites."""

NEXT_AUTH_SCENARIOS = (
    "auth/authorization-server-migration", "auth/iss-supported", "auth/iss-not-advertised",
    "auth/iss-supported-missing", "auth/iss-wrong-issuer", "auth/iss-unexpected",
    "auth/iss-normalized", "auth/metadata-issuer-mismatch",
)
"""The prerelease's 2026-07-28 authorization scenarios: ``iss`` (RFC 9207), the metadata's
issuer, and an authorization server migration (SEP-2352)."""


def default_home() -> Path:
    return Path(os.environ.get("ANFITRION_CONFORMANCE_HOME")
                or Path.home() / ".cache" / "anfitrion" / "conformance")


@dataclass(frozen=True)
class Suite:
    """An installed suite: the Node 22 binary and the suite's entry point."""

    node: str
    entry: str

    @classmethod
    def find(cls, home: Path | None = None, which: str = "current") -> Suite | None:
        """The suite ``install.sh`` installed under *home* (``current``: 0.1.16, ``next``: the
        newest prerelease), or ``None``."""
        current = (home or default_home()) / which
        try:
            node, entry = current.read_text().split()
        except (OSError, ValueError):
            return None
        if not (Path(node).is_file() and Path(entry).is_file()):
            return None
        return cls(node, entry)

    async def run(self, *args: str, cwd: Path, env: Mapping[str, str] | None = None) -> str:
        """Run ``conformance ARGS`` in *cwd*; its output (a failed check exits non-zero, so
        the exit code is not an error here: the checks are read from the results)."""
        environment = {**os.environ, **(env or {})}
        environment["PATH"] = f"{Path(self.node).parent}{os.pathsep}{environment.get('PATH', '')}"
        with anyio.fail_after(SUITE_TIMEOUT):
            done = await anyio.run_process([self.node, self.entry, *args], cwd=cwd,
                                           env=environment, check=False)
        return (done.stdout + done.stderr).decode("utf-8", "replace")


@dataclass(frozen=True)
class RequirementsSuite(Suite):
    """A suite whose ``server`` runs are exactly the scenarios one spec revision requires
    (``--requirements REVISION``)."""

    requirements: str = "2026-07-28"

    async def run(self, *args: str, cwd: Path, env: Mapping[str, str] | None = None) -> str:
        extra = ("--requirements", self.requirements) if args[:1] == ("server",) else ()
        return await super().run(*args, *extra, cwd=cwd, env=env)


@dataclass(frozen=True)
class Outcome:
    """What one scenario gave: its checks as the suite wrote them."""

    scenario: str
    checks: tuple[Mapping[str, Any], ...]

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.get("status") != "FAILURE" for c in self.checks)

    def failures(self) -> str:
        failed = [c for c in self.checks if c.get("status") == "FAILURE"]
        if not self.checks:
            return f"{self.scenario}: no check was recorded"
        return "; ".join(f"{c.get('name')}: {c.get('errorMessage') or c.get('description')}"
                         for c in failed)[:2000]


_STAMP = re.compile(r"-\d{4}-\d\d-\d\dT[\d-]+Z$")


def read_outcomes(results: Path, prefix: str = "") -> dict[str, Outcome]:
    """Every ``PREFIXSCENARIO-TIMESTAMP/checks.json`` under *results*, by scenario (the
    suite names a server scenario's folder ``server-…``, a client scenario's by its name)."""
    found: dict[str, Outcome] = {}
    for checks in sorted(results.rglob("checks.json")):
        relative = checks.parent.relative_to(results).as_posix()
        if not relative.startswith(prefix):
            continue
        scenario = _STAMP.sub("", relative[len(prefix):])
        found[scenario] = Outcome(scenario, tuple(json.loads(checks.read_text())))
    return found


class BearerProxy:
    """An ASGI app in front of the gateway adding its bearer token: the suite cannot send
    headers of its own. ``Host`` and ``Origin`` are passed on as the client sent them (the
    proxy's port replaced by the gateway's), so the gateway's checks see what the suite sent.
    """

    def __init__(self, upstream_port: int, token: str) -> None:
        self.upstream_port = upstream_port
        self.token = token
        self.port = 0
        self.client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(60, read=None))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers: list[tuple[bytes, bytes]] = []
        for key, value in scope["headers"]:
            if key in (b"host", b"origin"):
                value = re.sub(rb":%d$" % self.port, b":%d" % self.upstream_port, value)
            if key not in (b"authorization", b"content-length", b"connection"):
                headers.append((key, value))
        headers.append((b"authorization", f"Bearer {self.token}".encode()))
        path = scope["raw_path"].decode() + (f"?{scope['query_string'].decode()}"
                                             if scope.get("query_string") else "")
        request = self.client.build_request(
            scope["method"], f"http://127.0.0.1:{self.upstream_port}{path}",
            headers=headers, content=bytes(body))
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError:
            await send({"type": "http.response.start", "status": 502, "headers": []})
            await send({"type": "http.response.body", "body": b"the gateway did not answer"})
            return
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in
                                    (b"content-length", b"transfer-encoding", b"connection")]})
            with suppress(httpx.HTTPError):  # a stream the gateway ended (or this proxy closed)
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[int]:
    """*app* served by uvicorn on 127.0.0.1 (a free port), until the block ends."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="critical",
                                           access_log=False, timeout_graceful_shutdown=1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])  # type: ignore[arg-type]
        with anyio.fail_after(30):
            while not server.started:
                await anyio.sleep(0.01)
        try:
            yield port
        finally:
            server.should_exit = True


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_for_port(port: int) -> None:
    """Until something accepts connections on 127.0.0.1:*port*."""
    with anyio.fail_after(60):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


async def wait_for_line(stream: Any, pattern: re.Pattern[str], *, seen: list[str]) -> re.Match[str]:
    """Read *stream* (a process's stderr) until a line matches *pattern*."""
    buffer = ""
    async for chunk in stream:
        buffer += chunk.decode("utf-8", "replace")
        *lines, buffer = buffer.split("\n")
        for line in lines:
            seen.append(line)
            found = pattern.search(line)
            if found:
                return found
    raise RuntimeError("the process ended before it said it was ready:\n" + "\n".join(seen))


@asynccontextmanager
async def process(command: Sequence[str], ready: re.Pattern[str] | int,
                  env: Mapping[str, str] | None = None) -> AsyncIterator[re.Match[str] | None]:
    """Start *command*, wait until its stderr prints *ready* (or it listens on port *ready*);
    ended when the block ends (its stderr is drained so it never blocks on a full pipe)."""
    environment = {**os.environ, **(env or {})}
    proc = await anyio.open_process(list(command), env=environment, stdin=None)
    seen: list[str] = []
    try:
        found = None
        with anyio.fail_after(90):
            if isinstance(ready, int):
                await wait_for_port(ready)
            else:
                found = await wait_for_line(proc.stderr, ready, seen=seen)
        async with anyio.create_task_group() as tg:
            async def drain() -> None:
                assert proc.stderr is not None
                async for chunk in proc.stderr:
                    sys.stderr.write(chunk.decode("utf-8", "replace"))
            tg.start_soon(drain)
            try:
                yield found
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            proc.terminate()
            with anyio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
            await proc.aclose()
