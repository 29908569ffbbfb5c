"""The CPU of one request of a conversation that grows, taken by runtimes in turn (as gateway
replicas take a client's conversation: lease, one call, release), on one SQLite file.

Each request resumes the conversation (its row, then its lease), submits one write call and
closes it. With ``--runtimes 2`` the two runtimes alternate, so each finds the conversation
changed by the other. Prints the CPU per request (this process, the store's thread included)
as the conversation passes 10, 100, 500 and 1,000 calls.

    PYTHONPATH=src .venv/bin/python benchmarks/conversation_turns.py [--runtimes 2] [--keep 0]

(``--keep 0`` for a source tree from before ``Runtime(keep_released=…)``.)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from anfitrion import Effect, Policy, Runtime, Toolbox
from anfitrion.policy import Decision
from anfitrion.store._sqlite import SQLiteStore


def _runtime(store: SQLiteStore, keep: int) -> Runtime:
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE)
    async def echo(text: str) -> str:
        """Echo the text."""
        return text

    kept = {"keep_released": keep} if keep else {}  # (a tree before it took none)
    return Runtime(tools=tools, store=store, **kept,
                   policy=Policy([lambda call, ctx: Decision.allow("bench", "allow")]))


async def main(runtimes: int, marks: list[int], keep: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "turns.db")
        await store.migrate()
        them = [_runtime(store, keep) for _ in range(runtimes)]
        opened = await them[0].open("alice")
        await opened.close()
        done = 0
        for mark in marks:
            started, count = time.process_time(), 0
            while done < mark:
                gated = await them[done % runtimes].resume(opened.id, force=True)
                await gated.submit("echo", {"text": f"call {done}"}, call_id=f"c{done}")
                await gated.close()
                done, count = done + 1, count + 1
            cpu = (time.process_time() - started) / count * 1000
            print(f"calls {done - count + 1:>5}–{done:<5} {cpu:7.2f} ms CPU per request "
                  f"({runtimes} runtime{'s' if runtimes > 1 else ''} in turn)")
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", type=int, default=2)
    parser.add_argument("--marks", default="10,100,500,1000")
    parser.add_argument("--keep", type=int, default=32,
                        help="Runtime(keep_released=…), as the gateway's (0: none kept)")
    args = parser.parse_args()
    asyncio.run(main(args.runtimes, [int(m) for m in args.marks.split(",")], args.keep))
