"""docs/policy.md stays true: its console example is the command's real output."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from anfitrion._cli.main import cli

ROOT = Path(__file__).parents[2]


def test_the_console_example_in_the_policy_docs_is_real_output(
        monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "policy.md").read_text()
    block = re.search(r"```console\n\$ (.*?)\n(?=[^ ])(.*?)```", text, re.S)
    assert block is not None
    args = shlex.split(block.group(1).replace("\\\n", " "))
    assert args[:3] == ["anfitrion", "policy", "check"]
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, args[1:])
    assert result.exit_code == 0, result.output
    assert result.output == block.group(2)
