"""Live updates for the inbox: server-sent events instead of the page polling.

``GET /events`` (signed in) is an ``text/event-stream``. It sends ``event: pending`` with
``{"count": N}`` at once and whenever the pending requests change — a new request, an answer,
a vote, an expiry — and a comment line every 15 seconds so proxies keep the connection. The
page then fetches the rendered rows (``/pending.html``) and puts the count in its title.

The store is shared with hosts in other processes, which cannot push to this server, so the
streams look at the store once a second — **one read for all open pages** (issue 35: it was one
per page, 13 ms of CPU each at 1,000 pending): the first stream due reads the pending list, the
others take what it read (:meth:`PendingEvents.shared_state`), so the cost does not grow with
the number of pages. A stream ends when its sign-in does (sign-out or
expiry) and after :data:`STREAM_SECONDS` at most (the browser reconnects, signed in again or
not); at most :data:`MAX_STREAMS` are open at once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import anyio

from ..store import ApprovalStore

__all__ = ["MAX_STREAMS", "STREAM_SECONDS", "PendingEvents", "pending_state"]

MAX_STREAMS = 64
STREAM_SECONDS = 600.0
KEEPALIVE_SECONDS = 15.0


async def pending_state(store: ApprovalStore) -> tuple[int, tuple[tuple[str, int], ...]]:
    """The pending count, and what identifies the pending list (ids and votes so far)."""
    now = datetime.now(UTC)
    pending = [r for r in await store.list_approvals(pending_only=True) if not r.expired(now)]
    marks = []
    for r in pending:
        marks.append((r.id, len(await store.list_approval_votes(r.id)) if r.quorum else 0))
    return len(pending), tuple(marks)


class PendingEvents:
    """The event streams of one inbox app (module docstring)."""

    def __init__(self, store: ApprovalStore, *, interval: float = 1.0) -> None:
        self.store = store
        self.interval = interval
        self.open = 0
        self.reads = 0
        self._state: tuple[int, tuple[tuple[str, int], ...]] | None = None
        self._read_at = 0.0
        self._lock: anyio.Lock | None = None

    async def shared_state(self) -> tuple[int, tuple[tuple[str, int], ...]]:
        """:func:`pending_state`, read at most once per *interval* for all streams together
        (a stream due while another reads waits for that read)."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._state is None or anyio.current_time() - self._read_at >= self.interval:
                self._state = await pending_state(self.store)
                self._read_at = anyio.current_time()
                self.reads += 1
            return self._state

    def full(self) -> bool:
        return self.open >= MAX_STREAMS

    async def stream(self, still_signed_in: Callable[[], bool]) -> AsyncIterator[str]:
        """SSE messages until the sign-in ends or the stream's time is up."""
        self.open += 1
        try:
            last: tuple[tuple[str, int], ...] | None = None
            quiet = 0.0
            with anyio.move_on_after(STREAM_SECONDS):
                yield "retry: 2000\n\n"
                while still_signed_in():
                    count, marks = await self.shared_state()
                    if marks != last:
                        last, quiet = marks, 0.0
                        yield f"event: pending\ndata: {json.dumps({'count': count})}\n\n"
                    elif quiet >= KEEPALIVE_SECONDS:
                        quiet = 0.0
                        yield ": still here\n\n"
                    await anyio.sleep(self.interval)
                    quiet += self.interval
        finally:
            self.open -= 1
