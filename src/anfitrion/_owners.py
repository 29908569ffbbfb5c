"""Lease owners (``host:pid:token``): whether one is a process of this machine that died.

A leaf, so that the runtime (resuming a session) and the resolutions (a person settling an
effect after a crash) read an owner the same way.
"""

from __future__ import annotations

import contextlib
import os
import socket

__all__ = ["dead_local_owner"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie has died: its lease is free
    with contextlib.suppress(OSError, IndexError), \
            open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def dead_local_owner(owner: str | None) -> bool:
    """Whether a lease *owner* (``host:pid:token``) is a process of this machine that died."""
    if owner is None:
        return False
    host, _, rest = owner.rpartition(":")[0].rpartition(":")
    try:
        pid = int(rest)
    except ValueError:
        return False
    return host == socket.gethostname() and pid != os.getpid() and not _pid_alive(pid)
