"""The haproxy configuration for gateway replicas: docs/scaling.md shows what the one writer
writes (the tests and the relay benchmark use it), and haproxy accepts it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from anfitrion.mcp._haproxy import haproxy_config

DOC = Path(__file__).parents[2] / "docs" / "scaling.md"


def test_the_documented_configuration_is_the_writers() -> None:
    written = haproxy_config("127.0.0.1:8800", ["127.0.0.1:8801", "127.0.0.1:8802"])
    assert f"```\n{written}```\n" in DOC.read_text()
    assert "option httpchk GET /readyz" in written  # a draining replica leaves the rotation
    assert "balance roundrobin" in written and "cookie" not in written  # no affinity


def test_haproxy_accepts_it(tmp_path: Path) -> None:
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(haproxy).exists():
        pytest.skip("haproxy is not installed (tests/parity/install_haproxy.sh)")
    path = tmp_path / "haproxy.cfg"
    path.write_text(haproxy_config("127.0.0.1:8800", ["127.0.0.1:8801"],
                                   stats_socket=str(tmp_path / "s.sock")))
    checked = subprocess.run([haproxy, "-c", "-f", str(path)], capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
