"""The first hour (#36): what a new user trips over, each through the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

# Makes the web extra (and anfitrion.web) unimportable, as on `pip install anfitrion`.
WITHOUT_WEB = """
import sys
from importlib.abc import MetaPathFinder
BLOCKED = ("starlette", "uvicorn", "jinja2", "multipart", "python_multipart", "anfitrion.web")
class Block(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(BLOCKED):
            raise ImportError(f"{name} is not installed")
        return None
sys.meta_path.insert(0, Block())
from anfitrion.cli.main import main
main()
"""
ANFITRION = [sys.executable, "-c", "from anfitrion.cli.main import main; main()"]


def anfitrion(*args: str, web: bool = True, check: bool = True
              ) -> subprocess.CompletedProcess[str]:
    command = ANFITRION if web else [sys.executable, "-c", WITHOUT_WEB]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env=os.environ.copy())
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_approvals_json_needs_no_web_extra(tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'a.db'}"]
    demo = anfitrion("demo", "--defer", *store)
    found = re.search(r"anfitrion approvals approve ([0-9a-f]{32})", demo.stdout)
    assert found is not None
    listed = anfitrion("approvals", "list", "--json", *store, web=False)
    assert "Traceback" not in listed.stderr
    [entry] = json.loads(listed.stdout)["approvals"]
    assert entry["request"]["id"] == found.group(1)
    assert entry["state"] == "pending"
    shown = anfitrion("approvals", "show", found.group(1), "--json", *store, web=False)
    assert json.loads(shown.stdout)["request"]["id"] == found.group(1)
    # and the block is real: the inbox cannot start without the extra
    served = anfitrion("serve", *store, web=False, check=False)
    assert served.returncode != 0
