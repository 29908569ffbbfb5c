"""Wrong secrets per client, counted in bounded memory: the one throttle of every door that takes
a token (the inbox's sign-in and JSON API, the gateway's static bearer token and its OAuth
access tokens).

The secret is always compared first, and only a *wrong* one is counted and refused: a throttle
that refused before comparing would let anyone sharing the person's address (on a loopback
server, every local program) lock the person out by spraying wrong tokens. So the throttle
never refuses the right secret; it turns the answer to a throttled client's wrong ones into
``429`` with ``Retry-After``, and reports each episode once (a warning, and an audit record
where the door has a store). What stops guessing is the secret's length, not the throttle.

A client is its peer address (an IPv6 peer: its /64), never a header it wrote. The table holds
at most :data:`MAX_THROTTLED_CLIENTS` clients of at most ``max_failures`` timestamps each; an
attacker with many addresses only pushes out the least recently failing, which lets them guess
again sooner and never refuses anyone.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_THROTTLED_CLIENTS", "GuessThrottle", "OnThrottled", "Throttled", "client_key"]

log = logging.getLogger("anfitrion.throttle")

MAX_THROTTLED_CLIENTS = 4096
"""Clients a throttle remembers at once; the least recently failing go first."""

OnThrottled = Callable[[Mapping[str, Any]], Awaitable[None]]
"""Awaited once per episode with its audit data (``door``, ``client``, ``failures``,
``window_seconds``, ``retry_after``): never a token."""


def client_key(scope: Mapping[str, Any]) -> str:
    """Who is presenting a secret, for throttling: the ASGI peer address (an IPv6 peer: its
    /64 network; an IPv4-mapped one: the IPv4 address).

    Headers such as ``X-Forwarded-For`` are written by the client and never trusted: behind a
    proxy every client is the proxy, as behind loopback every local program is ``127.0.0.1``.
    """
    peer = scope.get("client")
    host = str(peer[0]) if peer else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host[:100] or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass(frozen=True, slots=True)
class Throttled:
    """A wrong secret from a client over the limit: wait *retry_after* seconds; *first* for
    the wrong secret that began the episode (report it once, not per refused guess)."""

    retry_after: float
    first: bool
    client: str = ""
    door: str = ""
    failures: int = 0
    window: float = 0.0

    def audit_data(self) -> dict[str, Any]:
        """What the episode's audit record says (never a token)."""
        return {"door": self.door, "client": self.client[:100], "failures": self.failures,
                "window_seconds": self.window, "retry_after": math.ceil(self.retry_after)}


@dataclass
class GuessThrottle:
    """Wrong secrets per client in a sliding window, in bounded memory (see the module).

    Attributes:
        door: what the warning names (``sign-in``, ``gateway``).
        max_failures: wrong secrets within *window* seconds before a client is throttled.
        max_clients: clients kept at once, the least recently failing forgotten first.
    """

    door: str = "sign-in"
    max_failures: int = 10
    window: float = 60.0
    max_clients: int = field(default_factory=lambda: MAX_THROTTLED_CLIENTS)
    _failures: OrderedDict[str, deque[float]] = field(default_factory=OrderedDict)

    def record(self, client: str, now: float | None = None) -> Throttled | None:
        """Count a wrong secret from *client*: :class:`Throttled` when it is over the limit."""
        now = time.monotonic() if now is None else now
        self._forget_older_than(now - self.window)
        times = self._failures.pop(client, None)
        if times is None:
            times = deque(maxlen=self.max_failures)
        was_over = self._over(times, now)
        times.append(now)
        self._failures[client] = times  # now the most recent
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)
        if not self._over(times, now):
            return None
        wait = max(1.0, times[0] + self.window - now)
        if not was_over:  # once per episode, not per refused guess: no log flood
            log.warning("%s: %d wrong tokens from %s within %g s; its wrong tokens are "
                        "refused for %d s", self.door, self.max_failures, client, self.window,
                        math.ceil(wait))
        return Throttled(wait, not was_over, client, self.door, self.max_failures, self.window)

    def failed(self, client: str, now: float | None = None) -> float | None:
        """Count a wrong secret from *client*; the seconds it must wait, when it is over."""
        throttled = self.record(client, now)
        return None if throttled is None else throttled.retry_after

    def _over(self, times: deque[float], now: float) -> bool:
        return len(times) >= self.max_failures and times[0] > now - self.window

    def __len__(self) -> int:
        return len(self._failures)

    def _forget_older_than(self, cutoff: float) -> None:
        while self._failures:
            oldest = next(iter(self._failures))
            if self._failures[oldest][-1] > cutoff:
                return
            del self._failures[oldest]
