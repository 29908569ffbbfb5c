"""What the bubblewrap sandbox costs a stdio MCP server: start-up and per call.

The same server (PyPI's mcp-server-time, from this venv) is started through the client toolset
(`McpToolset`, the gateway's upstream path) with its entry's default sandbox profile, and with
``"sandbox": "off"``. Per configuration and run:

- start-up: from entering the toolset to ``tools/list`` answered (spawn, ``initialize``, the
  listing; for the sandbox also the profile, ``bwrap``, the namespaces and the cgroup);
- per call: the median round trip of ``--calls`` ``tools/call`` requests on the running server.

Prints medians over ``--runs`` runs (runs alternate between the two) and the differences, and
writes them to ``benchmarks/results/sandbox_overhead.json``.

    PYTHONPATH=src python benchmarks/sandbox_overhead.py --runs 5 --calls 50
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from _harness import Timings

from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._sandbox import OFF, SandboxProfile, bwrap_problem
from anfitrion.mcp._toolset import McpToolset
from anfitrion.store import MemoryStore

HERE = Path(__file__).parent


def _server(profile: SandboxProfile) -> ServerConfig:
    return ServerConfig(id="time", command=sys.executable, trusted=True, sandbox=profile,
                        args=("-m", "mcp_server_time", "--local-timezone", "UTC"))


async def _one_run(profile: SandboxProfile, calls: int) -> tuple[float, float]:
    started = time.perf_counter()
    async with McpToolset(_server(profile), MemoryStore()) as toolset:
        await toolset.refresh()
        startup = time.perf_counter() - started
        session = (await toolset._ensure()).session
        assert session is not None
        times = Timings()
        for _ in range(calls):
            with times.step():
                result = await session.call_tool("get_current_time", {"timezone": "UTC"})
            assert not result.is_error
    return startup, times.median()


async def _main(runs: int, calls: int) -> dict[str, Any]:
    problem = bwrap_problem()
    if problem is not None:
        raise SystemExit(f"the sandbox cannot run here: {problem}")
    found: dict[str, dict[str, list[float]]] = {
        name: {"startup": [], "call": []} for name in ("sandboxed", "off")}
    await _one_run(SandboxProfile(), 3)  # warm the file cache once
    for _ in range(runs):
        for name, profile in (("sandboxed", SandboxProfile()), ("off", OFF)):
            startup, call = await _one_run(profile, calls)
            found[name]["startup"].append(startup)
            found[name]["call"].append(call)
    medians = {name: {k: statistics.median(v) * 1000 for k, v in values.items()}
               for name, values in found.items()}
    return {"runs": runs, "calls": calls, "python": platform.python_version(),
            "machine": platform.machine(), "median_ms": medians,
            "startup_overhead_ms": medians["sandboxed"]["startup"] - medians["off"]["startup"],
            "call_overhead_ms": medians["sandboxed"]["call"] - medians["off"]["call"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    report = anyio.run(_main, args.runs, args.calls)
    print(f"{'':12}{'start-up ms':>14}{'per call ms':>14}")
    for name in ("off", "sandboxed"):
        m = report["median_ms"][name]
        print(f"{name:12}{m['startup']:>14.1f}{m['call']:>14.3f}")
    print(f"{'difference':12}{report['startup_overhead_ms']:>14.1f}"
          f"{report['call_overhead_ms']:>14.3f}")
    out = HERE / "results" / "sandbox_overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
