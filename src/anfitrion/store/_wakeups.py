"""Wake-ups for calls waiting on a person's answer, across processes: PostgreSQL
``LISTEN``/``NOTIFY``.

Every recorded answer (an approval, a rejection, a withdrawal, the vote that decides a quorum)
sends ``NOTIFY anfitrion_approvals, '<request id>'`` in the transaction that records it, so it
is delivered on commit, to every process listening on the database. A process listens on one
connection of its own (opened on the first wait, reopened on the next wait after it breaks);
a notification only wakes a waiter early, which then reads the request from the store: a lost
or a forged notification changes nothing but when it looks (:func:`anfitrion._answers.
wait_for_answer` still polls, with backoff, as on SQLite).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger("anfitrion.store")

CHANNEL = "anfitrion_approvals"
"""The notification channel (one per database: every schema's stores share it; a
notification of another schema's request wakes nobody here)."""


class ApprovalWatch:
    """One waiter's interest in one request: woken by a notification of it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.live = False
        """Whether the process's listening connection is up (else only polling finds the
        answer)."""

    def wake(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> bool:
        """Wait until a notification of the request or *timeout* seconds; whether woken."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        self._event.clear()
        return True


class Listener:
    """A process's one ``LISTEN`` connection to the database, and the waiters it wakes."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._waiters: dict[str, set[ApprovalWatch]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None
        self._live = False

    @contextlib.asynccontextmanager
    async def watch(self, request_id: str) -> AsyncIterator[ApprovalWatch]:
        """A watch of *request_id*, registered (and the listener up, if it can be) before
        the caller's first look at the store: no notification falls between the two."""
        watch = ApprovalWatch()
        self._waiters.setdefault(request_id, set()).add(watch)
        try:
            await self._ensure()
            watch.live = self._live
            yield watch
        finally:
            found = self._waiters.get(request_id)
            if found is not None:
                found.discard(watch)
                if not found:
                    del self._waiters[request_id]

    async def _ensure(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._ready = ready = asyncio.Event()
            self._task = loop.create_task(self._listen(ready))
        assert self._ready is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), 5)

    async def _listen(self, ready: asyncio.Event) -> None:
        import psycopg

        conn: Any = None
        try:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                         connect_timeout=5)
            await conn.execute(f"LISTEN {CHANNEL}")
            self._live = True
            ready.set()
            async for notice in conn.notifies():
                for watch in list(self._waiters.get(notice.payload, ())):
                    watch.wake()
        except (psycopg.Error, OSError) as exc:
            log.warning("approval wake-ups unavailable (polling instead): %s", exc)
        finally:
            self._live = False
            ready.set()
            for watches in self._waiters.values():
                for watch in watches:
                    watch.live = False
                    watch.wake()  # look at the store now: the wake-ups are gone
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done() and task.get_loop() is \
                asyncio.get_running_loop():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
