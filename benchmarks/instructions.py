"""Instructions per tool round trip under callgrind: figures the machine's load does not move.

Each figure is the difference between two runs of the same scenario, *small* and *large*
calls (or one-call conversations), divided by their difference: start-up, imports and the
first calls cancel out. Needs ``valgrind``; runs the anfitrion on ``PYTHONPATH``.

    PYTHONPATH=src python benchmarks/instructions.py                 # every scenario below
    PYTHONPATH=src python benchmarks/instructions.py --scenario 200x1 --store memory

Scenarios: ``calls`` (one conversation, calls *small*→*large*), ``200x1`` (one-call
conversations on one host, conversations *small*→*large*); variants: ``audit`` (the default
host), ``noaudit``, ``otel`` (``instrument(host)`` with no SDK).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import sys
sys.path.insert(0, {here!r})
import anfitrion_bench as b
kind, n, store, variant = {kind!r}, {n}, {store!r}, {variant!r}
audit, otel = variant != "noaudit", variant == "otel"
if kind == "calls":
    b.conversation(n, store, audit=audit, otel=otel)
else:
    b.conversations(n, store, audit=audit, otel=otel)
"""


_WARM: set[tuple[str, str, str]] = set()


def instructions(kind: str, n: int, store: str, variant: str) -> int:
    """Instructions of one process running *n* calls (or conversations).

    The scenario runs once first without valgrind, so that every module's bytecode is cached:
    otherwise the first measured process compiles what changed since the last run, and that
    compilation (tens of millions of instructions) lands in one figure and not the other."""
    with tempfile.TemporaryDirectory() as tmp:
        url = store if store != "sqlite" else f"sqlite:///{os.path.join(tmp, 'warm.db')}"
        if (kind, store, variant) not in _WARM:
            subprocess.run([sys.executable, "-c", CHILD.format(
                here=str(HERE), kind=kind, n=1, store=url, variant=variant)],
                capture_output=True, check=True)
            _WARM.add((kind, store, variant))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        url = store
        if store == "sqlite":
            url = f"sqlite:///{os.path.join(tmp, 'bench.db')}"
        code = CHILD.format(here=str(HERE), kind=kind, n=n, store=url, variant=variant)
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             sys.executable, "-c", code],
            capture_output=True, text=True, check=True)
        found = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
        if found is None:
            raise RuntimeError(proc.stderr[-2000:])
        return int(found.group(1))


def per_call(kind: str, small: int, large: int, store: str, variant: str) -> float:
    return (instructions(kind, large, store, variant)
            - instructions(kind, small, store, variant)) / (large - small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=("calls", "200x1"), action="append")
    parser.add_argument("--store", default="memory", choices=("memory", "sqlite"))
    parser.add_argument("--variant", choices=("audit", "noaudit", "otel"), action="append")
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=400)
    args = parser.parse_args()
    store = "memory://" if args.store == "memory" else "sqlite"
    for scenario in args.scenario or ("calls", "200x1"):
        for variant in args.variant or ("audit", "noaudit"):
            k = per_call(scenario, args.small, args.large, store, variant)
            unit = "round trip" if scenario == "calls" else "one-call conversation"
            print(f"{scenario:6} {args.store:7} {variant:8} {k / 1000:9.1f}k instructions "
                  f"per {unit}", flush=True)


if __name__ == "__main__":
    main()
