"""The README's quick start runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_quick_start_runs_and_prints_what_it_says(tmp_path: Path) -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    out = subprocess.run([sys.executable, "-c", code.group(1)], cwd=tmp_path, text=True,
                         capture_output=True, timeout=60, check=False,
                         env={**os.environ, "ANFITRION_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "completed 15 °C in Lisboa."
    assert (tmp_path / "anfitrion.db").exists()


def test_the_readme_links_only_to_files_in_the_repository() -> None:
    text = README.read_text()
    for target in re.findall(r"\]\(([^)#:]+)\)", text):
        assert (README.parent / target).exists(), target
    assert "DESIGN.md" not in text


def test_the_readme_sets_up_with_exactly_two_commands() -> None:
    setup = re.search(r"## Set up on a fresh machine\n\n```sh\n(.*?)```", README.read_text(), re.S)
    assert setup is not None
    assert [line.split("#")[0].strip() for line in setup.group(1).splitlines()] == \
        ["make demo", "make test"]
