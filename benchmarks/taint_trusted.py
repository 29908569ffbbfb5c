"""Taint work per round trip for a trusted tool (issue #22): what the gate asks of the session's
provenance index and the default policy for one call — the result indexed, the arguments
flagged, the decision — in a conversation of trusted results only, then after one untrusted
result.

    python benchmarks/taint_trusted.py               # medians of 7 runs, µs per round trip
    python benchmarks/taint_trusted.py --once 2000   # one run (for valgrind --tool=callgrind)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from anfitrion import Effect, Principal, Tool
from anfitrion._conversation import Provenance, ToolResult
from anfitrion._provenance import TaintIndex
from anfitrion._tools import BoundCall
from anfitrion.policy import Policy, PolicyContext

TOOL = Tool.from_schema("get_weather", {"type": "object"}, lambda a: "ok", effect=Effect.READ,
                        provenance=Provenance.TRUSTED)
POLICY = Policy.default()
PRINCIPAL = Principal("alice")


def _result(i: int) -> ToolResult:
    content = json.dumps({"id": f"w-{i}", "city": "Paris", "forecast": [
        {"day": d, "summary": f"light rain then sun, {10 + d} degrees", "wind_kmh": 12 + d}
        for d in range(4)]})
    return ToolResult(f"c{i}", TOOL.name, content, provenance=Provenance.TRUSTED)


def round_trips(calls: int, *, untrusted_first: bool = False) -> float:
    """Seconds for *calls* round trips in one conversation."""
    index = TaintIndex()
    index.add_principal_text("What is the weather in Paris this week? Reply briefly.")
    if untrusted_first:
        index.add_result(ToolResult("u0", "web_fetch", "Paris travel tips: see example.org",
                                    provenance=Provenance.UNTRUSTED), 0)
    results = [_result(i) for i in range(calls)]
    started = time.perf_counter()
    for i, result in enumerate(results):
        arguments = {"city": "Paris", "days": 4}
        flagged = index.flag(arguments)
        context = PolicyContext(principal=PRINCIPAL, session_id="s", turn=i + 1,
                                untrusted_sources=index.sources, flagged_arguments=flagged,
                                provenance=index)
        POLICY.decide(BoundCall(f"c{i}", TOOL, arguments), context)
        index.add_result(result, i + 1)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--once", type=int, metavar="CALLS")
    parser.add_argument("--untrusted-first", action="store_true")
    args = parser.parse_args()
    if args.once:
        round_trips(args.once, untrusted_first=args.untrusted_first)
        return
    for label, untrusted in (("trusted only", False), ("after one untrusted result", True)):
        runs = [round_trips(200, untrusted_first=untrusted) / 200 * 1e6 for _ in range(7)]
        print(f"{label}: {statistics.median(runs):.1f} µs per round trip "
              f"(median of 7 runs of 200 calls; min {min(runs):.1f})")


if __name__ == "__main__":
    main()
