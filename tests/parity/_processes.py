"""Child processes that never outlive the process that started them (the replica tests'
gateways and haproxy, the relay benchmark's targets).

Three guards, because each covers a way the others miss:

- ``PR_SET_PDEATHSIG`` (Linux): the kernel sends the child ``SIGKILL`` when the thread that
  started it dies — even when pytest itself is killed with ``SIGKILL`` or by a timeout's
  ``os._exit``, where no Python code runs;
- every child is the leader of a process group of its own (``start_new_session``): ending it
  ends what it started (a gateway's upstream servers) with it;
- :func:`end_all` at interpreter exit (``atexit``: after Ctrl-C too) and at the end of the test
  session (``tests/parity/conftest.py``), for children a failing test's cleanup did not reach.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["end", "end_all", "spawn", "started"]

_PR_SET_PDEATHSIG = 1
_live: dict[int, subprocess.Popen[bytes]] = {}
_lock = threading.Lock()


_prctl = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the child, between fork and exec: nothing but the one system call (looked up
    before the fork)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def spawn(argv: Sequence[str], *, log: Path, env: dict[str, str] | None = None,
          **options: Any) -> subprocess.Popen[bytes]:
    """Start *argv* guarded (output to *log*, stdin closed, its own process group)."""
    with open(log, "ab") as out:
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=out, start_new_session=True,
                                   preexec_fn=_die_with_parent,
                                   env={**os.environ, **(env or {})}, **options)
    with _lock:
        _live[process.pid] = process
    return process


def started() -> list[subprocess.Popen[bytes]]:
    """The guarded children still running."""
    with _lock:
        return [p for p in _live.values() if p.poll() is None]


def end(process: subprocess.Popen[bytes], sig: int = signal.SIGKILL,
        wait: float = 10) -> None:
    """Send *sig* to *process*'s group and wait for it (then ``SIGKILL`` if it lingers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
    try:
        process.wait(wait)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(wait)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # what the group leader left behind
    with _lock:
        _live.pop(process.pid, None)


def end_all() -> list[int]:
    """End every guarded child still running; their pids."""
    with _lock:
        left = list(_live.values())
    for process in left:
        end(process)
    return [p.pid for p in left]


atexit.register(end_all)
