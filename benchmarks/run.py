"""`make bench`: anfitrion's host overhead against the floor and the peers, in one run.

Each figure is the median over several fresh processes (``--repeat``, default 3). Prints a
table and writes JSON to ``benchmarks/results/latest.json``. Offline: every model is a fake.

Parts:
  1. host overhead per tool round trip (memory, SQLite, PostgreSQL) vs the floor
  2. the same workload in Pydantic AI, the OpenAI Agents SDK and LangGraph
  3. cost per call at call 10, 100 and 1,000 of one session
  4. concurrency: 1,000 sessions × 10 calls in one process; PostgreSQL with two processes
  5. store: audit events per second with the hash chain; approval suspend → resume round trip
  6. memory: RSS per suspended session in process, stored bytes per session
"""

from __future__ import annotations

import argparse
import importlib
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import mean_per_call_us, window_us  # noqa: E402

PEERS = {"pydantic_ai": "peers.pydantic_ai_bench", "openai_agents": "peers.openai_agents_bench",
         "langgraph": "peers.langgraph_bench"}


# -- measurements run in a child process ---------------------------------------------------

def one(kind: str, arg: str) -> dict[str, Any]:
    if kind == "floor":
        import floor

        calls = int(arg)
        return {"per_call_us": mean_per_call_us(floor.conversation(calls), calls)}
    if kind == "peer":
        name, calls_text = arg.split(":")
        module = importlib.import_module(PEERS[name])
        calls = int(calls_text)
        stamps = module.conversation(calls)
        deltas = stamps.deltas_us()
        out = {"per_call_us": mean_per_call_us(stamps, calls)}
        if calls >= 1000:
            out.update({f"at_{n}": window_us(deltas, n) for n in (10, 100, 1000)})
        return out
    if kind == "anfitrion":
        import anfitrion_bench

        store_kind, calls_text, variant = arg.split(":")
        calls = int(calls_text)
        with tempfile.TemporaryDirectory() as tmp:
            url = anfitrion_bench.store_url(store_kind, tmp)
            stamps = anfitrion_bench.conversation(calls, url, sync=variant == "sync",
                                                  audit=variant != "noaudit",
                                                  otel=variant == "otel")
        deltas = stamps.deltas_us()
        out = {"per_call_us": mean_per_call_us(stamps, calls)}
        if calls >= 1000:
            out.update({f"at_{n}": window_us(deltas, n) for n in (10, 100, 1000)})
        return out
    if kind in ("concurrency", "store", "memory"):
        import parts

        return parts.run(kind, arg)
    raise SystemExit(f"unknown measurement {kind}")


def measure(kind: str, arg: str, repeat: int) -> dict[str, Any]:
    runs = []
    for _ in range(repeat):
        proc = subprocess.run([sys.executable, str(HERE / "run.py"), "--one", kind, arg],
                              capture_output=True, text=True, check=False, cwd=HERE)
        if proc.returncode != 0:
            return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    keys = runs[0].keys()
    return {k: statistics.median(r[k] for r in runs) if isinstance(runs[0][k], (int, float))
            else runs[0][k] for k in keys}


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=2, metavar=("KIND", "ARG"), help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=3, help="processes per figure")
    parser.add_argument("--parts", default="1,2,3,4,5,6", help="which parts to run")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one process")
    parser.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    repeat = 1 if args.quick else args.repeat
    parts = {int(p) for p in args.parts.split(",")}
    long_calls = 200 if args.quick else 1000
    results: dict[str, Any] = {"machine": {"python": platform.python_version(),
                                           "cpus": os.cpu_count(),
                                           "platform": platform.platform()},
                               "repeat": repeat, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    started = time.monotonic()

    def step(label: str, kind: str, arg: str) -> dict[str, Any]:
        progress(f"[{time.monotonic() - started:6.0f}s] {label} …")
        return measure(kind, arg, repeat)

    if parts & {1, 2, 3}:
        results["floor"] = step("floor", "floor", "200")
    if 1 in parts:
        results["host"] = {
            "memory": step("anfitrion, memory store", "anfitrion", "memory:200:async"),
            "memory_sync_tool": step("anfitrion, memory store, sync tool", "anfitrion",
                                     "memory:200:sync"),
            "memory_no_audit": step("anfitrion, memory store, no audit", "anfitrion",
                                    "memory:200:noaudit"),
            "memory_otel_no_sdk": step("anfitrion, memory store, instrumented, no SDK",
                                       "anfitrion", "memory:200:otel"),
            "sqlite": step("anfitrion, SQLite", "anfitrion", "sqlite:200:async"),
            "sqlite_synchronous_normal": step("anfitrion, SQLite synchronous=normal",
                                              "anfitrion", "sqlite_normal:200:async"),
            "postgres": step("anfitrion, PostgreSQL", "anfitrion", "postgres:200:async"),
        }
    if 2 in parts:
        results["peers"] = {name: {"1": step(f"{name}, 1 call", "peer", f"{name}:1"),
                                   "200": step(f"{name}, 200 calls", "peer", f"{name}:200")}
                            for name in PEERS}
    if 3 in parts:
        results["scaling"] = {
            "anfitrion": step(f"anfitrion, {long_calls} calls", "anfitrion",
                              f"memory:{long_calls}:async"),
            "anfitrion_sqlite": step(f"anfitrion SQLite, {long_calls} calls", "anfitrion",
                                     f"sqlite:{long_calls}:async"),
            **{name: step(f"{name}, {long_calls} calls", "peer", f"{name}:{long_calls}")
               for name in PEERS},
        }
    if 4 in parts:
        sessions = "100" if args.quick else "1000"
        results["concurrency"] = {
            "memory": step(f"{sessions} sessions, memory", "concurrency", f"memory:{sessions}"),
            "sqlite": step(f"{sessions} sessions, SQLite", "concurrency", f"sqlite:{sessions}"),
            "postgres_2_workers": step(f"{sessions} sessions, PostgreSQL, 2 processes",
                                       "concurrency", f"postgres2:{sessions}"),
        }
    if 5 in parts:
        results["store"] = {kind: step(f"store {kind}", "store", kind)
                            for kind in ("memory", "sqlite", "postgres")}
    if 6 in parts:
        results["memory"] = step("memory per session", "memory", "1000")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    import report

    print(report.table(results))
    progress(f"wrote {args.out} in {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
