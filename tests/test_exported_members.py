"""The public surface is a decision: __all__ is sorted, complete, and imports nothing optional."""

from __future__ import annotations

import subprocess
import sys

import anfitrion


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
