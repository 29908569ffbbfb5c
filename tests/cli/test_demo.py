"""`anfitrion demo` runs offline and prints every proposal, decision and result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "models" / "fixtures" / "wire_examples.json"


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "anfitrion._cli.main", "demo", *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env,
                          timeout=60, check=False)


def test_demo_prints_the_documented_lisboa_lines() -> None:
    out = run_demo()
    assert out.returncode == 0, out.stderr
    expected = json.loads(FIXTURES.read_text())["offline_demo_expected_output"]
    lines = out.stdout.splitlines()
    for line in expected:
        assert line in lines


def test_demo_shows_every_branch_with_the_hosts_reasons() -> None:
    out = run_demo().stdout
    assert "model proposes get_weather({\"location\": \"Lisboa, PT\"})" in out
    assert "host decided: allow — read tools are allowed by default [default.read]" in out
    assert "host returned an error (unknown_tool): unknown tool 'delete_file'" in out
    assert "host refused: units: 'kelvin' is not one of ['celsius', 'fahrenheit']" in out
    assert "host ran get_weather({'location': 'Porto, PT', 'units': 'celsius'})" in out
    assert "host decided: ask" in out
    # not a TTY: the write is denied with the reason, nothing is asked
    assert "a person must approve this call" in out
    assert "Approve this exact call?" not in out


def test_demo_asks_on_the_terminal_and_runs_the_write_after_yes() -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    out = subprocess.run([sys.executable, "-m", "anfitrion._cli.main", "demo", "--approve"],
                         input="y\n", capture_output=True, text=True, env=env, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert "Approve this exact call? [y/N]" in out.stdout
    assert "text = Lisboa 15 °C, partly cloudy." in out.stdout  # the exact arguments shown
    assert "person approved (terminal)" in out.stdout
    assert "final: Saved the note to drafts/weather.md." in out.stdout


def test_demo_terminal_approval_defaults_to_no() -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    out = subprocess.run([sys.executable, "-m", "anfitrion._cli.main", "demo", "--approve"],
                         input="\n", capture_output=True, text=True, env=env, timeout=60,
                         check=False)
    assert "person declined (terminal: declined at the terminal)" in out.stdout
