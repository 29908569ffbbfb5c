"""The first hour (#36), item 13's leftovers, through the CLI as a subprocess: ``audit show
--session`` takes the id as the listing shows it, and ``resume --policy`` does what its help
says under ``--app``."""

from __future__ import annotations

import re
from pathlib import Path

from .test_first_hour import anfitrion


def test_audit_show_session_takes_the_id_as_the_listing_shows_it(tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'a.db'}"]
    anfitrion("demo", *store)
    anfitrion("demo", *store)
    lines = anfitrion("audit", "show", *store).stdout.splitlines()
    shown = list(dict.fromkeys(line.split()[3] for line in lines))
    assert len(shown) == 2 and all(len(s) == 12 for s in shown)  # two sessions, cut to 12
    first = anfitrion("audit", "show", "--session", shown[0], *store).stdout.splitlines()
    assert first and first == [ln for ln in lines if ln.split()[3] == shown[0]]
    full = anfitrion("sessions", "list", "--json", *store).stdout
    full_id = next(s for s in re.findall(r'"session_id": "([0-9a-f]{32})"', full)
                   if s.startswith(shown[0]))
    assert anfitrion("audit", "show", "--session", full_id, *store).stdout.splitlines() == first
    tail = anfitrion("audit", "show", "--session", shown[1][:6], "--tail", "1", *store)
    assert tail.stdout.splitlines() == [ln for ln in lines if ln.split()[3] == shown[1]][-1:]
    for wrong, says in (("0" * 32, "no audit record of session '" + "0" * 32 + "'"),
                        (shown[0][:3], "a shortened id needs at least 6 characters")):
        refused = anfitrion("audit", "show", "--session", wrong, *store, check=False)
        assert refused.returncode == 1, refused.stdout
        assert says in refused.stderr and "Traceback" not in refused.stderr
        assert refused.stdout == ""  # never an empty listing that reads as "nothing happened"


def test_resume_policy_help_and_behaviour_agree_under_app(tmp_path: Path) -> None:
    helped = " ".join(anfitrion("resume", "--help").stdout.split())
    assert "Policy file (TOML) for a demo session (app anfitrion:demo)" in helped
    assert "Any other app's session — named by --app or recorded with the session — resumes " \
        "under its Host's own policy, and --policy is refused." in helped
    store = ["--store", f"sqlite:///{tmp_path / 'demo.db'}"]
    deferred = anfitrion("demo", "--defer", *store).stdout
    request = re.search(r"anfitrion approvals approve ([0-9a-f]{32})", deferred)
    session = re.search(r"anfitrion resume ([0-9a-f]{32})", deferred)
    assert request is not None and session is not None, deferred
    anfitrion("approvals", "approve", request.group(1), "--as", "ann", *store)
    policy = tmp_path / "policy.toml"
    policy.write_text('[defaults]\nread = "allow"\nwrite = "ask"\n', encoding="utf-8")
    # under --app anfitrion:demo, --policy is taken, as the help says
    resumed = anfitrion("resume", session.group(1), "--app", "anfitrion:demo", "--policy",
                        str(policy), *store, check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "--policy is for demo sessions" not in resumed.stderr
