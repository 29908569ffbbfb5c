"""CPU of the live inbox: open pages' event streams over a store with many pending requests.

    PYTHONPATH=src python benchmarks/inbox_live.py [--pages 50] [--pending 1000] [--seconds 10]

A SQLite store (a file, as ``anfitrion serve`` uses) holds *pending* open approval requests;
*pages* event streams of one inbox (``web._live.PendingEvents``, what ``GET /events`` serves) are
consumed for *seconds*; prints the process's CPU per wall second and the store reads, for the
shared read (one read per second for all pages) and for one read per page (the design before
issue 35, rebuilt here by overriding ``shared_state``), and how long a new request takes to
reach every page.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from contextlib import aclosing

import anyio

from anfitrion._approvals import ApprovalRequest
from anfitrion.store import open_store
from anfitrion.web._live import PendingEvents, pending_state


class PerPage(PendingEvents):
    """Every stream reads the pending list itself (before issue 35)."""

    async def shared_state(self) -> tuple[int, tuple[tuple[str, int], ...]]:
        self.reads += 1
        return await pending_state(self.store)


def _request(i: int) -> ApprovalRequest:
    return ApprovalRequest.for_call(
        session_id=f"s{i}", principal_id="alice", call_id=f"c{i}", tool_name="send_email",
        tool_definition_hash="h", arguments={"to": f"user{i}@example.org"}, effect="write",
        reason="writes need a person", rule_id="default.write")


async def _run(events: PendingEvents, pages: int, seconds: float, store: object
               ) -> tuple[float, float]:
    """(CPU seconds per wall second, seconds until every page saw a new request)."""
    seen: list[float] = []
    added: list[float] = []

    async def page() -> None:
        messages = 0
        async with aclosing(events.stream(lambda: True)) as stream:
            async for message in stream:
                if message.startswith("event: pending"):
                    messages += 1
                    if messages == 2:
                        seen.append(time.monotonic())
                        return

    cpu, wall = time.process_time(), time.monotonic()
    with anyio.move_on_after(seconds + 5):
        async with anyio.create_task_group() as tg:
            for _ in range(pages):
                tg.start_soon(page)
            await anyio.sleep(seconds)
            added.append(time.monotonic())
            await store.create_approval(_request(10**6))  # type: ignore[attr-defined]
    cpu_rate = (time.process_time() - cpu) / (time.monotonic() - wall)
    delay = (max(seen) - added[0]) if len(seen) == pages and added else float("nan")
    return cpu_rate, delay


async def main(pages: int, pending: int, seconds: float) -> None:
    for kind in (PendingEvents, PerPage):
        with tempfile.TemporaryDirectory() as folder:
            store = open_store(f"sqlite:///{os.path.join(folder, 'inbox.db')}")
            try:
                for i in range(pending):
                    await store.create_approval(_request(i))
                events = kind(store)
                rate, delay = await _run(events, pages, seconds, store)
                name = "shared read" if kind is PendingEvents else "read per page"
                print(f"{name:14} {pages} pages, {pending} pending: {rate:.3f} CPU s per s, "
                      f"{events.reads} reads in {seconds:g} s, every page told of a new "
                      f"request after {delay:.2f} s")
            finally:
                await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    anyio.run(main, args.pages, args.pending, args.seconds)
