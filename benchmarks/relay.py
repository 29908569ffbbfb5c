"""The gateway as a relay: ``anfitrion gateway --http`` against ``mcp-proxy`` (PyPI) and a direct
connection, on one upstream server, with the official ``mcp`` client.

Targets (each a real process tree on loopback):

- ``direct``: the client → the upstream server (``_relay_upstream.py``, streamable HTTP);
- ``mcp-proxy``: the client → ``mcp-proxy --port P -- python _relay_upstream.py`` (HTTP in,
  the same server over stdio: the form mcp-proxy serves);
- ``gateway``: the client → ``anfitrion gateway --http`` with the same server over stdio
  (sandbox off, as mcp-proxy runs it), the gate, the execution ledger and the audit on, a
  durable SQLite store (``synchronous=full``); the tool is a write allowed by the policy;
- ``replicas``: with ``--replicas``, ``anfitrion gateway --http --replica`` ×1 and ×2 on one
  PostgreSQL schema behind ``haproxy`` (round robin, no affinity);
- ``gateway-normal``, ``gateway-tmpfs``, ``gateway-pg``, ``gateway-memory``: with
  ``--store-variants``, the same gateway on other stores, to tell the store's share of a call
  from the gate's: SQLite with ``synchronous=normal`` (commits not synced); SQLite durable in
  ``/dev/shm`` (a sync costs nothing); PostgreSQL (one stateful gateway, not a replica); and,
  an ablation no operator can choose, the in-memory store (the gate, the ledger and the audit
  all kept, in memory; its pins approved as the gateway first sees them, by a
  ``sitecustomize`` this script writes for that process only);
- ``gateway-base``: with ``--baseline DIR``, the same gateway run from another source tree
  (``DIR/anfitrion``, e.g. ``git archive <commit> src | tar -x -C /tmp/base`` and
  ``--baseline /tmp/base/src``), interleaved with this one: before and after in one run
  (with ``--replicas`` too: ``replicas-1-base`` and ``replicas-2-base``, on a schema of their
  own).

Passes are interleaved (round by round, every target at every client count), each a fixed
number of seconds after every client has connected and made one call. Per target and client
count: calls/s, p50 latency (and the p50 added over direct), and the CPU time of the relaying
process(es) per call (``/proc``: the gateway or mcp-proxy, not its upstream child).

    bash benchmarks/install_mcp_proxy.sh      # mcp-proxy in its own venv (it pins mcp<2)
    .venv/bin/python benchmarks/relay.py --rounds 3 --seconds 3 [--replicas] [--json out.json]
        [--baseline DIR] [--store-variants]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from _harness import Timings
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from anfitrion.mcp._haproxy import haproxy_config

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "parity"))  # the guarded child processes
import _processes  # noqa: E402

UPSTREAM = str(HERE / "_relay_upstream.py")
ANFITRION = str(Path(sys.executable).with_name("anfitrion"))
MCP_PROXY = os.environ.get("ANFITRION_MCP_PROXY",
                           str(Path.home() / ".cache/anfitrion/mcp-proxy/bin/mcp-proxy"))
PG = os.environ.get("ANFITRION_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
TOKEN = "relay-bench-token-" + uuid.uuid4().hex
POLICY = '[[rules]]\ntool = "b.echo"\nverdict = "allow"\nreason = "the benchmark\'s tool"\n'
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of *pids* (``/proc/PID/stat``), children not included."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


@dataclass
class Target:
    name: str
    url: str
    pids: list[int] = field(default_factory=list)
    """The relaying processes whose CPU is counted (none for direct)."""
    headers: dict[str, str] = field(default_factory=dict)


class Processes:
    """Every process the benchmark starts, each in its own process group, ended at exit — or
    by the kernel if the benchmark is killed (``tests/parity/_processes.py``)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None
              ) -> subprocess.Popen[bytes]:
        process = _processes.spawn(argv, log=self.tmp / f"{name}.log", env=env)
        self.started.append(process)
        return process

    def close(self) -> None:
        for process in reversed(self.started):
            _processes.end(process, signal.SIGTERM, wait=5)


async def wait_http(url: str, process: subprocess.Popen[bytes], log: Path, *,
                    within: float = 60) -> None:
    """Until *url* answers (any status), *within* seconds; the process's log if it exits."""
    async with httpx2.AsyncClient(timeout=2) as http:
        with anyio.fail_after(within):
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"{log.name} exited:\n{log.read_text()[-3000:]}")
                try:
                    await http.get(url)
                    return
                except httpx2.TransportError:
                    await anyio.sleep(0.1)


def gateway_config(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"mcpServers": {"b": {
        "command": sys.executable, "args": [UPSTREAM], "trusted": True, "sandbox": "off"}}}))
    (tmp / "policy.toml").write_text(POLICY)
    return path


async def approve(config: Path, store_url: str) -> None:
    """The server's tool seen and approved in the store, as an operator would."""
    from anfitrion.mcp import load_config
    from anfitrion.mcp._pinning import PinBook
    from anfitrion.mcp._toolset import McpServers
    from anfitrion.store import open_store

    store = open_store(store_url)
    try:
        async with McpServers(load_config(str(config)), store) as servers:
            await servers.refresh()
            await PinBook(store).approve("b.echo", by="benchmark")
    finally:
        await store.close()


async def start_gateway(procs: Processes, name: str, store_url: str, *, replica: bool,
                        source: str | None = None, launcher: Sequence[str] = (),
                        within: float = 60) -> Target:
    """``anfitrion gateway --http`` (from the source tree *source*, if given; run by
    *launcher*, e.g. valgrind and an interpreter, if given)."""
    config = gateway_config(procs.tmp, name)
    port = free_port()
    argv = [*launcher, ANFITRION, "gateway", "--config", str(config), "--http", "--port",
            str(port), "--store", store_url, "--policy", str(procs.tmp / "policy.toml"),
            "--approval-wait", "1"]
    env = {"ANFITRION_GATEWAY_TOKEN": TOKEN,
           "ANFITRION_GATEWAY_KEY": "relay-bench-key-0123456789abcdef0123"}
    if source is not None:
        env["PYTHONPATH"] = source
    process = procs.spawn(name, argv + (["--replica"] if replica else []), env)
    await wait_http(f"http://127.0.0.1:{port}/healthz", process, procs.tmp / f"{name}.log",
                    within=within)
    return Target(name, f"http://127.0.0.1:{port}/mcp", [process.pid],
                  {"Authorization": f"Bearer {TOKEN}"})


async def start_mcp_proxy(procs: Processes, *, launcher: Sequence[str] = (),
                          within: float = 60) -> Target:
    """``mcp-proxy`` serving the upstream server over stdio (run by *launcher*, if given)."""
    port = free_port()
    process = procs.spawn("mcp-proxy", [*launcher, MCP_PROXY, "--port", str(port), "--host",
                                        "127.0.0.1", "--", sys.executable, UPSTREAM])
    await wait_http(f"http://127.0.0.1:{port}/mcp", process, procs.tmp / "mcp-proxy.log",
                    within=within)
    return Target("mcp-proxy", f"http://127.0.0.1:{port}/mcp", [process.pid])


async def start_balanced(procs: Processes, name: str, replicas: list[Target]) -> Target:
    port = free_port()
    path = procs.tmp / f"{name}.cfg"
    path.write_text(haproxy_config(f"127.0.0.1:{port}", [r.url[7:-4] for r in replicas],
                                   maxconn=2048))
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    process = procs.spawn(name, [haproxy, "-f", str(path), "-db"])
    await wait_http(f"http://127.0.0.1:{port}/healthz", process, procs.tmp / f"{name}.log")
    return Target(name, f"http://127.0.0.1:{port}/mcp",
                  [p for r in replicas for p in r.pids], replicas[0].headers)


@contextmanager
def pg_schema() -> Iterator[str]:
    import psycopg

    schema = f"anfitrion_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(PG, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


MEMORY_PROBE = """\
# written by benchmarks/relay.py for its gateway-memory target only: the in-memory store,
# and each tool approved as the gateway first sees it (that store starts empty)
import sys
if "gateway" in sys.argv and "--store" in sys.argv:
    sys.argv[sys.argv.index("--store") + 1] = "memory://"
    from anfitrion.mcp import _pinning
    _observe = _pinning.PinBook._observe
    async def observe(self, key, server, tool, definition, *, auto_approve=False):
        return await _observe(self, key, server, tool, definition, auto_approve=True)
    _pinning.PinBook._observe = observe
"""


async def start_store_variants(procs: Processes, stack: AsyncExitStack) -> list[Target]:
    """The gateway on other stores (``--store-variants``; see the module's docstring)."""
    tmp, found = procs.tmp, []
    shm = Path("/dev/shm") / f"relay-bench-{uuid.uuid4().hex[:8]}.db"
    stack.callback(lambda: [p.unlink(missing_ok=True)
                            for p in shm.parent.glob(shm.name + "*")])
    probe = tmp / "memory-probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(MEMORY_PROBE)
    (probe / "anfitrion").symlink_to(Path(__file__).resolve().parent.parent / "src"
                                     / "anfitrion")
    stores = {"gateway-normal": f"sqlite:///{tmp / 'normal.db'}?synchronous=normal",
              "gateway-tmpfs": f"sqlite:///{shm}", "gateway-pg": stack.enter_context(pg_schema())}
    for name, url in stores.items():
        await approve(gateway_config(tmp, name), url)
        found.append(await start_gateway(procs, name, url, replica=False))
    # the probe swaps this URL for memory:// and approves the pins in the gateway's process
    found.append(await start_gateway(procs, "gateway-memory", f"sqlite:///{tmp / 'unused.db'}",
                                     replica=False, source=str(probe)))
    return found


async def start_targets(procs: Processes, stack: AsyncExitStack, replicas: bool,
                        baseline: str | None = None, store_variants: bool = False
                        ) -> list[Target]:
    tmp = procs.tmp
    targets = []
    port = free_port()
    process = procs.spawn("upstream", [sys.executable, UPSTREAM, "--http", str(port)])
    await wait_http(f"http://127.0.0.1:{port}/mcp", process, tmp / "upstream.log")
    targets.append(Target("direct", f"http://127.0.0.1:{port}/mcp"))
    if Path(MCP_PROXY).exists():
        targets.append(await start_mcp_proxy(procs))
    else:
        print(f"mcp-proxy not found at {MCP_PROXY}: bash benchmarks/install_mcp_proxy.sh",
              file=sys.stderr)
    sqlite = f"sqlite:///{tmp / 'gateway.db'}"
    await approve(gateway_config(tmp, "gateway"), sqlite)
    targets.append(await start_gateway(procs, "gateway", sqlite, replica=False))
    if store_variants:
        targets += await start_store_variants(procs, stack)
    if baseline is not None:
        base_sqlite = f"sqlite:///{tmp / 'gateway-base.db'}"
        await approve(gateway_config(tmp, "gateway-base"), base_sqlite)
        targets.append(await start_gateway(procs, "gateway-base", base_sqlite, replica=False,
                                           source=str(Path(baseline).resolve())))
    if replicas:
        url = stack.enter_context(pg_schema())
        await approve(gateway_config(tmp, "replica"), url)
        first = await start_gateway(procs, "replica-a", url, replica=True)
        second = await start_gateway(procs, "replica-b", url, replica=True)
        targets.append(await start_balanced(procs, "replicas-1", [first]))
        targets.append(await start_balanced(procs, "replicas-2", [first, second]))
        if baseline is not None:  # the same pair from the other tree, on a schema of its own
            url = stack.enter_context(pg_schema())
            await approve(gateway_config(tmp, "replica-base"), url)
            source = str(Path(baseline).resolve())
            first = await start_gateway(procs, "replica-base-a", url, replica=True,
                                        source=source)
            second = await start_gateway(procs, "replica-base-b", url, replica=True,
                                         source=source)
            targets.append(await start_balanced(procs, "replicas-1-base", [first]))
            targets.append(await start_balanced(procs, "replicas-2-base", [first, second]))
    return targets


async def one_pass(target: Target, clients: int, seconds: float) -> dict[str, float]:
    """*clients* sessions, each calling ``echo`` one call after another for *seconds*."""
    latencies = Timings()
    errors = 0
    async with AsyncExitStack() as stack:
        sessions: list[ClientSession] = []
        for _ in range(clients):
            http = await stack.enter_async_context(httpx2.AsyncClient(
                timeout=httpx2.Timeout(30, read=120), headers=target.headers,
                limits=httpx2.Limits(max_connections=4)))
            read, write = await stack.enter_async_context(
                streamable_http_client(target.url, http_client=http))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions.append(session)
        tag = uuid.uuid4().hex[:8]
        tool = "echo" if target.name in ("direct", "mcp-proxy") else "b.echo"
        # a replica keeps no connection: each client names its conversation, as a chat would
        # (a request naming none joins the principal's one conversation, served in turn)
        metas: list[Any] = [{"io.anfitrion/conversation": f"bench-{tag}-{i}"}
                            if target.name.startswith("replicas") else None
                            for i in range(clients)]
        for i, session in enumerate(sessions):  # warm: every path taken once
            await session.call_tool(tool, {"text": f"warm-{tag}-{i}"}, meta=metas[i])
        stop = time.perf_counter() + seconds
        cpu0 = cpu_seconds(target.pids)
        start = time.perf_counter()

        async def run(i: int, session: ClientSession) -> None:
            nonlocal errors
            n = 0
            while time.perf_counter() < stop:
                with latencies.step():
                    result = await session.call_tool(tool, {"text": f"{tag}-{i}-{n}"},
                                                     meta=metas[i])
                errors += bool(result.is_error)
                if result.is_error and errors <= 3:
                    print(f"  {target.name}: {result.content[0]}", file=sys.stderr)
                n += 1

        async with anyio.create_task_group() as tg:
            for i, session in enumerate(sessions):
                tg.start_soon(run, i, session)
        wall = time.perf_counter() - start
        cpu = cpu_seconds(target.pids) - cpu0
    calls = len(latencies)
    return {"calls": calls, "calls_per_s": calls / wall,
            "p50_ms": latencies.median(1e3),
            "cpu_ms_per_call": cpu / calls * 1000 if target.pids else 0.0,
            "errors": errors}


def summarise(runs: dict[tuple[str, int], list[dict[str, float]]], levels: list[int]
              ) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for (name, clients), passes in runs.items():
        cell: dict[str, Any] = {key: statistics.median(p[key] for p in passes)
                                for key in ("calls_per_s", "p50_ms", "cpu_ms_per_call")}
        cell |= {"errors": sum(p["errors"] for p in passes), "passes": len(passes)}
        table.setdefault(name, {})[str(clients)] = cell
    for name, row in table.items():
        for level in map(str, levels):
            found = row.get(level)
            direct = table.get("direct", {}).get(level)
            proxy = table.get("mcp-proxy", {}).get(level)
            if found is None:
                continue
            if direct is not None:
                found["added_p50_ms"] = found["p50_ms"] - direct["p50_ms"]
            if proxy is not None and name != "mcp-proxy":
                found["x_proxy_calls_per_s"] = found["calls_per_s"] / proxy["calls_per_s"]
                if proxy["cpu_ms_per_call"] and found["cpu_ms_per_call"]:
                    found["x_proxy_cpu"] = found["cpu_ms_per_call"] / proxy["cpu_ms_per_call"]
    return table


def print_table(table: dict[str, Any], levels: list[int]) -> None:
    print("| target | clients | calls/s | p50 ms | added p50 ms | CPU ms/call | "
          "calls/s ÷ mcp-proxy | CPU ÷ mcp-proxy | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in table.items():
        for clients in map(str, levels):
            c = row.get(clients)
            if c is None:
                continue

            def fmt(key: str, spec: str = ".2f", c: dict[str, Any] = c) -> str:
                return format(c[key], spec) if key in c else "–"
            print(f"| {name} | {clients} | {c['calls_per_s']:.0f} | {c['p50_ms']:.2f} | "
                  f"{fmt('added_p50_ms')} | {fmt('cpu_ms_per_call')} | "
                  f"{fmt('x_proxy_calls_per_s')} | {fmt('x_proxy_cpu')} | {c['errors']} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--clients", default="1,10,50")
    parser.add_argument("--only", default="", help="comma-separated target names")
    parser.add_argument("--replicas", action="store_true",
                        help="also 1 and 2 --replica gateways on PostgreSQL behind haproxy")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--store-variants", action="store_true",
                        help="also the gateway on other stores (normal, tmpfs, pg, memory)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also the gateway from the source tree DIR (holding anfitrion/)")
    args = parser.parse_args()
    levels = [int(n) for n in args.clients.split(",")]
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="relay-bench-") as tmp:
        procs = Processes(Path(tmp))
        try:
            async with AsyncExitStack() as stack:
                targets = await start_targets(procs, stack, args.replicas, args.baseline,
                                              args.store_variants)
                if args.only:
                    wanted = set(args.only.split(","))
                    targets = [t for t in targets if t.name in wanted]
                runs: dict[tuple[str, int], list[dict[str, float]]] = {}
                for round_ in range(args.rounds):
                    for clients in levels:
                        for target in targets:
                            figures = await one_pass(target, clients, args.seconds)
                            runs.setdefault((target.name, clients), []).append(figures)
                            print(f"round {round_ + 1} {target.name} ×{clients}: "
                                  f"{figures['calls_per_s']:.0f} calls/s, p50 "
                                  f"{figures['p50_ms']:.2f} ms, CPU "
                                  f"{figures['cpu_ms_per_call']:.2f} ms/call", file=sys.stderr)
        finally:
            procs.close()
    table = summarise(runs, levels)
    load_end = os.getloadavg()
    print(f"load average at start {load_start[0]:.2f}, at end {load_end[0]:.2f}; "
          f"{os.cpu_count()} CPUs; medians of {args.rounds} interleaved passes of "
          f"{args.seconds:g} s")
    print_table(table, levels)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "load_average": [load_start[0], load_end[0]], "rounds": args.rounds,
            "seconds": args.seconds, "figures": table}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
