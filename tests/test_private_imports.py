"""No module reaches into another package's private parts (issue #29).

Private by default, httpx-style: a module or package whose name starts with ``_`` belongs to the
package that holds it, and only that package (and its subpackages) may import it; a ``_name``
inside a module belongs to the module's own package (its directory). Everyone else imports from
a public package (``anfitrion.store``, ``anfitrion.mcp``, …), which re-exports what others need.
The check reads every ``import`` in ``src/anfitrion`` with :mod:`ast`, including those under
``if TYPE_CHECKING:`` and inside functions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).parents[1] / "src"


KNOWN: dict[str, str] = {
    # the CLI drives parts that are not (yet) public API of their package
    "anfitrion._cli.approvals imports anfitrion.mcp._approval_queue": "the queue server command",
    "anfitrion._cli.auth imports anfitrion.mcp._oauth": "new_key, TOKENS (the token table)",
    "anfitrion._cli.auth imports anfitrion.mcp._oauth_login": "the loopback login and revoke",
    "anfitrion._cli.auth imports anfitrion.mcp._toolset": "McpToolset (lazy in anfitrion.mcp)",
    "anfitrion._cli.mcp imports anfitrion.mcp._resolve": "what runs, for review and mcp lock",
    "anfitrion._cli.mcp imports anfitrion.mcp._sandbox": "the profile in words, for review",
    "anfitrion._cli.policy imports anfitrion.policy._lint": "lint_rules for policy validate",
    "anfitrion._home imports anfitrion.store._sqlite": "whether a SQLite store file exists",
    "anfitrion.mcp._gateway_auth imports anfitrion.toolkits._http_fetch": (
        "address_is_public, the one public-address check"),
    "anfitrion._cli.audit imports anfitrion.store._rows": "skipped_rows for a corrupt row",
    "anfitrion._cli.db imports anfitrion.store._sqlite": "the SQLite migrations command",
    "anfitrion._cli.gateway imports anfitrion.mcp._gateway": "Gateway (lazy in anfitrion.mcp)",
    "anfitrion._cli.gateway imports anfitrion.mcp._queue_guard": "refuse_approval_queue_in",
    "anfitrion._cli.gateway imports anfitrion.mcp._toolset": "McpServers (lazy in anfitrion.mcp)",
    "anfitrion._cli.mcp imports anfitrion.mcp._pinning": "identity and text checks of review",
    "anfitrion._cli.mcp imports anfitrion.mcp._toolset": "McpServers (lazy in anfitrion.mcp)",
    "anfitrion._cli.mcp imports anfitrion.policy._lint": "the tool lint",
    "anfitrion._cli.policy imports anfitrion.policy._declarations": "check_declarations",
    "anfitrion._cli.policy imports anfitrion.policy._cedar_export": "policy export --cedar",
    "anfitrion._cli.policy imports anfitrion.policy._cedar": "cedar-schema, validate and "
                                                           "export --cedar (the cedar extra)",
    "anfitrion._cli.tools imports anfitrion.policy._lint": "the tool lint",
    "anfitrion._demo imports anfitrion.models._demo_script": "the demo's scripted model",
    "anfitrion._gate imports anfitrion.store._base": "PRE_CLAIM, the ledger's first state",
    "anfitrion._host imports anfitrion.models._registry": "as_model",
    "anfitrion._runtime imports anfitrion.channels._webhooks": "webhook_listeners",
    "anfitrion.testing imports anfitrion.models._scripted": "call and reply",
    "anfitrion.web._api imports anfitrion.channels._webhooks": "CallbackVerifier",
    "anfitrion.web._app imports anfitrion.channels._webhooks": "CallbackVerifier",
    "anfitrion.web._render imports anfitrion.policy._taint": "TAINT_WARNING",
    "anfitrion.web._oidc imports anfitrion.mcp._gateway_auth": (
        "the gateway's bounded Fetcher, JwksCache and claim readers, for the inbox's ID tokens"),
}
"""Reaches into another package accepted today (issue #29 step 1 left them): each is a name the
importing layer needs and the owning package does not export yet. The test fails on any other
and on a listed one that is gone (remove it then)."""


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def _modules(root: Path, top: str) -> tuple[dict[str, Path], set[str]]:
    files: dict[str, Path] = {}
    packages: set[str] = set()
    for path in sorted((root / top).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
            packages.add(".".join(parts))
        files[".".join(parts)] = path
    return files, packages


def _targets(node: ast.Import | ast.ImportFrom, here: str) -> list[tuple[str, str | None]]:
    """(module, name imported from it or None) for one import statement in package *here*."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    base = node.module or ""
    if node.level:
        package = here
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    return [(base, None), *((base, alias.name) for alias in node.names)]


def _private_module_owner(dotted: str) -> str | None:
    """The package owning the first private part of *dotted*, or None when all are public."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if _is_private(part):
            return ".".join(parts[:i])
    return None


def reaches_in(root: Path, top: str) -> list[str]:
    """Every import in package *top* of a private module or name it does not own."""
    files, packages = _modules(root, top)
    found: list[str] = []
    for module, path in files.items():
        here = module if module in packages else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for base, name in _targets(node, here):
                if not _within(base, top):
                    continue
                where = f"{module}:{node.lineno} imports"
                if name is None or f"{base}.{name}" in files:
                    dotted = base if name is None else f"{base}.{name}"
                    owner = _private_module_owner(dotted)
                    if owner is not None and not _within(module, owner):
                        found.append(f"{where} {dotted}")
                elif _is_private(name):
                    owner = base if base in packages else base.rpartition(".")[0]
                    if here != owner:
                        found.append(f"{where} {base}.{name}")
    return sorted(set(found))


def test_no_module_imports_another_packages_private_module_or_name() -> None:
    found = {re.sub(r":\d+ ", " ", line) for line in reaches_in(SRC, "anfitrion")}
    assert sorted(found - set(KNOWN)) == []
    assert sorted(set(KNOWN) - found) == [], "listed reaches that are gone: remove them"


def _package(tmp_path: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return reaches_in(tmp_path, "pkg")


def test_a_package_may_use_its_own_private_modules_and_names(tmp_path: Path) -> None:
    assert _package(tmp_path, {
        "__init__.py": "from ._core import Thing\n",
        "_core.py": "class Thing: ...\n_helper = 1\n",
        "_user.py": "from ._core import _helper\nfrom . import _core\n",
        "store/__init__.py": "from ._base import Store\n",
        "store/_base.py": "from .._core import Thing\n",
        "store/memory.py": "from ._base import Store\n",
    }) == []


def test_reaching_into_another_package_is_found(tmp_path: Path) -> None:
    found = _package(tmp_path, {
        "__init__.py": "",
        "_core.py": "_helper = 1\n",
        "store/__init__.py": "",
        "store/_base.py": "_SECRET = 1\n",
        "store/_rows.py": "",
        "cli.py": ("from .store._base import Store\n"
                   "import pkg.store._rows\n"
                   "from .store import _rows\n"
                   "def f():\n    from ._core import _helper\n"),
        "mcp/__init__.py": ("from typing import TYPE_CHECKING\n"
                            "if TYPE_CHECKING:\n    from ..store._base import _SECRET\n"),
    })
    assert found == [
        "pkg.cli:1 imports pkg.store._base",
        "pkg.cli:2 imports pkg.store._rows",
        "pkg.cli:3 imports pkg.store._rows",
        "pkg.mcp:3 imports pkg.store._base",
        "pkg.mcp:3 imports pkg.store._base._SECRET",
    ]
