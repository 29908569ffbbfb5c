"""No function in the package is longer than 80 lines (issue #21, part 5).

A function is measured with :mod:`ast` from its ``def`` line to its last line, docstring, comments
and nested functions included (a nested function is measured too, on its own). A long function
hides its structure: the routes of an app as closures, the tools of a toolkit in one factory.

The functions listed below are being shrunk by other work on issue #21; the test fails on any
other function over the limit and on a listed one that is no longer over it (so the list is kept
honest: remove an entry when its function is short).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

MAX_LINES = 80
PACKAGE = Path(__file__).parents[1] / "src" / "anfitrion"

KNOWN_LONG: dict[str, str] = {}
"""Functions allowed over the limit, each with its reason: none (issue #21 shortened the last)."""


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """``(qualified name, lines)`` of every function in *tree*, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            yield name, (node.end_lineno or node.lineno) - node.lineno + 1
            yield from functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def long_functions(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """``path:qualified name`` -> lines, of every function under *root* over *limit* lines."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        for name, lines in functions(ast.parse(path.read_text(encoding="utf-8"))):
            if lines > limit:
                found[f"{where}:{name}"] = lines
    return found


def test_no_function_is_longer_than_80_lines_but_the_listed_ones() -> None:
    found = long_functions(PACKAGE)
    new = {name: lines for name, lines in found.items() if name not in KNOWN_LONG}
    assert not new, f"functions over {MAX_LINES} lines (split them): {new}"
    gone = sorted(set(KNOWN_LONG) - set(found))
    assert not gone, f"listed functions no longer over {MAX_LINES} lines (remove them from " \
                     f"KNOWN_LONG): {gone}"


def test_methods_and_nested_functions_are_measured_by_their_qualified_names(
        tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        f"class Box:\n    def method(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
        f"\n\ndef outer():\n    def inner():\n    {body.replace(chr(10), chr(10) + '    ')}\n"
        f"    return inner\n\n\ndef short():\n    return 1\n", encoding="utf-8")
    assert long_functions(tmp_path) == {"pkg/mod.py:Box.method": MAX_LINES + 1,
                                        "pkg/mod.py:outer": MAX_LINES + 3,
                                        "pkg/mod.py:outer.inner": MAX_LINES + 1}
