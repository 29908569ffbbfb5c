"""The cost of policies in other languages: a Cedar rule set of 50 policies, and an external
decision point (AuthZEN) over loopback.

Two figures for each variant, medians over ROUNDS rounds:

* **decide** — process CPU µs per ``Policy.decide`` of one call (``consult`` first, for the
  decision point), against the same policy without the Cedar rule or the decision point;
* **gated call** — process CPU µs per call submitted through a :class:`~anfitrion.Runtime`
  session (memory store, audit on), and for the decision point the wall-clock ms per call.

The decision point runs in another process (a stdlib HTTP server answering the AuthZEN
evaluation shape), so its own CPU is not counted: the figure is what the host spends asking.

Run: ``PYTHONPATH=src python benchmarks/policy_engines.py [--calls N] [--rounds N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio
from _harness import RESULT

from anfitrion import Effect, Principal, Runtime, Toolbox
from anfitrion._tools import BoundCall
from anfitrion.policy import Policy, PolicyContext, load_policy, parse_policy

BASE = '[defaults]\nread = "allow"\n'

PDP_SERVER = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        ok = body["action"]["name"] == "get_weather"
        out = json.dumps({"decision": ok}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
'''


def fifty_policies() -> str:
    """50 Cedar policies over 25 tools: permits by argument and role, asks, forbids after
    taint; the benchmark's call (``get_weather``) is decided by two of them. None names
    ``context.unproven``: its provenance lookups grow with the session (measured apart)."""
    out = []
    for i in range(24):
        out.append(f'@id("p{i}") permit(principal, action == Action::"tool{i}", resource)\n'
                   f'when {{ context.arguments has amount && context.arguments.amount < '
                   f'{(i + 1) * 10} && principal.roles.contains("r{i % 5}") }};')
        out.append(f'@id("f{i}") forbid(principal, action == Action::"tool{i}", resource)\n'
                   f'when {{ context.tainted && context.flagged.contains("to") }};')
    out.append('@id("weather") permit(principal, action == Action::"get_weather", resource)\n'
               'when { context.arguments.location like "*, PT" && context.turn < 1000 };')
    out.append('@id("weather-taint") @anfitrion("ask")\n'
               'permit(principal, action == Action::"get_weather", resource)\n'
               'when { context.tainted };')
    return "\n\n".join(out) + "\n"


def toolbox() -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def get_weather(location: str) -> dict[str, object]:
        """The weather."""
        return {**RESULT, "location": location}

    return tools


def decide_cost(policy: Policy, calls: int) -> float:
    tool = toolbox().get("get_weather")
    assert tool is not None
    context = PolicyContext(principal=Principal("alice", frozenset({"r1"})), session_id="s")

    async def run() -> float:
        start = time.process_time()
        for i in range(calls):
            call = BoundCall(f"c{i}", tool, {"location": "Lisboa, PT"})
            policy.decide(call, await policy.consult(call, context))
        return (time.process_time() - start) * 1e6 / calls

    return anyio.run(run)


def gated_cost(policy: Policy, calls: int) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        runtime = Runtime(toolbox(), store="memory://", policy=policy)
        session = await runtime.open("alice")
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(calls):
            done = await session.submit("get_weather", '{"location": "Lisboa, PT"}',
                                        call_id=f"c{i}")
            assert done.status.value == "executed", done.text
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        await session.close()
        await runtime.store.close()
        return cpu * 1e6 / calls, wall * 1e3 / calls

    return anyio.run(run)


def median_of(rounds: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", PDP_SERVER], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "tools.cedar").write_text(fifty_policies())
            Path(folder, "cedar.toml").write_text(
                BASE + '[[cedar]]\npolicies = "tools.cedar"\n')
            Path(folder, "unproven.cedar").write_text(
                fifty_policies() + '@id("unproven") forbid(principal, action, resource)\n'
                'when { context.unproven.contains("to") };\n')
            Path(folder, "unproven.toml").write_text(
                BASE + '[[cedar]]\npolicies = "unproven.cedar"\n')
            variants = {
                "baseline (TOML defaults)": parse_policy(BASE),
                "+ Cedar, 50 policies": load_policy(Path(folder, "cedar.toml")),
                "+ Cedar, 51 (context.unproven)": load_policy(Path(folder, "unproven.toml")),
                "+ AuthZEN PDP over loopback": parse_policy(
                    BASE + f'[[pdp]]\nurl = "http://127.0.0.1:{port}/access/v1/evaluation"\n'
                    "timeout = 5\n"),
            }
            report(variants, options.calls, options.rounds)
    finally:
        server.terminate()
        server.wait(timeout=10)


def report(variants: dict[str, Policy], calls: int, rounds: int) -> None:
    load = os.getloadavg()[0]
    print(f"{calls} calls x {rounds} rounds, medians; load average {load:.2f}")
    print(f"  {'':32} {'decide µs':>10} {'added':>9} {'gated µs':>10} {'added':>9} "
          f"{'wall ms':>8}")
    base_decide = base_gated = 0.0
    for name, policy in variants.items():
        decide = median_of(rounds, lambda p=policy: decide_cost(p, calls))  # type: ignore[misc]
        gated_samples = [gated_cost(policy, calls) for _ in range(rounds)]
        gated = statistics.median(s[0] for s in gated_samples)
        wall = statistics.median(s[1] for s in gated_samples)
        if not base_decide:
            base_decide, base_gated = decide, gated
        print(f"  {name:32} {decide:10.1f} {decide - base_decide:+9.1f} {gated:10.1f} "
              f"{gated - base_gated:+9.1f} {wall:8.2f}")


if __name__ == "__main__":
    main()
