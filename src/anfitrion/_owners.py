"""Lease owners (``host/pidns:pid:token``): minted here, and whether one is a process of this
machine that died.

A leaf, so that the runtime (resuming a session), ``resume --ready`` and the resolutions (a
person settling an effect after a crash) mint and read an owner the same way.

The host part names the PID namespace beside the host name: replicas in containers that share
a host name (``network_mode: host``, a fixed ``hostname:``) but not a PID namespace cannot see
each other's processes, so a pid that is not alive *here* says nothing about a lease written
*there*. An owner without the namespace (written before it was added) is read as before: by
host name alone.

An owner is read from a store row, which is untrusted: whatever does not read as one this
module could have minted (a pid that is not plain ASCII digits, out of range, no token) is
never known dead, so reading it neither fails nor frees a lease.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid

__all__ = ["dead_local_owner", "mint_owner"]


_PID_MAX_LIMIT = 1 << 22
"""Linux's largest possible pid (``PID_MAX_LIMIT`` on 64-bit), above other systems' too."""


def _pid_max() -> int:
    """The largest pid this system hands out (``/proc/sys/kernel/pid_max``)."""
    try:
        with open("/proc/sys/kernel/pid_max", encoding="ascii") as f:
            return min(int(f.read()), _PID_MAX_LIMIT)
    except (OSError, ValueError):
        return _PID_MAX_LIMIT


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
    if not isinstance(owner, str):  # None, or whatever else a hostile row holds
        return False
    ran, _, token = owner.rpartition(":")
    host, _, digits = ran.rpartition(":")
    # only a pid as mint_owner() writes it: int() would also take "+7", " 7", "0_7", "٧"
    # and negatives (a process group for os.kill), and a huge one overflows os.kill
    if not (token and digits.isascii() and digits.isdigit() and digits[0] != "0"
            and len(digits) <= len(str(_PID_MAX_LIMIT))):
        return False
    pid = int(digits)
    if pid > _pid_max():
        return False
    local = _this_host() if "/" in host else socket.gethostname()
    return host == local and pid != os.getpid() and not _pid_alive(pid)
