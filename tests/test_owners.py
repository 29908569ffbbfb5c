"""Lease owners: a pid that is not alive here frees a lease only if the owner ran here — this
host *and* this PID namespace (replicas in containers that share a host name)."""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from anfitrion._owners import dead_local_owner, mint_owner
from anfitrion._runtime import reap_dead_leases
from anfitrion.store import SessionState, open_store


def _dead_pid() -> int:
    """A pid that was ours and is gone (reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _with_pid(owner: str, pid: int) -> str:
    host, _, token = owner.split(":")
    return f"{host}:{pid}:{token}"


def test_an_owner_of_this_namespace_whose_pid_died_is_dead() -> None:
    assert dead_local_owner(_with_pid(mint_owner(), _dead_pid())) is True


def test_a_live_owner_and_ourselves_are_not_dead() -> None:
    ours = mint_owner()
    assert dead_local_owner(ours) is False
    assert dead_local_owner(_with_pid(ours, 1)) is False


def test_an_owner_of_another_host_is_never_dead_here() -> None:
    host = mint_owner().split(":")[0].split("/")[1]
    assert dead_local_owner(f"elsewhere/{host}:{_dead_pid()}:abc") is False
    assert dead_local_owner(f"elsewhere:{_dead_pid()}:abc") is False


@pytest.mark.parametrize("owner", [None, "", "nohost", "h:notapid:t", "h/1:x:y", ":::"])
def test_malformed_owners_are_not_dead(owner: str | None) -> None:
    assert dead_local_owner(owner) is False


def test_an_owner_written_before_the_namespace_was_named_reads_by_host_name() -> None:
    assert dead_local_owner(f"{socket.gethostname()}:{_dead_pid()}:abc") is True


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_replica_in_another_pid_namespace_with_our_host_name_keeps_its_lease() -> None:
    """The attack: two replicas share a host name but not a PID namespace. Replica B's pid
    means nothing here; read as ours, its live lease would look dead and be taken over
    (two processes deciding for one conversation)."""
    minted = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
         "from anfitrion._owners import mint_owner; print(mint_owner())"],
        capture_output=True, text=True, timeout=60)
    if minted.returncode != 0:
        pytest.skip(f"no new PID namespace here: {minted.stderr.strip()[:200]}")
    theirs = minted.stdout.strip()
    assert theirs.split(":")[0] != mint_owner().split(":")[0]
    assert theirs.split(":")[0].split("/")[0] == socket.gethostname()
    # their pid, whatever it is, is not alive in our namespace: still not ours to free
    assert dead_local_owner(_with_pid(theirs, _dead_pid())) is False


def _digits(base: int) -> Callable[[int], str]:
    """*pid* in another script's decimal digits (``int()`` reads them all)."""
    return lambda pid: "".join(chr(base + int(d)) for d in str(pid))


# A store row is hostile input: its writer picks the owner. Each of these holds a pid that is
# not alive here, or one os.kill cannot take, with this host and namespace around it.
CRAFTED: dict[str, Callable[[str, int], Any]] = {
    "huge pid": lambda host, pid: f"{host}:{'9' * 40}:tok",
    "pid past a C long": lambda host, pid: f"{host}:{2 ** 63}:tok",
    "pid past a C int": lambda host, pid: f"{host}:{2 ** 31}:tok",
    "pid past pid_max": lambda host, pid: f"{host}:{(1 << 22) + 1}:tok",
    "negative pid (a process group)": lambda host, pid: f"{host}:-{pid}:tok",
    "pid zero": lambda host, pid: f"{host}:0:tok",
    "plus sign": lambda host, pid: f"{host}:+{pid}:tok",
    "spaces": lambda host, pid: f"{host}: {pid} :tok",
    "underscores": lambda host, pid: f"{host}:{str(pid)[0]}_{str(pid)[1:]}:tok",
    "leading zeros": lambda host, pid: f"{host}:000{pid}:tok",
    "arabic-indic digits": lambda host, pid: f"{host}:{_digits(0x660)(pid)}:tok",
    "fullwidth digits": lambda host, pid: f"{host}:{_digits(0xFF10)(pid)}:tok",
    "no token": lambda host, pid: f"{host}:{pid}:",
    "no pid": lambda host, pid: f"{host}::tok",
    "wrong host": lambda host, pid: f"x{host}:{pid}:tok",
    "our host, another namespace": lambda host, pid: f"{host}0:{pid}:tok",
    "extra field": lambda host, pid: f"{host}:{pid}:tok:more",
    "bytes": lambda host, pid: f"{host}:{pid}:tok".encode(),
    "an int": lambda host, pid: pid,
}


@pytest.mark.parametrize("craft", CRAFTED.values(), ids=CRAFTED.keys())
def test_a_crafted_owner_is_never_dead_and_never_raises(craft: Callable[[str, int], Any]
                                                        ) -> None:
    """Read as dead, a live session's lease would be freed for a second process to run it;
    raising, it would stop ``resume --ready`` for every other session."""
    host = mint_owner().split(":")[0]
    assert dead_local_owner(craft(host, _dead_pid())) is False


@pytest.mark.anyio
async def test_reaping_skips_crafted_owners_and_still_frees_a_dead_one(tmp_path: Path) -> None:
    """An attacker who can write session rows cannot stop the reaper nor make it free a
    lease: it reaps the one session whose process really died here, and leaves the rest."""
    path = tmp_path / "store.db"
    store = open_store(f"sqlite:///{path}")
    host, dead = mint_owner().split(":")[0], _dead_pid()
    crafted = {f"s{i}": craft(host, dead) for i, craft in enumerate(CRAFTED.values())}
    until = time.time() + 3600
    try:
        for session_id in [*crafted, "died"]:
            await store.save_session(SessionState(session_id, "alice", "running", {}))
        with sqlite3.connect(path) as conn:  # behind the store's back
            conn.executemany(
                "UPDATE anfitrion_sessions SET lease_owner = ?, lease_expires = ? "
                "WHERE session_id = ?",
                [*((owner, until, sid) for sid, owner in crafted.items()),
                 (f"{host}:{dead}:tok", until, "died")])
        assert await reap_dead_leases(store) == ["died"]
        with sqlite3.connect(path) as conn:
            leases = dict(conn.execute("SELECT session_id, lease_expires FROM anfitrion_sessions"))
        assert leases == {**dict.fromkeys(crafted, until), "died": 0.0}
    finally:
        await store.close()
