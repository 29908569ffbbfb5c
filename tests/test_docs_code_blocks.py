"""Every ```python block of README.md and docs/ (its subfolders too) runs as written, offline.

Each block runs alone in a fresh interpreter, in an empty temporary folder that holds a copy of
``examples/anfitrion.toml`` as ``anfitrion.toml`` (the project file the docs talk about), with
its own ``$ANFITRION_HOME``, placeholder API keys (building a client sends nothing) and no
network beyond loopback. A block that cannot run so — it serves until stopped, or needs a real
model — is marked in the doc, on the line right before it::

    <!-- not run: serves the inbox until stopped -->

Marked blocks are still compiled; the skips are reported with their reasons, and kept few.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MOST_SKIPPED = 9
OPTIONAL = ("anthropic", "openai", "mcp", "psycopg", "starlette", "uvicorn", "opentelemetry",
            "httpx", "llama_cpp")

# a fence, indented or not, and the comment on the line before it
_BLOCK = re.compile(r"(?:^[ \t]*<!--\s*not run:\s*(?P<why>.*?)\s*-->[ \t]*\n)?"
                    r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```",
                    re.M | re.S)

# the subprocess's own network guard: anything but loopback fails, as in tests/conftest.py
_GUARD = '''
import ipaddress as _ip, socket as _socket
_connect = _socket.socket.connect
def _guarded(self, address):
    if self.family in (_socket.AF_INET, _socket.AF_INET6):
        host = address[0]
        if host not in ("localhost", "") and not _ip.ip_address(host).is_loopback:
            raise RuntimeError(f"a docs block tried to reach the network: {address!r}")
    return _connect(self, address)
_socket.socket.connect = _guarded
del _ip, _socket, _guarded
'''


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    code: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            indent = match.group("indent")
            code = "".join(line[len(indent):] if line.startswith(indent) else line
                           for line in match.group("code").splitlines(keepends=True))
            line = text.count("\n", 0, match.start("indent")) + 1
            found.append(Block(doc, line, code, match.group("why")))
    return found


BLOCKS = _blocks()


def test_the_docs_have_python_blocks_and_few_are_skipped() -> None:
    skipped = [f"{b.name} ({b.not_run})" for b in BLOCKS if b.not_run]
    assert len(BLOCKS) >= 10
    assert len(skipped) <= MOST_SKIPPED, "too many docs blocks not run:\n" + "\n".join(skipped)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_a_docs_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    compile(block.code, block.name, "exec")  # even a block that is not run must be Python
    if block.not_run:
        pytest.skip(f"{block.name} is marked in the doc: not run: {block.not_run}")
    shutil.copy(ROOT / "examples" / "anfitrion.toml", tmp_path / "anfitrion.toml")
    env = {**os.environ, "ANFITRION_HOME": str(tmp_path / "home"),
           "ANTHROPIC_API_KEY": "placeholder-key", "OPENAI_API_KEY": "placeholder-key"}
    env.pop("ANFITRION_STORE", None)
    done = subprocess.run([sys.executable, "-c", _GUARD + block.code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    missing = re.search(r"No module named '([\w.]+)'|pip install 'anfitrion\[(\w+)\]'",
                        done.stderr)
    if done.returncode != 0 and missing and (missing.group(1) or "").split(".")[0] in (
            *OPTIONAL, ""):
        pytest.skip(f"{block.name} needs an extra that is not installed: {missing.group(0)}")
    assert done.returncode == 0, f"{block.name} failed:\n{done.stderr}"
