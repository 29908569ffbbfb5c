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


def test_every_name_the_security_map_gives_exists() -> None:
    """`policy.X` names the public policy package, `_provenance.X` the provenance index."""
    import anfitrion.policy
    from anfitrion import _provenance

    named = re.findall(r"`(policy|_provenance)\.(\w+)", DOC)
    assert len(named) >= 5
    for module, name in named:
        assert hasattr({"policy": anfitrion.policy, "_provenance": _provenance}[module], name), name
