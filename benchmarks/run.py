"""`make bench`: anfitrion's host overhead against the floor and the peers, in one run.

Each figure is the median over several fresh processes (``--repeat``, default 3). Prints a
table and writes JSON to ``benchmarks/results/latest.json``. Offline: every model is a fake.

Parts:
  1. CPU µs per tool round trip of the floor and each anfitrion configuration (memory with and
     without the audit log, SQLite ``synchronous=full`` and ``normal``, PostgreSQL) in three
     scenarios: 200 calls in one conversation, 1,000 calls in one, 200 one-call conversations
  2. the same for Pydantic AI, the OpenAI Agents SDK and LangGraph ``create_agent``
  3. cost per call at call 10, 100 and 1,000 of one session (from the 1,000-call runs)
  4. concurrency: 100 and 1,000 sessions × 10 calls in one process; PostgreSQL with two
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

PEERS = {"langgraph": "peers.langgraph_bench", "openai_agents": "peers.openai_agents_bench",
         "pydantic_ai": "peers.pydantic_ai_bench"}
# configuration -> (store kind, variant)
CONFIGS = {"memory": ("memory", "async"), "memory_no_audit": ("memory", "noaudit"),
           "memory_sync_tool": ("memory", "sync"), "memory_otel_no_sdk": ("memory", "otel"),
           "sqlite": ("sqlite", "async"), "sqlite_synchronous_normal": ("sqlite_normal", "async"),
           "postgres": ("postgres", "async")}


# -- measurements run in a child process ---------------------------------------------------

def _scenario(stamps_of: Any, scenario: str) -> dict[str, Any]:
    """Run one scenario (``200``, ``1000``: calls in one conversation; ``200x1``: one-call
    conversations) with *stamps_of(calls)* / *stamps_of.many(n)*."""
    if scenario.endswith("x1"):
        n = int(scenario[:-2])
        return {"per_call_us": mean_per_call_us(stamps_of.many(n), n)}
    calls = int(scenario)
    stamps = stamps_of(calls)
    out = {"per_call_us": mean_per_call_us(stamps, calls)}
    if calls >= 1000:
        deltas = stamps.deltas_us()
        out.update({f"at_{n}": window_us(deltas, n) for n in (10, 100, 1000)})
    return out


class _Runner:
    def __init__(self, one: Any, many: Any) -> None:
        self.one, self.many = one, many

    def __call__(self, calls: int) -> Any:
        return self.one(calls)


def one(kind: str, arg: str) -> dict[str, Any]:
    if kind == "floor":
        import floor

        return _scenario(_Runner(floor.conversation, floor.conversations), arg)
    if kind == "peer":
        name, scenario = arg.split(":")
        module = importlib.import_module(PEERS[name])
        return _scenario(_Runner(module.conversation, module.conversations), scenario)
    if kind == "anfitrion":
        import anfitrion_bench

        store_kind, scenario, variant = arg.split(":")
        options = {"sync": variant == "sync", "audit": variant != "noaudit",
                   "otel": variant == "otel"}
        with tempfile.TemporaryDirectory() as tmp:
            url = anfitrion_bench.store_url(store_kind, tmp)
            return _scenario(_Runner(
                lambda calls: anfitrion_bench.conversation(calls, url, **options),
                lambda n: anfitrion_bench.conversations(n, url, **options)), scenario)
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
    scenarios = ("200", "200x1") if args.quick else ("200", "1000", "200x1")
    load = os.getloadavg()
    results: dict[str, Any] = {"machine": {"python": platform.python_version(),
                                           "cpus": os.cpu_count(),
                                           "platform": platform.platform(),
                                           "load_average_at_start": [round(x, 2) for x in load]},
                               "repeat": repeat, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    started = time.monotonic()

    def step(label: str, kind: str, arg: str) -> dict[str, Any]:
        progress(f"[{time.monotonic() - started:6.0f}s] {label} …")
        return measure(kind, arg, repeat)

    table: dict[str, dict[str, Any]] = {}
    if parts & {1, 2, 3}:
        table["floor"] = {sc: step(f"floor, {sc}", "floor", sc) for sc in scenarios}
    if parts & {1, 3}:
        for name, (store, variant) in CONFIGS.items():
            table[name] = {sc: step(f"anfitrion {name}, {sc}", "anfitrion",
                                    f"{store}:{sc}:{variant}") for sc in scenarios}
    if parts & {2, 3}:
        for name in PEERS:
            table[name] = {sc: step(f"{name}, {sc}", "peer", f"{name}:{sc}")
                           for sc in scenarios}
    if table:
        results["scenarios"] = table
    if 4 in parts:
        results["concurrency"] = {}
        for sessions in ("100",) if args.quick else ("100", "1000"):
            for name, kind in (("memory", "memory"), ("sqlite", "sqlite"),
                               ("postgres_2_workers", "postgres2")):
                results["concurrency"][f"{name}_{sessions}"] = step(
                    f"{sessions} sessions, {name}", "concurrency", f"{kind}:{sessions}")
    if 5 in parts:
        results["store"] = {kind: step(f"store {kind}", "store", kind)
                            for kind in ("memory", "sqlite", "postgres")}
    if 6 in parts:
        results["memory"] = step("memory per session", "memory", "1000")
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["seconds"] = round(time.monotonic() - started)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    import report

    print(report.table(results))
    progress(f"wrote {args.out} in {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
