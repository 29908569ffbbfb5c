"""Wake-ups for calls waiting on a person's answer, across processes: PostgreSQL
``LISTEN``/``NOTIFY``.

Every recorded answer (an approval, a rejection, a withdrawal, the vote that decides a quorum)
sends ``NOTIFY anfitrion_approvals, '<request id>'`` in the transaction that records it, so it
is delivered on commit, to every process listening on the database. A process listens on one
connection of its own, opened on the first wait. When that connection breaks while calls
wait, every waiter looks at the store at once and polls (a second apart) while the listener
opens it again, after 0.1 s, then a pause doubling up to 5 s; once it listens again every
waiter looks once more (an answer committed while nobody listened sent a notification nobody
got) and its looks space out again. With nobody waiting, a broken connection is reopened by
the next wait. A notification only wakes a waiter early, which then reads the request from
the store: a lost or a forged notification changes nothing but when it looks
(:func:`anfitrion._answers.wait_for_answer` still polls, with backoff, as on SQLite).
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

REOPEN_FIRST = 0.1
"""Seconds before the first attempt to listen again after the connection broke …"""
REOPEN_MAX = 5.0
"""… doubling after each failed attempt up to this."""


class ApprovalWatch:
    """One waiter's interest in one request: woken by a notification of it (and whenever the
    listening connection breaks or is back, so the waiter looks at the store)."""

    def __init__(self, listener: Listener | None = None) -> None:
        self._event = asyncio.Event()
        self._listener = listener

    @property
    def live(self) -> bool:
        """Whether the process's listening connection is up now (else only polling finds the
        answer): read at each pause, so a waiter's looks space out again once it is back."""
        return self._listener is not None and self._listener.live

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
        self.live = False
        """Whether the listening connection is up (``LISTEN`` done, notifications read)."""
        self.backend_pid: int | None = None
        """The listening connection's server process (``pg_stat_activity.pid``) while up."""

    @contextlib.asynccontextmanager
    async def watch(self, request_id: str) -> AsyncIterator[ApprovalWatch]:
        """A watch of *request_id*, registered (and the listener up, if it can be) before
        the caller's first look at the store: no notification falls between the two."""
        watch = ApprovalWatch(self)
        self._waiters.setdefault(request_id, set()).add(watch)
        try:
            await self._ensure()
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
        """Listen until cancelled; a broken connection is opened again while calls wait."""
        pause, again = REOPEN_FIRST, False
        while True:
            if await self._listen_once(ready, again):
                pause = REOPEN_FIRST  # it was up: the next failure starts the pauses again
            if not self._waiters:  # nobody waits: the next watch opens it again
                return
            await asyncio.sleep(pause)
            pause, again = min(pause * 2, REOPEN_MAX), True

    async def _listen_once(self, ready: asyncio.Event, again: bool) -> bool:
        """One listening connection, until it breaks; whether it was up. *again*: opened
        after a broken one (or a failed attempt), while calls wait."""
        import psycopg

        conn: Any = None
        up = False
        try:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                         connect_timeout=5)
            await conn.execute(f"LISTEN {CHANNEL}")
            self.backend_pid = conn.info.backend_pid
            self.live = up = True
            ready.set()
            if again:  # an answer committed while nobody listened: every waiter looks
                log.warning("approval wake-ups available again")
                self._wake_all()
            async for notice in conn.notifies():
                for watch in list(self._waiters.get(notice.payload, ())):
                    watch.wake()
        except (psycopg.Error, OSError) as exc:
            (log.warning if up or not again else log.debug)(
                "approval wake-ups unavailable (polling instead): %s", exc)
        finally:
            self.live = False
            self.backend_pid = None
            ready.set()
            if up:  # look at the store now: the wake-ups are gone
                self._wake_all()
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        return up

    def _wake_all(self) -> None:
        for watches in self._waiters.values():
            for watch in watches:
                watch.wake()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done() and task.get_loop() is \
                asyncio.get_running_loop():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
