"""Shared workload and statistics for the benchmarks.

The workload: one conversation in which a fake model asks for a trivial read tool
(``get_weather(location)`` returning a small dict) on every turn, then answers in text. We stamp
the process CPU time each time the fake model is called; the difference between two stamps is
one tool round trip (the fake model's own cost is a few list operations).

The second scenario is many short conversations — an API behind a product: each conversation
makes one tool call and answers (two model requests); the figure is the process CPU time of
all of them divided by their number.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

ARGS_TEXT = '{"location": "Lisboa, PT"}'
RESULT = {"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}
TOOL_SCHEMA = {
    "type": "object",
    "properties": {"location": {"type": "string"}},
    "required": ["location"],
    "additionalProperties": False,
}

SCENARIOS = ("200", "1000", "200x1")
"""200 calls in one conversation, 1,000 calls in one conversation, 200 one-call conversations."""


class Stamps:
    """CPU-time stamps taken by a fake model, one per model request."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.total: float | None = None
        """For many conversations: CPU µs per conversation, measured around all of them."""

    def stamp(self) -> int:
        self.values.append(time.process_time())
        return len(self.values)

    def deltas_us(self) -> list[float]:
        v = self.values
        return [(b - a) * 1e6 for a, b in itertools.pairwise(v)]


def one_call_request(n: int) -> bool:
    """In the one-call conversations, whether model request *n* (1-based) asks for the tool
    (odd: the conversation's first request) or answers (even: its second)."""
    return n % 2 == 1


def mean_per_call_us(stamps: Stamps, calls: int) -> float:
    """Mean CPU µs per round trip over the whole conversation (first request to last)."""
    if stamps.total is not None:
        return stamps.total
    v = stamps.values
    return (v[-1] - v[0]) * 1e6 / calls


def window_us(deltas: Sequence[float], at: int, width: int = 10) -> float:
    """Median round-trip cost around call number *at* (1-based)."""
    lo = max(0, at - width)
    hi = min(len(deltas), max(at, lo + 1))
    return statistics.median(deltas[lo:hi])


class Timings:
    """Wall-clock samples of one repeated step (``time.perf_counter``), the timing loop the
    benchmarks share: ``with timings.step(): ...`` per repetition, then a median in the unit
    wanted (``timings.median(1e3)``: milliseconds)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    @contextmanager
    def step(self) -> Iterator[None]:
        """Time the block (a block that raises adds no sample)."""
        started = time.perf_counter()
        yield
        self.seconds.append(time.perf_counter() - started)

    def __len__(self) -> int:
        return len(self.seconds)

    def median(self, unit: float = 1.0) -> float:
        """The median sample, times *unit* (1: seconds, 1e3: ms, 1e6: µs)."""
        return statistics.median(self.seconds) * unit
