"""The public surface is a decision: __all__ is sorted, complete, and imports nothing optional."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import anfitrion
from anfitrion.exceptions import MissingDependencyError


def test_all_is_sorted_and_exported() -> None:
    names = [n for n in anfitrion.__all__ if n != "__version__"]
    assert names == sorted(names)
    for name in anfitrion.__all__:
        assert hasattr(anfitrion, name), name


def test_public_names_are_all_listed() -> None:
    public = {n for n in vars(anfitrion) if not n.startswith("_") and n != "annotations"}
    modules = {n for n in public if type(getattr(anfitrion, n)).__name__ == "module"}
    assert public - modules == set(anfitrion.__all__) - {"__version__"}


def test_importing_anfitrion_imports_no_optional_dependency() -> None:
    code = ("import sys, anfitrion, anfitrion.testing, anfitrion._cli.main;"
            "bad = [m for m in ('anthropic', 'openai', 'mcp', 'psycopg', 'starlette', "
            "'uvicorn', 'opentelemetry', 'llama_cpp') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_what_host_resume_raises_can_be_caught_from_the_package() -> None:
    """Host.resume raises SessionNotFound and ConflictError: callers catch them by name."""
    from anfitrion import ConflictError, SessionNotFound, StoreError
    from anfitrion.exceptions import ConflictError as Conflict
    from anfitrion.exceptions import SessionNotFound as NotFound

    assert (SessionNotFound, ConflictError) == (NotFound, Conflict)
    assert issubclass(ConflictError, StoreError)


def test_the_store_rule_of_the_commands_is_public() -> None:
    from anfitrion import default_store_url

    assert default_store_url().startswith("sqlite:///")


def test_the_streaming_wrapper_is_public_where_the_docs_import_it() -> None:
    """docs/providers.md imports StreamingModel from anfitrion.models, not a private module."""
    from pathlib import Path

    import anfitrion.models

    assert "StreamingModel" in anfitrion.models.__all__
    docs = (Path(__file__).parents[1] / "docs" / "providers.md").read_text(encoding="utf-8")
    assert "from anfitrion.models import StreamingModel" in docs
    assert "from anfitrion.models._" not in docs


PUBLIC = [
    "anfitrion",
    "anfitrion.channels",
    "anfitrion.exceptions",
    "anfitrion.integrations",
    "anfitrion.integrations.claude_agent_sdk",
    "anfitrion.integrations.langchain",
    "anfitrion.integrations.langgraph",
    "anfitrion.integrations.openai_agents",
    "anfitrion.integrations.pydantic_ai",
    "anfitrion.localmodel",
    "anfitrion.mcp",
    "anfitrion.models",
    "anfitrion.models.anthropic",
    "anfitrion.models.openai_chat",
    "anfitrion.models.openai_responses",
    "anfitrion.policy",
    "anfitrion.store",
    "anfitrion.telemetry",
    "anfitrion.testing",
    "anfitrion.toolkits",
    "anfitrion.web",
]
"""The public surface (issue #29): every other module is private (a ``_`` in its path)."""

_SRC = Path(__file__).parents[1] / "src"


def _public_modules_in_the_source() -> list[str]:
    found = []
    for path in (_SRC / "anfitrion").rglob("*.py"):
        parts = list(path.relative_to(_SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] == "__main__" or any(p.startswith("_") for p in parts):
            continue
        found.append(".".join(parts))
    return sorted(found)


def test_the_public_modules_are_the_listed_few() -> None:
    assert _public_modules_in_the_source() == PUBLIC
    assert len(PUBLIC) <= 25


def _isort(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def _import_or_skip(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except MissingDependencyError as exc:
        pytest.skip(f"{name} needs the extra {exc.extra!r}, not installed")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "anfitrion":
            raise
        pytest.skip(f"{name} needs {exc.name}, not installed")


@pytest.mark.parametrize("name", PUBLIC)
def test_a_public_module_lists_its_sorted_importable_public_names(name: str) -> None:
    module = _import_or_skip(name)
    exported = module.__all__
    names = [n for n in exported if n != "__version__"]
    assert names == sorted(names, key=_isort), f"{name}.__all__ is not sorted"
    assert len(set(exported)) == len(exported)
    assert not [n for n in names if n.startswith("_")], f"{name} exports private names"
    for attribute in exported:
        try:
            getattr(module, attribute)
        except ModuleNotFoundError as exc:  # a lazy name of the mcp package without its SDK
            pytest.skip(f"{name}.{attribute} needs {exc.name}, not installed")

