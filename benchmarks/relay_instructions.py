"""The gateway's instructions per relayed call, under callgrind: a figure the load does not move.

``relay.py`` measures the gateway as an operator sees it (calls/s, latency, CPU per call); on a
shared machine those move ±5–20 % from run to run, more than most single changes to the gate.
This counts the instructions the relaying process runs per call instead: the gateway (or
``mcp-proxy``, or the gateway from another source tree) runs under ``valgrind --tool=callgrind``
with collection off; the official client makes some calls to warm every path, collection is
switched on (``callgrind_control -i on``) for exactly *calls* calls and off again, and the
process's total is divided by *calls*. All the process's threads are counted (the loop and the
SQLite store's thread); the upstream server is a child and runs outside valgrind. A thread
waiting (for the GIL, the disk or the network) runs no instructions, so the figure is the
work, not the waiting.

    bash benchmarks/install_mcp_proxy.sh          # for the mcp-proxy row
    PYTHONPATH=src .venv/bin/python benchmarks/relay_instructions.py [--calls 200]
        [--clients 1] [--only gateway,mcp-proxy,gateway-base] [--baseline DIR]

The store is SQLite, durable, as in ``relay.py``. With more than one client the calls share
commits (group commit) as they would under load, though valgrind runs one thread at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx2
import relay as r
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

VALGRIND = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]


async def start(procs: r.Processes, name: str, source: str | None) -> tuple[r.Target, Path]:
    """*name* under callgrind, collection off; its target and callgrind's output file."""
    out = procs.tmp / f"{name}.callgrind"
    launcher = [*VALGRIND, f"--callgrind-out-file={out}"]
    # under valgrind, start-up is many times slower
    if name == "mcp-proxy":
        python = str(Path(r.MCP_PROXY).with_name("python"))
        return await r.start_mcp_proxy(procs, launcher=[*launcher, python], within=600), out
    store = f"sqlite:///{procs.tmp / (name + '.db')}"
    await r.approve(r.gateway_config(procs.tmp, name), store)
    return await r.start_gateway(procs, name, store, replica=False, source=source,
                                 launcher=[*launcher, sys.executable], within=600), out


def collect(pid: int, on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)],
                   check=True, capture_output=True)


async def measure(procs: r.Processes, name: str, source: str | None, calls: int,
                  clients: int, warm: int) -> float:
    """Instructions per call of the relaying process *name*."""
    target, out = await start(procs, name, source)
    process = next(p for p in procs.started if p.pid == target.pids[0])
    counted = calls // clients * clients
    tool = "echo" if name == "mcp-proxy" else "b.echo"
    tag = uuid.uuid4().hex[:8]
    async with AsyncExitStack() as stack:
        sessions = []
        for _ in range(clients):
            http = await stack.enter_async_context(httpx2.AsyncClient(
                timeout=httpx2.Timeout(600), headers=target.headers))
            read, write = await stack.enter_async_context(
                streamable_http_client(target.url, http_client=http))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions.append(session)

        async def run(i: int, session: ClientSession, n: int, label: str) -> None:
            for k in range(n):
                result = await session.call_tool(tool, {"text": f"{label}-{tag}-{i}-{k}"})
                if result.is_error:
                    raise RuntimeError(f"{name}: {result.content[0]}")

        for i, session in enumerate(sessions):  # every path taken, caches filled
            await run(i, session, warm, "warm")
        collect(process.pid, True)
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i, session in enumerate(sessions):
                tg.start_soon(run, i, session, calls // clients, "measured")
        collect(process.pid, False)
        print(f"  {name}: {counted} calls in "
              f"{time.perf_counter() - started:.0f} s under valgrind", file=sys.stderr)
    process.send_signal(signal.SIGTERM)
    await anyio.to_thread.run_sync(lambda: process.wait(timeout=300))
    text = out.read_text()
    found = re.search(r"^totals:\s*(\d+)", text, re.M)
    if found is None:
        raise RuntimeError(f"{name}: no totals in {out}")
    return int(found.group(1)) / counted


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--warm", type=int, default=20, help="calls per client before counting")
    parser.add_argument("--only", default="gateway,mcp-proxy",
                        help="comma-separated: gateway, mcp-proxy, gateway-base")
    parser.add_argument("--baseline", metavar="DIR",
                        help="the source tree (holding anfitrion/) of gateway-base")
    args = parser.parse_args()
    names = args.only.split(",")
    if "gateway-base" in names and args.baseline is None:
        parser.error("gateway-base needs --baseline DIR")
    if "mcp-proxy" in names and not Path(r.MCP_PROXY).exists():
        parser.error(f"mcp-proxy not found at {r.MCP_PROXY}: bash benchmarks/install_mcp_proxy.sh")
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="relay-instructions-") as tmp:
        procs = r.Processes(Path(tmp))
        try:
            for name in names:
                source = str(Path(args.baseline).resolve()) if name == "gateway-base" else None
                figures[name] = await measure(procs, name, source, args.calls, args.clients,
                                              args.warm)
                print(f"{name}: {figures[name] / 1000:,.0f}k instructions per call",
                      file=sys.stderr)
        finally:
            procs.close()
    print("| target | clients | instructions per call | ÷ mcp-proxy |")
    print("|---|---:|---:|---:|")
    for name, value in figures.items():
        ratio = (f"{value / figures['mcp-proxy']:.2f}" if "mcp-proxy" in figures
                 and name != "mcp-proxy" else "–")
        print(f"| {name} | {args.clients} | {value / 1000:,.0f}k | {ratio} |")


if __name__ == "__main__":
    asyncio.run(main())
