"""The cost of a shadow policy: CPU time per gated call with and without one.

Each round submits CALLS read calls (``get_weather``) through one session of a
:class:`~anfitrion.Runtime` with the audit log on, and takes the process CPU time per call; the
figure is the median over ROUNDS rounds. Variants: no shadow; the default policy as shadow; a
file policy as shadow with argument rules, without and with a rate limit (a rate limit the
enforced policy lacks costs a store count and a store write per call).

Run: ``PYTHONPATH=src python benchmarks/shadow_policy.py [--store memory|sqlite] [--calls N]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import anyio
from _harness import RESULT

from anfitrion import Effect, Policy, Runtime, Toolbox
from anfitrion.policy import parse_policy

CANDIDATE = '''
[defaults]
read = "allow"
[[rules]]
tool = "send_*"
[rules.arguments.to]
email_domains = ["example.com"]
[[rules]]
tool = "get_weather"
[rules.arguments.location]
max_length = 80
[[rate_limits]]
tool = "*"
max_calls = 100000
per = "1h"
'''


def toolbox() -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def get_weather(location: str) -> dict[str, object]:
        """The weather."""
        return {**RESULT, "location": location}

    return tools


async def one_round(store_url: str, shadow: Policy | None, calls: int) -> float:
    runtime = Runtime(toolbox(), store=store_url, shadow_policy=shadow)
    session = await runtime.open("alice")
    start = time.process_time()
    for i in range(calls):
        await session.submit("get_weather", '{"location": "Lisboa, PT"}', call_id=f"c{i}")
    elapsed = time.process_time() - start
    await session.close()
    await runtime.store.close()
    return elapsed * 1e6 / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    variants: dict[str, Policy | None] = {
        "no shadow": None, "shadow: default policy": Policy.default(),
        "shadow: file policy (argument rules)":
            parse_policy(CANDIDATE.split("[[rate_limits]]")[0]),
        "shadow: file policy (rules + rate limit)": parse_policy(CANDIDATE)}
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, shadow in variants.items():
            samples = []
            for r in range(options.rounds):
                url = "memory://" if options.store == "memory" else \
                    f"sqlite:///{Path(folder) / f'{len(figures)}-{r}.db'}"
                samples.append(anyio.run(one_round, url, shadow, options.calls))
            figures[name] = statistics.median(samples)
    base = figures["no shadow"]
    print(f"store {options.store}, {options.calls} calls x {options.rounds} rounds "
          "(median CPU µs per gated call, audit on)")
    for name, value in figures.items():
        extra = "" if name == "no shadow" else \
            f"  ({value - base:+.1f} µs, {100 * (value - base) / base:+.1f}%)"
        print(f"  {name:42} {value:8.1f}{extra}")


if __name__ == "__main__":
    main()
