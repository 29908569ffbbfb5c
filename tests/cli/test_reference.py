"""docs/cli.md is generated from the commands' help and must be current."""

from __future__ import annotations

from pathlib import Path

from anfitrion._cli._reference import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_cli_reference_in_docs_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/cli.md is stale: run  python -m anfitrion._cli._reference > docs/cli.md")
