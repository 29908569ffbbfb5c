"""The replica tests' children (gateways, haproxy) never outlive the process that started
them: killed with SIGKILL (no Python code runs: the kernel's parent-death signal), stopped
with Ctrl-C, or ending with children left running (``atexit``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent

PARENT = f"""
import signal, sys, time
# Ctrl-C as a terminal delivers it: a process started in the background of a shell (CI) may
# inherit SIGINT ignored, and Python then installs no KeyboardInterrupt handler
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {str(HERE)!r})
import _processes
from pathlib import Path
child = _processes.spawn(["sleep", "120"], log=Path(sys.argv[1]))
print(child.pid, flush=True)
if sys.argv[2] == "exit":
    sys.exit(0)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return not _alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize(("how", "signal_sent"), [("killed", signal.SIGKILL),
                                                  ("ctrl-c", signal.SIGINT),
                                                  ("exit", None)])
def test_a_guarded_child_ends_with_its_parent(tmp_path: Path, how: str,
                                              signal_sent: signal.Signals | None) -> None:
    with subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "child.log"), how],
                          stdout=subprocess.PIPE) as parent:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        try:
            if signal_sent is not None:
                assert _alive(child)
                parent.send_signal(signal_sent)
            parent.wait(10)
            assert _gone_within(child, 3), f"{how}: the child {child} outlived its parent"
        finally:
            if _alive(child):  # only if the guard failed: do not leave it behind either
                subprocess.run(["kill", "-9", str(child)], check=False)
            if parent.poll() is None:  # nor the parent (the with-block would wait for it)
                parent.kill()
