"""Parts 4–6 of the benchmark: concurrency, store throughput, memory per session."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _harness import ARGS_TEXT, Timings
from anfitrion_bench import make_tools, store_url

from anfitrion import (
    ApprovalAnswer,
    DeferredApprover,
    Effect,
    Host,
    Reply,
    ScriptedModel,
    StopReason,
    Toolbox,
    ToolCall,
)
from anfitrion.store import open_store

PG_URL = os.environ.get("ANFITRION_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _sessions(url: str, sessions: int, calls: int) -> dict[str, Any]:
    latencies: list[float] = []
    store = open_store(url)
    tools = make_tools()

    async def one_session(i: int) -> None:
        last = [time.perf_counter()]

        def respond(request: Any) -> Reply | str:
            now = time.perf_counter()
            latencies.append((now - last[0]) * 1e6)
            last[0] = now
            n = sum(1 for m in request.messages if isinstance(m, Reply))
            if n >= calls:
                return "done"
            return Reply((ToolCall(f"c{i}_{n}", "get_weather", ARGS_TEXT),), StopReason.TOOL_USE)

        host = Host(model=ScriptedModel(respond), tools=tools, store=store, max_turns=calls + 2)
        run = await host.run("go", principal=f"p{i % 50}")
        assert run.status.value == "completed"

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(sessions):
            tg.start_soon(one_session, i)
    wall = time.perf_counter() - started
    await store.close()
    # the first delta of each session is start-up, not a tool round trip
    per_call = [v for k, v in enumerate(latencies) if k % (calls + 1) != 0] or latencies
    return {"sessions": sessions, "calls": sessions * calls, "wall_s": wall,
            "calls_per_s": sessions * calls / wall,
            "p50_latency_us": statistics.median(per_call),
            "p99_latency_us": _percentile(per_call, 0.99)}


def concurrency(arg: str) -> dict[str, Any]:
    kind, sessions_text = arg.split(":")
    sessions = int(sessions_text)
    if kind == "postgres2":
        procs = [subprocess.Popen([sys.executable, __file__, "pg-worker", str(sessions // 2)],
                                  stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent)
                 for _ in range(2)]
        started = time.perf_counter()
        outs = [p.communicate()[0] for p in procs]
        wall = time.perf_counter() - started
        if any(p.returncode for p in procs):
            raise SystemExit("a PostgreSQL worker failed")
        import json

        results = [json.loads(o.strip().splitlines()[-1]) for o in outs]
        return {"sessions": sessions, "calls": sum(r["calls"] for r in results),
                "wall_s": wall, "calls_per_s": sum(r["calls"] for r in results) / wall,
                "p50_latency_us": statistics.median(r["p50_latency_us"] for r in results),
                "p99_latency_us": max(r["p99_latency_us"] for r in results)}
    with tempfile.TemporaryDirectory() as tmp:
        return anyio.run(_sessions, store_url(kind, tmp), sessions, 10)


async def _store(kind: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        url = store_url(kind, tmp)
        store = open_store(url)
        events = 2000
        started = time.perf_counter()
        for i in range(events):
            await store.append_audit("call.proposed", f"bench-{os.getpid()}", time.time(),
                                     {"tool": "get_weather", "i": i, "call_id": f"c{i}"})
        audit_rate = events / (time.perf_counter() - started)

        tools = Toolbox()

        @tools.tool(effect=Effect.WRITE)
        async def send(to: str) -> str:
            """Send."""
            return "sent"

        rounds = 50
        timings = Timings()
        for i in range(rounds):
            script = [Reply((ToolCall(f"w{i}", "send", '{"to": "bob"}'),), StopReason.TOOL_USE),
                      "done"]
            host = Host(model=ScriptedModel(script), tools=tools, store=store,
                        approver=DeferredApprover())
            with timings.step():
                run = await host.run("go", principal="bench")
                await store.answer_approval(ApprovalAnswer.to(run.pending[0], True, "bench"))
                done = await host.resume(run.session_id)
            assert done.status.value == "completed"
        await store.close()
        return {"audit_events_per_s": audit_rate,
                "approval_round_trip_ms": timings.median(1e3)}


def memory(arg: str) -> dict[str, Any]:
    sessions = int(arg)

    async def main() -> dict[str, Any]:
        tools = Toolbox()

        @tools.tool(effect=Effect.WRITE)
        async def send(to: str, text: str) -> str:
            """Send."""
            return "sent"

        with tempfile.TemporaryDirectory() as tmp:
            results: dict[str, Any] = {}
            for kind in ("memory", "sqlite"):
                url = store_url(kind, tmp)
                store = open_store(url)
                hosts = []
                before = _rss_bytes()
                for i in range(sessions):
                    script = [Reply((ToolCall(f"w{i}", "send",
                                              '{"to": "bob@example.com", "text": "hello"}'),),
                                    StopReason.TOOL_USE)]
                    host = Host(model=ScriptedModel(script), tools=tools, store=store,
                                approver=DeferredApprover())
                    run = await host.run("please send bob a note", principal="bench")
                    assert run.status.value == "suspended"
                    hosts.append(run)
                after = _rss_bytes()
                results[f"{kind}_rss_bytes_per_suspended_session"] = (after - before) / sessions
                if kind == "sqlite":
                    db = Path(url.removeprefix("sqlite:///"))
                    size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
                    results["sqlite_stored_bytes_per_session"] = size / sessions
                await store.close()
            return results

    return anyio.run(main)


def run(kind: str, arg: str) -> dict[str, Any]:
    if kind == "concurrency":
        return concurrency(arg)
    if kind == "store":
        return anyio.run(_store, arg)
    return memory(arg)


if __name__ == "__main__" and sys.argv[1:2] == ["pg-worker"]:
    import json

    print(json.dumps(anyio.run(_sessions, PG_URL, int(sys.argv[2]), 10)))
