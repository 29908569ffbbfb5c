"""``except Exception`` only where it belongs, each saying why (issue #29).

A handler that catches everything (``except Exception``, ``except BaseException``, a bare
``except:``, or a tuple naming one of them) that does not end in a bare ``raise`` (clean up,
then re-raise as it is) is allowed at a top level — a background task's or
a thread's top, a connection's top —, around operator or application code the host calls (rules,
handlers, listeners, hooks, anchors: they fail closed or are logged), or where it is re-raised.
Everywhere else it hides bugs: catch what is expected.

Each such handler carries its reason as ``BLE001 - <reason>`` (``# noqa: BLE001 - <reason>``
where ruff flags it; ruff accepts one that logs or re-raises, and a bare ``noqa`` there would be
an unused one) on its ``except`` line or on the comment lines right above it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "src" / "anfitrion"
BROAD = {"Exception", "BaseException"}
REASON = re.compile(r"#.*\bBLE001 - \S.{9,}")


def _is_broad(handler: ast.ExceptHandler) -> bool:
    """Whether *handler* catches everything and does not simply clean up and re-raise (a body
    ending in a bare ``raise`` hides nothing)."""
    last = handler.body[-1]
    if isinstance(last, ast.Raise) and last.exc is None:
        return False
    kind = handler.type
    if kind is None:
        return True
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any((isinstance(n, ast.Name) and n.id in BROAD)
               or (isinstance(n, ast.Attribute) and n.attr in BROAD) for n in names)


def _has_reason(lines: list[str], lineno: int) -> bool:
    """The ``except`` line (1-based *lineno*) or the comment lines right above it say why."""
    if REASON.search(lines[lineno - 1]):
        return True
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        if REASON.search(lines[i]):
            return True
        i -= 1
    return False


def unexplained(source: str, name: str = "<source>") -> list[str]:
    """``name:line`` of every broad handler in *source* without its reason."""
    lines = source.splitlines()
    return [f"{name}:{node.lineno}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ExceptHandler) and _is_broad(node)
            and not _has_reason(lines, node.lineno)]


def test_every_broad_except_in_the_package_says_why_it_is_broad() -> None:
    found = [where for path in sorted(PACKAGE.rglob("*.py"))
             for where in unexplained(path.read_text(encoding="utf-8"),
                                      str(path.relative_to(PACKAGE)))]
    assert found == [], ("catch what you expect, or say why this handler is a top level, "
                         "around operator/application code, or re-raised "
                         "('# noqa: BLE001 - <reason>' or '# BLE001 - <reason>'): "
                         f"{found}")


def test_the_check_finds_each_form_of_a_broad_handler_without_a_reason() -> None:
    source = (
        "try:\n    f()\nexcept Exception:\n    pass\n"
        "try:\n    f()\nexcept:\n    pass\n"
        "try:\n    f()\nexcept (ValueError, BaseException):\n    pass\n"
        "try:\n    f()\nexcept builtins.Exception as exc:  # some words, no marker\n    pass\n"
        "try:\n    f()\nexcept Exception:  # noqa: BLE001\n    pass\n"  # no reason
        # a reason, but not adjacent to its except
        "try:\n    f()\n# BLE001 - a reason, but not adjacent\n\nexcept Exception:\n    pass\n"
    )
    assert unexplained(source) == ["<source>:3", "<source>:7", "<source>:11", "<source>:15",
                                   "<source>:19", "<source>:25"]


def test_a_reason_on_the_line_or_right_above_and_narrow_handlers_pass() -> None:
    source = (
        "try:\n    f()\nexcept Exception:  # noqa: BLE001 - the thread's top level\n    pass\n"
        "try:\n    f()\n# BLE001 - a rule is operator code:\n# it fails closed\n"
        "except Exception:\n    pass\n"
        "try:\n    f()\nexcept (ValueError, KeyError):\n    pass\n"
        "try:\n    f()\nexcept BaseException:\n    undo()\n    raise\n"
    )
    assert unexplained(source) == []
