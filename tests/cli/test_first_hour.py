"""The first hour (#36): what a new user trips over, each through the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

# Makes the web extra (and anfitrion.web) unimportable, as on `pip install anfitrion`.
WITHOUT_WEB = """
import sys
from importlib.abc import MetaPathFinder
BLOCKED = ("starlette", "uvicorn", "jinja2", "multipart", "python_multipart", "anfitrion.web")
class Block(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(BLOCKED):
            raise ImportError(f"{name} is not installed")
        return None
sys.meta_path.insert(0, Block())
from anfitrion._cli.main import main
main()
"""
ANFITRION = [sys.executable, "-c", "from anfitrion._cli.main import main; main()"]


def anfitrion(*args: str, web: bool = True, check: bool = True
              ) -> subprocess.CompletedProcess[str]:
    command = ANFITRION if web else [sys.executable, "-c", WITHOUT_WEB]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env=os.environ.copy())
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_approvals_json_needs_no_web_extra(tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'a.db'}"]
    demo = anfitrion("demo", "--defer", *store)
    found = re.search(r"anfitrion approvals approve ([0-9a-f]{32})", demo.stdout)
    assert found is not None
    listed = anfitrion("approvals", "list", "--json", *store, web=False)
    assert "Traceback" not in listed.stderr
    [entry] = json.loads(listed.stdout)["approvals"]
    assert entry["request"]["id"] == found.group(1)
    assert entry["state"] == "pending"
    shown = anfitrion("approvals", "show", found.group(1), "--json", *store, web=False)
    assert json.loads(shown.stdout)["request"]["id"] == found.group(1)
    # and the block is real: the inbox cannot start without the extra
    served = anfitrion("serve", *store, web=False, check=False)
    assert served.returncode != 0


# -- read-only commands never create a store ------------------------------------------------

READERS = [("audit", "verify"), ("audit", "show"), ("approvals", "list"),
           ("approvals", "list", "--json"), ("approvals", "show", "0123456789ab"),
           ("db", "status"), ("effects", "list"), ("resume", "0123456789ab"),
           ("approvals", "approve", "0123456789ab"), ("serve", "--port", "1"),
           ("sessions", "list"), ("sessions", "show", "0123456789ab"), ("auth", "status")]


def test_read_only_commands_refuse_a_missing_store_and_create_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "new folder" / "typo.db"
    for args in READERS:
        done = anfitrion(*args, "--store", f"sqlite:///{missing}", check=False)
        assert done.returncode != 0, args
        assert f"no store at {missing}" in done.stderr, (args, done.stderr)
        assert "anfitrion db migrate --store" in done.stderr
        assert "Traceback" not in done.stderr
        assert not missing.parent.exists(), args  # not even the folder
    created = anfitrion("db", "migrate", "--store", f"sqlite:///{missing}")
    assert "migration(s) applied" in created.stdout
    verified = anfitrion("audit", "verify", "--store", f"sqlite:///{missing}")
    assert "audit chain intact: 0 records" in verified.stdout


def test_the_default_store_missing_is_refused_with_the_plain_hint(tmp_path: Path) -> None:
    env_home = os.environ["ANFITRION_HOME"]
    done = anfitrion("audit", "verify", check=False)
    assert done.returncode != 0
    assert f"no store at {Path(env_home) / 'anfitrion.db'}" in done.stderr
    assert "`anfitrion db migrate`" in done.stderr  # the default store needs no --store
    assert not Path(env_home).exists()


# -- one store rule: the MCP config's gateway.store ------------------------------------------

def test_commands_given_the_mcp_config_use_its_gateway_store(tmp_path: Path) -> None:
    folder = tmp_path / "gw"
    folder.mkdir()
    config = folder / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {}, "gateway": {"store": "sqlite:///gw.db"}}))
    store = f"sqlite:///{folder / 'gw.db'}"  # relative to the config's folder
    demo = anfitrion("demo", "--defer", "--store", store)
    found = re.search(r"anfitrion approvals approve ([0-9a-f]{32}) --store", demo.stdout)
    assert found is not None, demo.stdout  # the hint names the store it needs
    listed = anfitrion("approvals", "list", "--json", "--config", str(config))
    assert [a["request"]["id"] for a in json.loads(listed.stdout)["approvals"]] == \
        [found.group(1)]
    assert "audit chain intact" in anfitrion("audit", "verify", "--config", str(config)).stdout
    approved = anfitrion("approvals", "approve", found.group(1), "--as", "ann",
                         "--config", str(config))
    assert "anfitrion resume" in approved.stdout
    assert f"--store {store}" in approved.stdout
    # without it, the default store (which does not exist) is refused, not created
    assert anfitrion("approvals", "list", check=False).returncode != 0


def test_the_store_rule_exists_once() -> None:
    """#29: one function answers the store rule; nothing else reads $ANFITRION_STORE."""
    source = Path(__file__).parents[2] / "src" / "anfitrion"
    readers = [p.relative_to(source).as_posix() for p in source.rglob("*.py")
               if re.search(r"environ(ment\(\))?(\.get)?\W+[\"']ANFITRION_STORE",
                            p.read_text("utf-8"))]
    assert readers == ["_home.py"]
    definers = [p.relative_to(source).as_posix() for p in source.rglob("*.py")
                if re.search(r"^def (store_choice|store_url_for)\b", p.read_text("utf-8"), re.M)]
    assert definers == ["_home.py"]


# -- a policy can deny one argument value ---------------------------------------------------

NO_CEO = """
[[rules]]
id = "no-ceo"
tool = "send_email"
arguments.to.none_of = ["ceo@example.com"]
arguments.subject.not_matches = "(?i).*wire transfer.*"

[[rules]]
id = "mail-ok"
tool = "send_email"
verdict = "allow"
"""


def check(policy: Path, arguments: dict[str, object]) -> dict[str, object]:
    done = anfitrion("policy", "check", "--policy", str(policy), "--tool", "send_email",
                     "--principal", "ann", "--args", json.dumps(arguments), "--json")
    decision: dict[str, object] = json.loads(done.stdout)["decision"]
    return decision


def test_none_of_and_not_matches_deny_one_value_with_a_reason_that_reads_right(
        tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(NO_CEO)
    for to in ("ceo@example.com", " CEO@Example.com", "ｃｅｏ@example.com"):  # variants too
        denied = check(policy, {"to": to, "subject": "hello"})
        assert denied["verdict"] == "deny", to
        assert "argument 'to' is one of the refused values ('ceo@example.com')" in \
            str(denied["reason"])
    for subject in ("About the WIRE TRANSFER", "ｗｉｒｅ transfer now"):
        denied = check(policy, {"to": "bob@example.com", "subject": subject})
        assert denied["verdict"] == "deny", subject
        assert "matches the refused pattern" in str(denied["reason"])
    allowed = check(policy, {"to": "bob@example.com", "subject": "lunch"})
    assert allowed["verdict"] == "allow"
    validated = anfitrion("policy", "validate", str(policy))
    assert "warning" not in validated.stdout


def test_validate_warns_of_a_rule_that_denies_every_call(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rules]]\nid = "backwards"\ntool = "send_email"\nverdict = "deny"\n'
                      'arguments.to.one_of = ["ceo@example.com"]\n\n'
                      '[[rules]]\nid = "nothing"\ntool = "pay"\n'
                      'arguments.to.one_of = ["a", "B"]\narguments.to.none_of = ["A", "b"]\n')
    done = anfitrion("policy", "validate", str(policy))
    assert "warning: rule backwards denies every call of its tools" in done.stdout
    assert "warning: rule nothing argument 'to': none_of refuses every value" in done.stdout
    as_json = json.loads(anfitrion("policy", "validate", str(policy), "--json").stdout)
    assert [w["rule"] for w in as_json["warnings"]] == ["backwards", "nothing"]


def test_the_demo_ends_pointing_at_an_approval_and_the_inbox(tmp_path: Path) -> None:
    plain = anfitrion("demo").stdout.splitlines()
    assert plain[-3:] == ["next:", "  see a person approve a write:  anfitrion demo --defer",
                          "  answer approvals in the browser:  anfitrion serve"]
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    deferred = anfitrion("demo", "--defer", "--store", store).stdout.splitlines()
    assert deferred[-1] == f"  answer approvals in the browser:  anfitrion serve --store {store}"
    assert "anfitrion demo --defer" not in "\n".join(deferred)


WRONG_APPS = '''
def factory(config):
    return None


def returns_text(store):
    return "not a host"


value = 3
'''


def test_resume_with_a_factory_of_the_wrong_shape_says_so_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from anfitrion._approvals import DeferredApprover
    from anfitrion._demo import demo_toolbox
    from anfitrion._home import default_store_url
    from anfitrion._host import Host
    from anfitrion.models._demo_script import demo_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "wrongapps.py").write_text(WRONG_APPS)
    host = Host(model=demo_model(), tools=demo_toolbox(), store=default_store_url(),
                approver=DeferredApprover(), app="wrongapps:factory")
    run = host.run_sync("Save a note for the team: Lisboa 15 °C.", principal="ann")
    anfitrion("approvals", "approve", run.pending[0].id, "--as", "ann")
    done = anfitrion("resume", run.session_id, "--app", "wrongapps:factory", check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "'wrongapps:factory' must be a Host or a function (store) -> Host; calling it " \
        "with store=… failed" in done.stderr
    refused = anfitrion("resume", run.session_id, "--app", "wrongapps:factory",
                        "--policy", "x.toml", check=False)
    assert "--policy is for demo sessions" in refused.stderr


def test_make_test_fast_is_a_documented_subset_and_make_test_stays_whole() -> None:
    root = Path(__file__).parents[2]
    # run as on its own, even under `make test` (a sub-make prints "Entering directory")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    fast = subprocess.run(["make", "--no-print-directory", "-n", "test-fast"], cwd=root,
                          capture_output=True, text=True, timeout=60, check=True,
                          env=env).stdout
    assert '-m "not browser and not mcp_servers and not postgres and not local_model"' in fast
    full = subprocess.run(["make", "--no-print-directory", "-n", "test"], cwd=root,
                          capture_output=True, text=True, timeout=60, check=True,
                          env=env).stdout
    # whole: no marker or keyword selection; the files the parallel run leaves out are exactly
    # the ones the single-process run before it takes (inline-snapshot needs one process)
    first, rest = [line for line in full.splitlines() if " -m pytest" in line]
    assert " -m " not in rest.split(" -m pytest", 1)[1] and " -k " not in rest
    single = first.split("-p no:xdist", 1)[1].split()
    assert single and all(f.startswith("tests/") for f in single)
    assert sorted(a.removeprefix("--ignore=") for a in rest.split() if a.startswith("--ignore=")) \
        == sorted(single)
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert "`make test-fast`" in readme
    assert "[approvals](docs/approvals.md)" in readme
    assert "[integrations](docs/integrations/)" in readme


def test_plain_approvals_list_keeps_expired_requests_apart(tmp_path: Path) -> None:
    import anyio

    from anfitrion._approvals import with_expiry
    from anfitrion._canonical import canonical_json
    from anfitrion.store import open_store
    from anfitrion.store._sqlite import SQLiteStore

    store_url = f"sqlite:///{tmp_path / 'x.db'}"
    store = ["--store", store_url]
    first = re.search(r"approvals approve ([0-9a-f]{32})",
                      anfitrion("demo", "--defer", *store).stdout)
    second = re.search(r"approvals approve ([0-9a-f]{32})",
                       anfitrion("demo", "--defer", *store).stdout)
    assert first is not None and second is not None

    async def expire(request_id: str) -> None:
        opened = open_store(store_url)
        assert isinstance(opened, SQLiteStore)
        try:
            found = await opened.get_approval(request_id)
            assert found is not None
            old = with_expiry(found.request, datetime.now(UTC) - timedelta(hours=1))
            await opened._write(lambda c: c.execute(
                "UPDATE anfitrion_approvals SET request = ? WHERE id = ?",
                (canonical_json(old.to_dict()), request_id)))
        finally:
            await opened.close()

    anyio.run(expire, first.group(1))
    listed = anfitrion("approvals", "list", *store).stdout
    assert second.group(1) in listed
    assert first.group(1) not in listed
    assert "1 expired request(s) not listed: they can no longer be answered" in listed
    everything = anfitrion("approvals", "list", "--all", *store).stdout
    assert f"{first.group(1)}  expired" in everything


# -- a person's "no" is not the policy's (item 8) -------------------------------------------

def test_a_persons_no_reaches_the_model_as_theirs_not_the_policys(tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'a.db'}"]
    demo = anfitrion("demo", "--defer", *store)
    request = re.search(r"approvals approve ([0-9a-f]{32})", demo.stdout)
    session = re.search(r"anfitrion resume ([0-9a-f]{32})", demo.stdout)
    assert request is not None and session is not None
    denied = anfitrion("approvals", "deny", request.group(1), "--note", "not today", "--as",
                       "ops-ana", *store)
    assert "declined " + request.group(1) in denied.stdout
    assert "the model will be told: declined by a person: not today" in denied.stdout
    shown = anfitrion("approvals", "show", request.group(1), *store)
    assert "Answer: declined by ops-ana" in shown.stdout
    resumed = anfitrion("resume", session.group(1), *store)
    assert "person declined (ops-ana: not today)" in resumed.stdout
    assert "final: I could not save the note: declined by a person: not today" in resumed.stdout
    assert "denied by policy" not in resumed.stdout
    records = json.loads(anfitrion("audit", "show", "--json", *store).stdout)
    previews = [r["data"]["result"]["preview"] for r in records
                if r["type"] == "result.returned" and r["session_id"] == session.group(1)]
    assert previews[-1] == "declined by a person: not today"
    # with nobody to ask, the refusal stays the host's, and says so
    alone = anfitrion("demo", *store)
    assert "no approver configured: denied" in alone.stdout
    assert "denied by policy: a person must approve this call" in alone.stdout
    assert "person declined" not in alone.stdout


# -- the approver's name is asked once and kept (item 13) -----------------------------------

def _on_a_terminal(args: list[str], typed: str) -> subprocess.CompletedProcess[str]:
    """``anfitrion ARGS`` with a terminal as its standard input, *typed* into it."""
    import pty

    main, side = pty.openpty()
    try:
        os.write(main, typed.encode())
        return subprocess.run([*ANFITRION, *args], stdin=side, capture_output=True, text=True,
                              timeout=120, env=os.environ.copy())
    finally:
        os.close(main)
        os.close(side)


def test_the_approvers_name_is_asked_once_on_a_terminal_and_kept(
        tmp_path: Path, anfitrion_home: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'a.db'}"]
    ids = []
    for _ in range(3):
        demo = anfitrion("demo", "--defer", *store)
        found = re.search(r"approvals approve ([0-9a-f]{32})", demo.stdout)
        assert found is not None
        ids.append(found.group(1))
    first = _on_a_terminal(["approvals", "approve", ids[0], *store], "Ana\x07 Lima\n")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Your name, recorded with every decision" in first.stdout
    assert f"approved {ids[0]} (write_draft) as Ana Lima" in first.stdout
    assert (anfitrion_home / "approver").read_text() == "Ana Lima\n"
    second = _on_a_terminal(["approvals", "deny", ids[1], *store], "Someone Else\n")
    assert "Your name" not in second.stdout  # asked once
    assert "as Ana Lima" in second.stdout
    # --as still answers as someone else, without changing the kept name
    third = anfitrion("approvals", "approve", ids[2], "--as", "bo", *store)
    assert "as bo" in third.stdout
    answers = {a["request"]["id"]: a["answer"]["approver"] for a in json.loads(
        anfitrion("approvals", "list", "--all", "--json", *store).stdout)["approvals"]}
    assert answers == {ids[0]: "Ana Lima", ids[1]: "Ana Lima", ids[2]: "bo"}


def test_without_a_terminal_nothing_is_asked_and_the_login_name_is_used(
        tmp_path: Path, anfitrion_home: Path) -> None:
    import getpass

    store = ["--store", f"sqlite:///{tmp_path / 'a.db'}"]
    demo = anfitrion("demo", "--defer", *store)
    found = re.search(r"approvals approve ([0-9a-f]{32})", demo.stdout)
    assert found is not None
    done = anfitrion("approvals", "approve", found.group(1), *store)
    assert f"as {getpass.getuser()}" in done.stdout
    assert not (anfitrion_home / "approver").exists()


# -- audit show reads as lines a person can follow (item 13) --------------------------------

def test_audit_show_is_readable_and_filters_by_tool_and_tail(tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'a.db'}"]
    anfitrion("demo", *store)
    lines = anfitrion("audit", "show", *store).stdout.splitlines()
    assert len(lines) > 20
    assert all(len(line) < 260 for line in lines)
    assert not any("_sha256" in line for line in lines)  # digests are for --json
    decided = [ln for ln in lines if " call.decided " in ln and "send_email" in ln]
    assert decided and "ask: write tools need a person's approval by default " \
        "[default.write]" in decided[0]
    assert any("denied: no approver configured" in ln for ln in lines)
    assert any("error (denied): denied by policy: a person must approve" in ln for ln in lines)
    mail = anfitrion("audit", "show", "--tool", "send_email", *store).stdout.splitlines()
    assert mail and all(re.search(r" send_email( |$)", line) for line in mail)
    last = anfitrion("audit", "show", "--tail", "3", *store).stdout.splitlines()
    assert last == lines[-3:]
    both = anfitrion("audit", "show", "--tool", "send_email", "--tail", "1", *store)
    assert both.stdout.splitlines() == mail[-1:]
    every = json.loads(anfitrion("audit", "show", "--json", "--tail", "2", *store).stdout)
    assert [r["seq"] for r in every] == [int(line.split()[0]) for line in lines[-2:]]
    refused = anfitrion("audit", "show", "--tail", "-1", *store, check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr


# -- anfitrion sessions (item 13) ------------------------------------------------------------

def test_sessions_lists_filters_and_shows_what_waits_and_how_to_continue(
        tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'a.db'}"]
    anfitrion("demo", *store)
    deferred = anfitrion("demo", "--defer", "--principal", "ana", *store)
    request = re.search(r"approvals approve ([0-9a-f]{32})", deferred.stdout)
    session = re.search(r"anfitrion resume ([0-9a-f]{32})", deferred.stdout)
    assert request is not None and session is not None
    listed = anfitrion("sessions", "list", *store).stdout.splitlines()
    assert len(listed) == 2
    assert listed[0].startswith(session.group(1))  # newest first
    assert "suspended" in listed[0] and "1 approval(s) waiting" in listed[0]
    waiting = anfitrion("sessions", "list", "--state", "suspended", *store).stdout
    assert waiting.splitlines() == listed[:1]
    assert anfitrion("sessions", "list", "--principal", "demo-user", *store
                     ).stdout.splitlines() == listed[1:]
    as_json = json.loads(anfitrion("sessions", "list", "--json", *store).stdout)
    assert [s["waiting"] for s in as_json["sessions"]] == [[request.group(1)], []]
    shown = anfitrion("sessions", "show", session.group(1)[:10], *store).stdout
    assert "asked: Save a note for the team" in shown
    assert '  call write_draft {"path": "drafts/weather.md"' in shown
    assert f"anfitrion approvals show {request.group(1)} --store sqlite:///" in shown
    assert f"anfitrion resume {session.group(1)} --store sqlite:///" in shown
    full = json.loads(anfitrion("sessions", "show", session.group(1), "--json", *store).stdout)
    assert full["state"] == "suspended" and full["messages"]
    missing = anfitrion("sessions", "show", "ffff", *store, check=False)
    assert missing.returncode == 1 and "no session 'ffff'" in missing.stderr
    bad = anfitrion("sessions", "list", "--state", "asleep", *store, check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_the_environment_is_read_in_one_place() -> None:
    """#29: only ``_home.environment`` touches ``os.environ``; the rest asks it (or takes an
    ``environ`` mapping that defaults to it)."""
    source = Path(__file__).parents[2] / "src" / "anfitrion"
    readers = [p.relative_to(source).as_posix() for p in source.rglob("*.py")
               if re.search(r"\bos\.(environ|getenv)\b|\bgetenv\(", p.read_text("utf-8"))]
    assert readers == ["_home.py"]
