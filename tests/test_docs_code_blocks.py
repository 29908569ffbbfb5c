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

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from anfitrion.exceptions import MissingDependencyError

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MOST_SKIPPED = 9
OPTIONAL = ("anthropic", "openai", "mcp", "psycopg", "starlette", "uvicorn", "opentelemetry",
            "httpx", "llama_cpp", "langchain", "langchain_core", "langgraph", "agents",
            "pydantic_ai", "claude_agent_sdk", "cryptography", "jwt")

# a fence, indented or not, and the comment on the line before it
_BLOCK = re.compile(r"(?:^[ \t]*<!--\s*not run:\s*(?P<why>.*?)\s*-->[ \t]*\n)?"
                    r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```",
                    re.M | re.S)

# the subprocess's own network guard: anything but loopback fails, as in tests/conftest.py
_GUARD = '''
import ipaddress as _ip, socket as _socket
_connect = _socket.socket.connect
def _guarded(self, address, _ip=_ip, _socket=_socket, _connect=_connect):
    if self.family in (_socket.AF_INET, _socket.AF_INET6):
        host = address[0]
        if host not in ("localhost", "") and not _ip.ip_address(host).is_loopback:
            raise RuntimeError(f"a docs block tried to reach the network: {address!r}")
    return _connect(self, address)
_socket.socket.connect = _guarded
del _ip, _socket, _guarded, _connect
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


def _anfitrion_imports(code: str) -> list[tuple[str, str | None]]:
    """(module, name) for every import of anfitrion in *code* (name None for ``import m``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found.extend((a.name, None) for a in node.names if a.name.split(".")[0] == "anfitrion")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "anfitrion":
            found.extend((node.module or "", a.name) for a in node.names)
    return found


def private_imports(code: str) -> list[str]:
    """The imports in *code* of a private module or name of anfitrion, or of a name its public
    module does not list in ``__all__``."""
    bad = []
    for module, name in _anfitrion_imports(code):
        dotted = module if name is None else f"{module}.{name}"
        if any(p.startswith("_") and not p.startswith("__") for p in dotted.split(".")):
            bad.append(dotted)
            continue
        if name is None:
            continue
        try:
            imported = importlib.import_module(module)
        except (ImportError, MissingDependencyError):  # an extra that is not installed: the
            continue                                     # name check needs the module
        if name not in getattr(imported, "__all__", ()) and not (
                importlib.util.find_spec(dotted) if hasattr(imported, "__path__") else None):
            bad.append(f"{dotted} (not in {module}.__all__)")
    return bad


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_a_docs_block_imports_only_public_names(block: Block) -> None:
    """Users copy the docs: a block shows only the public surface (issue #29)."""
    assert private_imports(block.code) == []


def test_a_private_import_in_a_block_is_found() -> None:
    code = ("from anfitrion import Host\nfrom anfitrion.store._rows import skipped_rows\n"
            "import anfitrion._gate\nfrom anfitrion.models import _strict\n"
            "from anfitrion.policy import rule_id_of, _core\n"
            "from anfitrion.policy import Policy\nfrom anfitrion.store import open_store\n"
            "from anfitrion import _answers\nfrom anfitrion.exceptions import map_exceptions\n"
            "from anfitrion.channels import WebhookChannelThatDoesNotExist\n")
    assert private_imports(code) == [
        "anfitrion.store._rows.skipped_rows", "anfitrion._gate", "anfitrion.models._strict",
        "anfitrion.policy._core", "anfitrion._answers",
        "anfitrion.channels.WebhookChannelThatDoesNotExist (not in anfitrion.channels.__all__)"]
