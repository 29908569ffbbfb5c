"""Tripwires in a server's sandbox: the protected files and folders it is shown masked (the
store's database, the policy, the config, inside a folder it was granted) are empty stand-ins
the gateway watches with inotify, so that opening one is seen and audited.

The kernel refuses most of what a sandboxed server tries without anything the gateway can
see: a path outside the profile does not exist in its mount namespace (``ENOENT``, the same
answer as for any missing file), a write to a read-only bind fails inside (``EROFS``), a
connection without the proxy has no route (``ENETUNREACH``). A masked file is different: its
name exists inside, and a server has no reason to open it but to read what it must not. The
stand-in is an inode of the gateway's own (an empty file or folder in a private folder, bound
read-only over the protected path); inotify watches inodes, whatever mount or namespace an
open comes through, so an ``IN_OPEN`` on it is the server opening the protected path.

Linux only (inotify through ``libc``); where it cannot be used, the stand-ins still mask and
nothing is watched.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import struct
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio

__all__ = ["tripwires"]

IN_OPEN = 0x00000020
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")
"""``struct inotify_event``: wd, mask, cookie, len (then ``len`` bytes of name)."""


@functools.cache
def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


def _stand_in(folder: str, index: int, item: str) -> str | None:
    """An empty, read-only stand-in of *item* (a folder for a folder), or ``None`` when
    *item* does not exist."""
    if os.path.isdir(item):
        path = os.path.join(folder, f"d{index}")
        os.mkdir(path, 0o555)
        return path
    if os.path.lexists(item):
        path = os.path.join(folder, f"f{index}")
        with open(path, "wb"):
            pass
        os.chmod(path, 0o444)
        return path
    return None


async def _watch(fd: int, watches: dict[int, tuple[str, str]],
                 audit: Callable[[str], Awaitable[None]]) -> None:
    """Audit the first open of each stand-in (once each: a server opening it in a loop does
    not flood the audit log)."""
    seen: set[int] = set()
    while len(seen) < len(watches):
        await anyio.wait_readable(fd)
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            continue
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size + length
            if mask & IN_OPEN and wd in watches and wd not in seen:
                seen.add(wd)
                kind, item = watches[wd]
                await audit(f"refused: the server opened the protected {kind} {item} (masked in "
                            "its sandbox: it read nothing)")


@asynccontextmanager
async def tripwires(hidden: Iterable[str], audit: Callable[[str], Awaitable[None]]
                    ) -> AsyncIterator[dict[str, str]]:
    """Stand-ins for the *hidden* paths that exist, watched while inside; yields
    ``{protected path: stand-in}`` for :func:`anfitrion.mcp._sandbox.bwrap_argv`'s ``masks``.
    """
    folder = tempfile.mkdtemp(prefix="anfitrion-masks-")
    fd = -1
    try:
        libc = _libc()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC) if libc is not None else -1
        masks: dict[str, str] = {}
        watches: dict[int, tuple[str, str]] = {}
        for index, item in enumerate(dict.fromkeys(hidden)):
            stand_in = _stand_in(folder, index, item)
            if stand_in is None:
                continue
            masks[item] = stand_in
            if fd >= 0:
                wd = libc.inotify_add_watch(fd, os.fsencode(stand_in), IN_OPEN)
                if wd >= 0:
                    watches[wd] = ("folder" if os.path.isdir(item) else "file", item)
        async with anyio.create_task_group() as tg:
            if watches:
                tg.start_soon(_watch, fd, watches, audit)
            try:
                yield masks
            finally:
                tg.cancel_scope.cancel()
    finally:
        if fd >= 0:
            with suppress(OSError):
                os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
