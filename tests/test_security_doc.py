"""docs/security.md stays true: every test it cites exists, every module path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")


def test_every_test_the_security_map_cites_exists() -> None:
    cited = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", DOC)
    assert len(cited) >= 20
    missing = [f"{path}::{name}" for path, name in cited
               if not (ROOT / path).is_file()
               or not re.search(rf"def {name}\(", (ROOT / path).read_text(encoding="utf-8"))]
    assert missing == []


def test_every_taint_function_the_security_map_names_exists() -> None:
    from anfitrion import taint

    for name in set(re.findall(r"`taint\.(\w+)", DOC)):
        assert hasattr(taint, name), name
