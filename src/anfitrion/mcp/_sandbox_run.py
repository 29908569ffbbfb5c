"""Starting a stdio server inside its sandbox: the command line, the egress proxy, the
``pids`` cgroup, and what is left to end when the server is closed.

See :mod:`anfitrion.mcp._sandbox` for the profile and :mod:`anfitrion.mcp._egress` for the
proxy. Refusals and containment the gateway can see are reported to ``audit`` (the toolset
records them in the audit log): a destination refused by the proxy, a protected file opened
(:mod:`anfitrion.mcp._sandbox_watch`), the process limit reached, processes left behind and
ended at close.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio

from .._home import environment
from ._egress import egress_proxy
from ._sandbox import (
    PROXY_PORT,
    PROXY_SOCKET,
    SandboxProfile,
    bwrap_argv,
    bwrap_path,
    program_paths,
    python_forwarder,
    sandbox_env,
)
from ._sandbox_watch import tripwires

__all__ = ["SandboxedLaunch", "sandboxed"]

log = logging.getLogger("anfitrion.mcp")
_counter = itertools.count(1)
LINGER = 2.0
"""Seconds the sandbox's processes have to end after the server, before they are killed."""


def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup folder of *controller* (cgroup v1), or of the unified
    hierarchy (v2) when it offers *controller*."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            folder = Path("/sys/fs/cgroup", controller, path.lstrip("/"))
            if folder.is_dir():
                return folder
    for line in lines:
        if line.startswith("0::"):
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                folder = root / line[3:].lstrip("/")
                with suppress(OSError):
                    if controller in (folder / "cgroup.subtree_control").read_text().split():
                        return folder
    return None


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


_STALE = re.compile(r"anfitrion-(?:(?P<ns>[0-9]{1,20})-)?(?P<pid>[0-9]{1,10})-[0-9]{1,10}")
"""Our cgroups: ``anfitrion-<pid namespace>-<gateway pid>-<n>`` (and, from before the
namespace was in the name, ``anfitrion-<pid>-<n>``)."""
_cleaned: set[Path] = set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def clean_stale_cgroups(parent: Path) -> list[str]:
    """Remove the cgroups a gateway killed by a signal left in *parent*; returns their names.

    Only folders named as :func:`make_pids_cgroup` names them, made in this PID namespace
    (the number in the name is a PID only there), whose gateway process is gone. A process
    still in one (a server the dead gateway started) is killed first; a folder named the old
    way (no namespace) is only removed when empty. A PID in use again by another process
    keeps its folder (left for a later start: never a live gateway's)."""
    removed: list[str] = []
    ours = _pid_namespace()
    try:
        entries = sorted(parent.iterdir())
    except OSError:
        return removed
    for folder in entries:
        match = _STALE.fullmatch(folder.name)
        if match is None or not folder.is_dir() or folder.is_symlink():
            continue
        namespace = int(match["ns"]) if match["ns"] else None
        if (namespace is not None and namespace != ours) or _alive(int(match["pid"])):
            continue
        if namespace is not None:
            for pid in _cgroup_pids(folder):
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for _ in range(50):  # a killed process leaves its cgroup a moment later
            try:
                folder.rmdir()
            except OSError:
                if not _cgroup_pids(folder):
                    break
                time.sleep(0.02)
                continue
            removed.append(folder.name)
            break
    return removed


def make_pids_cgroup(limit: int) -> Path | None:
    """A fresh cgroup allowing at most *limit* processes, or ``None`` where none can be made
    (then only ``RLIMIT_NPROC`` holds, which does not bind root). The first one made in a
    folder clears what killed gateways left there (:func:`clean_stale_cgroups`)."""
    parent = _own_cgroup("pids")
    if parent is None:
        return None
    if parent not in _cleaned:
        _cleaned.add(parent)
        for name in clean_stale_cgroups(parent):
            log.warning("removed the cgroup %s left by a gateway that was killed", name)
    folder = parent / f"anfitrion-{_pid_namespace()}-{os.getpid()}-{next(_counter)}"
    try:
        folder.mkdir()
        (folder / "pids.max").write_text(str(limit))
    except OSError:
        with suppress(OSError):
            folder.rmdir()
        return None
    return folder


def _cgroup_pids(folder: Path) -> list[int]:
    with suppress(OSError, ValueError):
        return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    return []


async def end_cgroup(folder: Path) -> tuple[int, int]:
    """End what is left in the cgroup and remove it; returns (processes that were still
    running a moment after the server ended, times the process limit was hit).

    The PID namespace ends with the server; its processes get a moment to go, then whatever
    is still there is killed (a process that escaped the namespace would be)."""
    with anyio.move_on_after(LINGER):
        while _cgroup_pids(folder):
            await anyio.sleep(0.02)
    ended = 0
    for _ in range(50):
        pids = _cgroup_pids(folder)
        if not pids:
            break
        ended = max(ended, len(pids))
        for pid in pids:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        await anyio.sleep(0.02)
    hit = 0
    with suppress(OSError, ValueError):
        for line in (folder / "pids.events").read_text().splitlines():
            if line.startswith("max "):
                hit = int(line.split()[1])
    with suppress(OSError):
        folder.rmdir()
    return ended, hit


@dataclass(frozen=True, slots=True)
class SandboxedLaunch:
    argv: list[str]
    env: dict[str, str]
    cgroup: Path | None


def _services(network: Iterable[str]) -> list[str]:
    from ._egress import _is_loopback, _split
    out = []
    for target in network:
        parsed = _split(target)
        if parsed is not None and _is_loopback(parsed[0]) and parsed[1] != PROXY_PORT:
            out.append(target)
    return out


@asynccontextmanager
async def sandboxed(profile: SandboxProfile, command: list[str], env: Mapping[str, str], *,
                    cwd: str | None, hidden: Iterable[str],
                    audit: Callable[[str], Awaitable[None]]) -> AsyncIterator[SandboxedLaunch]:
    """The launch of *command* in *profile* while inside (the proxy serves meanwhile); on
    exit, what the server left behind is ended.

    Raises:
        SandboxUnavailable: bubblewrap cannot run here (with the install hint).
    """
    bwrap = bwrap_path()
    async with AsyncExitStack() as stack:
        program = program_paths(command[0], command[1:], path=env.get("PATH"),
                                home=environment().get("HOME"), cwd=cwd)
        socket_path: str | None = None
        forwarder: list[str] = []
        if profile.network:
            socket_path = await stack.enter_async_context(egress_proxy(profile.network, audit))
            forwarder = [*python_forwarder(), PROXY_SOCKET, str(PROXY_PORT),
                         *_services(profile.network), "--"]
            program += program_paths(forwarder[0], forwarder[3:4], path=None, home=None)
        hidden = list(hidden)
        masks = await stack.enter_async_context(tripwires(hidden, audit))
        argv = bwrap_argv(profile, command, bwrap=bwrap, program=program, hidden=hidden,
                          cwd=cwd, proxy_socket=socket_path, forwarder=forwarder, masks=masks)
        cgroup = make_pids_cgroup(profile.limits.processes)
        if cgroup is not None:  # joined before bwrap starts: every process it makes is in it
            argv = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup),
                    *argv]
        try:
            yield SandboxedLaunch(argv, sandbox_env(env, profile), cgroup)
        finally:
            if cgroup is not None:
                with anyio.CancelScope(shield=True):
                    ended, hit = await end_cgroup(cgroup)
                if hit:
                    await audit(f"contained: the process limit ({profile.limits.processes}) "
                                f"was reached {hit} times")
                if ended:
                    await audit(f"contained: {ended} processes left behind were ended")
