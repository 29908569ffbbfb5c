"""Live updates for the inbox: server-sent events instead of the page polling.

``GET /events`` (signed in) is an ``text/event-stream``. It sends ``event: pending`` with
``{"count": N}`` at once and whenever the pending requests change — a new request, an answer,
a vote, an expiry — and a comment line every 15 seconds so proxies keep the connection. The
page then fetches the rendered rows (``/pending.html``) and puts the count in its title.

The store is shared with hosts in other processes, which cannot push to this server, so the
stream looks at the store once a second — one cheap query per open page, on the server, instead
of every browser fetching the whole list. A stream ends when its sign-in does (sign-out or
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
                    count, marks = await pending_state(self.store)
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
