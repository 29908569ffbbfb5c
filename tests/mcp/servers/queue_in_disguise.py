"""The approval queue started by a script whose command line does not say so: a gateway must
still refuse it, by the name it reports at initialize."""

from __future__ import annotations

import anyio

from anfitrion._approvals import Reviewer
from anfitrion.mcp._approval_queue import approval_queue
from anfitrion.store import MemoryStore

if __name__ == "__main__":
    anyio.run(approval_queue(MemoryStore(), Reviewer("someone")).run_stdio_async)
