"""Lease owners (``host/pidns:pid:token``): minted here, and whether one is a process of this
machine that died.

A leaf, so that the runtime (resuming a session), ``resume --ready`` and the resolutions (a
person settling an effect after a crash) mint and read an owner the same way.

The host part names the PID namespace beside the host name: replicas in containers that share
a host name (``network_mode: host``, a fixed ``hostname:``) but not a PID namespace cannot see
each other's processes, so a pid that is not alive *here* says nothing about a lease written
*there*. An owner without the namespace (written before it was added) is read as before: by
host name alone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid

__all__ = ["dead_local_owner", "mint_owner"]


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


def _pid_namespace() -> str:
    """This process's PID namespace (the inode of ``/proc/self/ns/pid``), ``"0"`` without
    ``/proc``."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _this_host() -> str:
    return f"{socket.gethostname()}/{_pid_namespace()}"


def mint_owner(prefix: str = "") -> str:
    """A new lease owner id for this process: ``host/pidns:pid:<prefix><random>``."""
    return f"{_this_host()}:{os.getpid()}:{prefix}{uuid.uuid4().hex[:12]}"


def dead_local_owner(owner: str | None) -> bool:
    """Whether a lease *owner* is a process of this machine and PID namespace that died."""
    if owner is None:
        return False
    host, _, rest = owner.rpartition(":")[0].rpartition(":")
    try:
        pid = int(rest)
    except ValueError:
        return False
    local = _this_host() if "/" in host else socket.gethostname()
    return host == local and pid != os.getpid() and not _pid_alive(pid)
