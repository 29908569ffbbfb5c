"""No import cycle in the package, even through imports inside functions or for type checkers.

The graph is built with :mod:`ast` over ``src/anfitrion``: every ``import`` and ``from … import``
anywhere in a module (at the top, in a function, in a method, under ``if TYPE_CHECKING:``) is an
edge — two modules that name each other's types cannot be read apart either. Importing
``a.b.c`` runs the ``__init__`` of ``a.b`` first, so that package is an edge too (the root
``anfitrion``, the facade that imports its submodules, excepted; and a package its importer is
already inside of).

A cycle accepted for a while would be listed in ``KNOWN_CYCLES`` with its reason; the test
fails on any other cycle and on a listed cycle that is gone (so the list is kept honest).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src"

KNOWN_CYCLES: dict[frozenset[str], str] = {}
"""Cycles accepted today, each with its reason: none (issue #21 broke the last run-time two,
issue #29 the last two through ``if TYPE_CHECKING:``)."""

def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _statements(node: ast.AST, types: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement below *node* that can run (not under ``if TYPE_CHECKING:``); with
    *types*, those for type checkers too."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child) and not types:
            for other in child.orelse:
                yield from _statements_of(other, types)
            continue
        yield from _statements_of(child, types)


def _statements_of(node: ast.AST, types: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    yield from _statements(node, types)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def import_graph(root: Path, top: str, *, types: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of package *top* (under *root*) that importing it runs; with
    *types*, also those it imports only for type checkers (``if TYPE_CHECKING:``)."""
    files = {_module_name(p, root): p for p in sorted((root / top).rglob("*.py"))}
    packages = {_module_name(p, root) for p in (root / top).rglob("__init__.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name if name in packages else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _statements(ast.parse(path.read_text(encoding="utf-8")), types):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:
                package = here
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{node.module}" if node.module else package
            submodules = {f"{base}.{a.name}" for a in node.names} & set(files)
            targets.update(submodules)
            if len(submodules) < len(node.names) or not _within(name, base):
                targets.add(base)
        edges: set[str] = set()
        for target in targets:
            parts = target.split(".")
            runs_first = {".".join(parts[:i]) for i in range(2, len(parts))}
            edges.update(p for p in runs_first if not _within(name, p))
            edges.add(target)
        edges &= set(files) - {name}
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def a_cycle_through(component: frozenset[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle inside *component*, for the failure message."""
    start = min(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(graph[node] & component):
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if succ not in came_from:
                came_from[succ] = node
                queue.append(succ)
    raise AssertionError(f"no cycle in {sorted(component)}")  # pragma: no cover


def test_the_package_has_no_import_cycle_but_the_listed_ones() -> None:
    """Type-level imports count: a cycle there is two modules that cannot be read apart."""
    graph = import_graph(SRC, "anfitrion", types=True)
    cycles = set(import_cycles(graph))
    new = [" -> ".join(a_cycle_through(c, graph)) for c in cycles - set(KNOWN_CYCLES)]
    assert not new, f"new import cycles: {new}"
    gone = [sorted(c) for c in set(KNOWN_CYCLES) - cycles]
    assert not gone, f"listed cycles that no longer exist (remove them from KNOWN_CYCLES): {gone}"


def _package(tmp_path: Path, files: dict[str, str], *,
             types: bool = False) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return import_graph(tmp_path, "pkg", types=types)


def test_an_import_inside_a_function_closes_a_cycle(tmp_path: Path) -> None:
    graph = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from .b import thing\n",
        "b.py": "def thing():\n    from . import a\n    return a\n",
    })
    assert import_cycles(graph) == [frozenset({"pkg.a", "pkg.b"})]
    assert a_cycle_through(frozenset({"pkg.a", "pkg.b"}), graph) == ["pkg.a", "pkg.b", "pkg.a"]


def test_importing_a_submodule_runs_its_package_and_that_can_close_a_cycle(
        tmp_path: Path) -> None:
    graph = _package(tmp_path, {
        "__init__.py": "",
        "audit.py": "from .store._base import Record\n",
        "store/__init__.py": "from .memory import MemoryStore\n",
        "store/_base.py": "class Record: ...\n",
        "store/memory.py": "class MemoryStore:\n    def h(self):\n        from ..audit import h\n",
    })
    assert import_cycles(graph) == [frozenset({"pkg.audit", "pkg.store", "pkg.store.memory"})]


@pytest.mark.parametrize("guarded", [
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
    "import typing\nif typing.TYPE_CHECKING:\n    from . import a\n",
])
def test_an_import_only_for_type_checkers_is_an_edge_of_the_type_level_graph_only(
        tmp_path: Path, guarded: str) -> None:
    files = {"__init__.py": "", "a.py": "from .b import B\n", "b.py": f"{guarded}class B: ...\n"}
    graph = _package(tmp_path, files)
    assert graph["pkg.b"] == set()
    assert import_cycles(graph) == []
    typed = _package(tmp_path, files, types=True)
    assert typed["pkg.b"] == {"pkg.a"}
    assert import_cycles(typed) == [frozenset({"pkg.a", "pkg.b"})]


def test_a_package_importing_its_own_submodules_is_no_cycle(tmp_path: Path) -> None:
    graph = _package(tmp_path, {
        "__init__.py": "from .models import Model\n",
        "models/__init__.py": "from ._base import Model\nfrom . import _names\n",
        "models/_base.py": "from ._names import n\nfrom .. import helpers\nclass Model: ...\n",
        "models/_names.py": "n = 1\n",
        "helpers.py": "",
    })
    assert import_cycles(graph) == []
