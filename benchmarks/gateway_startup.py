"""The gateway's first run: how long until a desktop assistant's first call is answered.

For ``anfitrion gateway --config X`` over stdio, each run spawns the gateway as a client would
and speaks raw JSON-RPC lines to it, timing from just before the spawn to:

- ``initialize`` answered (the process is up and its servers are started),
- ``tools/list`` answered (every server listed, pins checked),
- the first ``tools/call`` answered (``time.get_current_time``, a read the default policy allows),
- the second ``tools/call`` answered (a warm call, for comparison).

Configurations: 1 server (mcp-server-time) and 3 (mcp-server-time, the parity suite's server,
mcp-server-git), their tools approved beforehand in a SQLite store. Prints medians of ``--runs``
runs as a table and writes them to ``benchmarks/results/gateway_startup.json``; the stderr of
every run is kept and counted (a quiet gateway writes no line there).

    PYTHONPATH=src python benchmarks/gateway_startup.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from anfitrion.mcp._config import load_config
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import open_store

HERE = Path(__file__).parent
ROOT = HERE.parent
PARITY_SERVER = ROOT / "tests" / "parity" / "parity_server.py"
STAGES = ("initialize", "tools/list", "first call", "second call")


def _git_repo(where: Path) -> Path:
    repo = where / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.org",
           "HOME": str(where), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "README").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "README"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "First commit"], check=True,
                   env=env)
    return repo


def write_config(where: Path, servers: int) -> Path:
    """An mcp.json with 1 (time) or 3 (time, parity, git) servers."""
    entries: dict[str, Any] = {
        "time": {"command": sys.executable, "trusted": True,
                 "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}}
    if servers >= 3:
        entries["p"] = {"command": sys.executable, "args": [str(PARITY_SERVER)],
                        "env": {"PARITY_EFFECTS": str(where / "effects.log")}, "trusted": True}
        entries["git"] = {"command": sys.executable, "trusted": True,
                          "args": ["-m", "mcp_server_git", "--repository",
                                   str(_git_repo(where))]}
    path = where / f"mcp-{servers}.json"
    path.write_text(json.dumps({"mcpServers": entries, "gateway": {"principal": "bench"}}))
    return path


async def approve_everything(config: Path, store_url: str) -> None:
    """What an operator's review would do: see every server and approve all it offers."""
    store = open_store(store_url)
    try:
        async with McpServers(load_config(config), store) as servers:
            found = await servers.refresh()
        book = PinBook(store)
        for server_id, statuses in found.items():
            assert isinstance(statuses, list), statuses
            await book.approve(server_id, by="bench")
            for status in statuses:
                if status.state != "invalid":
                    await book.approve(status.name, by="bench")
    finally:
        await store.close()


class _Lines:
    def __init__(self, process: Process) -> None:
        assert process.stdout is not None
        assert process.stdin is not None
        self.process = process
        self._buffer = b""
        self._next_id = 0

    async def send(self, method: str, params: dict[str, Any] | None = None, *,
                   notify: bool = False) -> int | None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        request_id = None
        if not notify:
            self._next_id += 1
            request_id = message["id"] = self._next_id
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps(message).encode() + b"\n")
        return request_id

    async def answer(self, request_id: int | None) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                message = json.loads(line)
                if message.get("id") == request_id:
                    if "error" in message:
                        raise RuntimeError(f"the gateway answered an error: {message['error']}")
                    result: dict[str, Any] = message["result"]
                    return result
            self._buffer += await self.process.stdout.receive()


async def one_run(config: Path, store_url: str, cwd: Path, errlog: Path) -> dict[str, float]:
    command = [sys.executable, "-m", "anfitrion._cli.main", "gateway", "--config", str(config),
               "--store", store_url]
    marks: dict[str, float] = {}
    with errlog.open("wb") as err:
        start = time.perf_counter()
        async with await anyio.open_process(command, stderr=err, cwd=cwd) as process:
            lines = _Lines(process)
            with anyio.fail_after(120):
                await lines.answer(await lines.send("initialize", {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "0"}}))
                marks["initialize"] = time.perf_counter() - start
                await lines.send("notifications/initialized", notify=True)
                listed = await lines.answer(await lines.send("tools/list"))
                marks["tools/list"] = time.perf_counter() - start
                assert any(t["name"] == "time.get_current_time" for t in listed["tools"]), listed
                for stage in ("first call", "second call"):
                    result = await lines.answer(await lines.send("tools/call", {
                        "name": "time.get_current_time", "arguments": {"timezone": "UTC"}}))
                    marks[stage] = time.perf_counter() - start
                    assert not result.get("isError"), result
                assert process.stdin is not None
                await process.stdin.aclose()
                await process.wait()
    return marks


async def measure(servers: int, runs: int, where: Path) -> dict[str, Any]:
    config = write_config(where, servers)
    store_url = f"sqlite:///{where / f'bench-{servers}.db'}"
    await approve_everything(config, store_url)
    samples: list[dict[str, float]] = []
    stderr_lines = 0
    for i in range(runs):
        errlog = where / f"stderr-{servers}-{i}.txt"
        samples.append(await one_run(config, store_url, where, errlog))
        stderr_lines += len(errlog.read_text(errors="replace").splitlines())
    return {"servers": servers, "runs": runs,
            "median_s": {s: statistics.median(m[s] for m in samples) for s in STAGES},
            "min_s": {s: min(m[s] for m in samples) for s in STAGES},
            "stderr_lines": stderr_lines,
            "example_stderr": (where / f"stderr-{servers}-0.txt").read_text(
                errors="replace")[:2000]}


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| servers | runs | " + " | ".join(f"{s} (s)" for s in STAGES) +
            " | stderr lines |",
            "|---|---|" + "---|" * len(STAGES) + "---|"]
    for r in results:
        cells = " | ".join(f"{r['median_s'][s]:.2f}" for s in STAGES)
        rows.append(f"| {r['servers']} | {r['runs']} | {cells} | {r['stderr_lines']} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--servers", default="1,3", help="comma-separated: 1, 3")
    parser.add_argument("--out", default=str(HERE / "results" / "gateway_startup.json"))
    parser.add_argument("--show-stderr", action="store_true",
                        help="print the first run's stderr of each configuration")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="anfitrion-gw-bench-") as tmp:
        for n in (int(s) for s in args.servers.split(",")):
            results.append(anyio.run(measure, n, args.runs, Path(tmp)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": {"python": platform.python_version(),
                                           "cpus": os.cpu_count(),
                                           "load": os.getloadavg()},
                               "results": results}, indent=2))
    print(table(results))
    if args.show_stderr:
        for r in results:
            print(f"\n--- stderr, {r['servers']} server(s), first run ---\n"
                  f"{r['example_stderr']}")


if __name__ == "__main__":
    main()
