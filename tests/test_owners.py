"""Lease owners: a pid that is not alive here frees a lease only if the owner ran here — this
host *and* this PID namespace (replicas in containers that share a host name)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest

from anfitrion._owners import dead_local_owner, mint_owner


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
