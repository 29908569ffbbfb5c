"""How long the gateway relays calls on a server's last listing before it lists it again.

A host lists a server at least once per turn (:meth:`McpToolset.list_tools
<anfitrion.mcp._toolset.McpToolset.list_tools>`); through the gateway each call is a turn, so
that rule costs a ``tools/list`` round trip and a look at every pin for every call. The gateway
instead reuses a listing, and the offer decided from it, while all of these hold:

- it is younger than :attr:`ListingReuse.ttl` seconds;
- the server has not sent ``notifications/tools/list_changed`` since, on the same connection;
- no pin changed in the store since (the gateway's pin watcher marks every server stale
  within half a second of an approval, a revocation or a definition change, in any process);
- the call names a tool of the offer (an unknown name lists again: a tool just added);
- no client asked ``tools/list`` since (a client that asks gets a fresh listing).

A call a person approved is still preceded by a listing of its own (issue 35: a definition
swapped while the person read the request is caught), whatever the age of the last one.
Concurrent calls that find the listing stale wait for one listing, not one each.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio

from ..exceptions import UserError

__all__ = ["DEFAULT_LISTING_TTL", "ListingReuse"]

DEFAULT_LISTING_TTL = 2.0
"""Seconds the gateway relays calls on a listing (``gateway.listingTtl``)."""


class _Listed(Protocol):
    dead: bool
    stale: bool


class ListingReuse:
    """One server's listing as the gateway reuses it: when it was made, and the one lock
    concurrent calls wait on while it is made again."""

    def __init__(self, ttl: float = DEFAULT_LISTING_TTL) -> None:
        if ttl < 0:
            raise UserError("the listing TTL cannot be negative")
        self.ttl = ttl
        self.listed_at = float("-inf")
        self.lock = anyio.Lock()

    def listing(self) -> float:
        """A listing starts now: nothing is reused until it is done (:meth:`listed`)."""
        self.listed_at = float("-inf")
        return time.monotonic()

    def listed(self, started: float) -> None:
        """The listing begun at *started* is evaluated: its offer may be reused (its age
        counts from before the server answered)."""
        self.listed_at = started

    def fresh(self, conn: _Listed | None) -> bool:
        """Whether the last listing on *conn* may be reused for one more call."""
        return (conn is not None and not conn.dead and not conn.stale
                and time.monotonic() - self.listed_at < self.ttl)
