"""``anfitrion effects reconcile``: a tool's reconcile hook, run from the CLI with the exact
arguments the store kept, settles an effect of unknown outcome (audited with who and why)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from anfitrion import DenyAllApprover, Policy
from anfitrion._conversation import ToolCall
from anfitrion._gate import Gate, _silent
from anfitrion.policy import Decision
from anfitrion.store import LedgerState, SessionState, Store, open_store
from anfitrion.testing import gate_session

SECRET = "sk-live-4fG7hJ2kL9mN3pQ8rS1tV6wXyZ"

TOOLS = '''
import json
from pathlib import Path

from anfitrion import Effect, Host, Tool, Toolbox
from anfitrion.models._scripted import ScriptedModel

SINK = Path({sink!r})
SCHEMA = {{"type": "object", "properties": {{"payment_id": {{"type": "string"}},
                                           "bank_token": {{"type": "string"}}}},
          "required": ["payment_id", "bank_token"]}}


def refund(arguments):
    with SINK.open("a") as f:  # the outside system: it happened ...
        f.write(json.dumps(arguments) + "\\n")
    raise RuntimeError("the bank hung up")  # ... and the reply was lost


def asked(arguments, context):
    """Ask the outside system. It refuses a call without the real (secret) token."""
    assert arguments["bank_token"] == {secret!r}, arguments
    if {undecided!r}:
        return None
    lines = SINK.read_text().splitlines() if SINK.exists() else []
    return any(json.loads(l)["payment_id"] == arguments["payment_id"] for l in lines)


def make_toolbox(hook=True):
    return Toolbox([Tool.from_schema("refund", SCHEMA, refund, effect=Effect.WRITE,
                                     effect_key="refund:{{payment_id}}",
                                     sensitive={{"bank_token"}},
                                     reconcile=asked if hook else None)])


toolbox = make_toolbox()
bare = make_toolbox(hook=False)


def app(store):
    return Host(model=ScriptedModel([]), tools=toolbox, store=store)
'''


def _tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
                  undecided: bool = False) -> str:
    name = f"reconcile_tools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(TOOLS.format(sink=str(tmp_path / "bank.jsonl"),
                                                      secret=SECRET, undecided=undecided))
    monkeypatch.chdir(tmp_path)  # the CLI imports from the current folder, as uvicorn does
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


async def _run_once(url: str, module: str, call_id: str, payment: str,
                    session_id: str = "s1", app: str | None = None) -> str:
    import importlib

    tools = importlib.import_module(module).toolbox
    store = open_store(url)
    try:
        if app is not None and await store.load_session(session_id) is None:
            await store.save_session(SessionState(session_id, "alice", "suspended",
                                                  {"app": app}))
        gate = Gate(policy=Policy([lambda c, ctx: Decision.allow("t", "allow")]),
                    approver=DenyAllApprover(), store=store, emit=_silent)
        arguments = json.dumps({"payment_id": payment, "bank_token": SECRET})
        outcome = await gate.process(ToolCall.from_raw(call_id, "refund", arguments),
                                     {"refund": tools.get("refund")},
                                     gate_session("alice", session_id, turn=1))
        assert outcome.result is not None
        return outcome.result.content
    finally:
        await store.close()


async def _with_store(url: str, work: Any) -> Any:
    store = open_store(url)
    try:
        return await work(store)
    finally:
        await store.close()


def _cli() -> Any:
    from anfitrion._cli.main import cli

    return cli


def test_reconcile_asks_the_hook_with_the_real_arguments_and_settles_the_effect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    module = _tools_module(tmp_path, monkeypatch)
    told = anyio.run(_run_once, url, module, "c1", "p1")
    assert "outcome unknown" in told.lower() or "unknown" in told
    runner = CliRunner()
    [effect] = json.loads(runner.invoke(_cli(), ["effects", "list", "--store", url,
                                                 "--json"]).output)["effects"]
    assert effect["state"] == "unknown"
    assert effect["arguments"]["bank_token"] == "[sensitive]"  # shown redacted, never whole
    shown = runner.invoke(_cli(), ["effects", "show", effect["key"], "--store", url])
    assert "[sensitive]" in shown.output and SECRET not in shown.output
    out = runner.invoke(_cli(), ["effects", "reconcile", effect["key"][:12], "--tools",
                                 f"{module}:toolbox", "--note", "after the outage",
                                 "--store", url])
    assert out.exit_code == 0, out.output
    assert "done" in out.output and "says it happened" in out.output
    entry = anyio.run(_with_store, url, lambda s: s.effect_state(effect["key"]))
    assert entry.state is LedgerState.DONE
    assert entry.resolved_by.startswith("reconcile:refund (run by cli:")
    records = anyio.run(_with_store, url, lambda s: s.audit_records())
    [resolved] = [r for r in records if r.type == "effect.resolved"]
    assert resolved.data["status"] == "resolved_done"
    assert "after the outage" in json.dumps(resolved.data)
    assert all(SECRET not in json.dumps(r.data) for r in records)
    # the model proposing it again is told it happened; nothing runs twice
    again = anyio.run(_run_once, url, module, "c2", "p1")
    assert "already happened" in again and "reconcile:refund" in again
    assert len((tmp_path / "bank.jsonl").read_text().splitlines()) == 1


def test_reconcile_all_settles_each_effect_with_the_apps_tools(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook says one refund happened and one did not (its sink line removed)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    module = _tools_module(tmp_path, monkeypatch)
    anyio.run(_run_once, url, module, "c1", "p1", "s1", f"{module}:app")
    anyio.run(_run_once, url, module, "c2", "p2", "s2", f"{module}:app")
    sink = tmp_path / "bank.jsonl"
    sink.write_text(sink.read_text().splitlines()[0] + "\n")  # p2 never reached the bank
    out = CliRunner().invoke(_cli(), ["effects", "reconcile", "--all", "--tools",
                                      f"{module}:app", "--store", url, "--json"])
    assert out.exit_code == 0, out.output
    outcomes = {json.loads(r["display"].split(":", 1)[1]): r["outcome"]
                for r in json.loads(out.output)["reconciled"]}
    assert outcomes == {"p1": "done", "p2": "failed"}
    # a failed effect did not happen: proposing it again runs it
    anyio.run(_run_once, url, module, "c3", "p2", "s2", f"{module}:app")
    assert len(sink.read_text().splitlines()) == 2


@pytest.mark.parametrize("recorded", [
    "{evil}:app",                  # a module of the attacker's, beside the operator's code
    "{evil}",                      # no attribute: the import alone would run it
    "{evil}:app.__call__",         # a dotted attribute
    " anfitrion:demo",             # look-alikes of the one app a row may name
    "anfitrion:demo ",
    "anfitrion:dem\u043e",
    "ANFITRION:DEMO",
])
def test_a_store_row_never_chooses_the_code_reconcile_imports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: str) -> None:
    """The attacker can write the store (a shared database, a session row) but not the
    operator's command line. Whatever app a session row names, ``effects reconcile`` without
    ``--tools`` imports nothing it names: it refuses, naming the ``--tools`` to pass, and the
    effect stays unsettled. Only the demo, spelled exactly, is loaded on a row's word."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    module = _tools_module(tmp_path, monkeypatch)
    evil = f"evil_{uuid.uuid4().hex[:8]}"
    ran = tmp_path / "imported"
    (tmp_path / f"{evil}.py").write_text(
        f"from pathlib import Path\nPath({str(ran)!r}).write_text('ran')\n"
        f"from {module} import app\n")
    app = recorded.format(evil=evil)
    anyio.run(_run_once, url, module, "c1", "p1", "s1", app)
    runner = CliRunner()
    [effect] = json.loads(runner.invoke(_cli(), ["effects", "list", "--store", url,
                                                 "--json"]).output)["effects"]
    one = runner.invoke(_cli(), ["effects", "reconcile", effect["key"], "--store", url])
    assert one.exit_code != 0
    assert "--tools" in one.output and "never imported" in one.output, one.output
    every = runner.invoke(_cli(), ["effects", "reconcile", "--all", "--store", url, "--json"])
    assert every.exit_code == 0, every.output
    [skipped] = json.loads(every.output)["reconciled"]
    assert skipped["outcome"] == "no_tool" and "never imported" in skipped["detail"]
    assert not ran.exists()
    entry = anyio.run(_with_store, url, lambda s: s.effect_state(effect["key"]))
    assert entry.state is LedgerState.UNKNOWN and entry.resolved_by is None
    # the operator names the code: then it is theirs to run
    if app.startswith(evil + ":app"):
        named = runner.invoke(_cli(), ["effects", "reconcile", effect["key"], "--tools",
                                       f"{evil}:app", "--store", url])
        assert named.exit_code == 0, named.output
        assert ran.exists()


def test_an_effect_the_hook_cannot_settle_stays_for_a_person(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    module = _tools_module(tmp_path, monkeypatch, undecided=True)
    anyio.run(_run_once, url, module, "c1", "p1")
    runner = CliRunner()
    [effect] = json.loads(runner.invoke(_cli(), ["effects", "list", "--store", url,
                                                 "--json"]).output)["effects"]
    undecided = runner.invoke(_cli(), ["effects", "reconcile", effect["key"], "--tools",
                                       f"{module}:toolbox", "--store", url])
    assert undecided.exit_code != 0 and "could not tell" in undecided.output
    no_hook = runner.invoke(_cli(), ["effects", "reconcile", effect["key"], "--tools",
                                     f"{module}:bare", "--store", url])
    assert no_hook.exit_code != 0 and "declares no reconcile hook" in no_hook.output
    no_app = runner.invoke(_cli(), ["effects", "reconcile", effect["key"], "--store", url])
    assert no_app.exit_code != 0 and "records no app" in no_app.output
    wrong = runner.invoke(_cli(), ["effects", "reconcile", effect["key"], "--tools",
                                   "os:path", "--store", url])
    assert wrong.exit_code != 0 and "not a Host, a Toolbox" in wrong.output
    assert runner.invoke(_cli(), ["effects", "reconcile", "--store", url]).exit_code == 2
    entry = anyio.run(_with_store, url, lambda s: s.effect_state(effect["key"]))
    assert entry.state is LedgerState.UNKNOWN and entry.resolved_by is None


def test_reconcile_leaves_a_claim_whose_run_may_still_be_acting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim held under a live lease belongs to its run, and one no session speaks for may
    be running: the hook is not asked until the run is known to be over."""
    import dataclasses
    import time

    from anfitrion._effects import effect_key

    url = f"sqlite:///{tmp_path / 'store.db'}"
    module = _tools_module(tmp_path, monkeypatch)

    async def running(store: Store) -> str:
        await store.save_session(SessionState("s1", "alice", "running", {},
                                              lease_owner="h:1:x",
                                              lease_expires=time.time() + 3600))
        key = effect_key(tool="refund", arguments={"payment_id": "p1", "bank_token": SECRET},
                         principal_id="alice", session_id="s1", template="refund:{payment_id}")
        await store.claim_execution("s1", "c1", "d", effect=key)
        return key.key

    key = anyio.run(_with_store, url, running)
    out = CliRunner().invoke(_cli(), ["effects", "reconcile", key, "--tools",
                                      f"{module}:toolbox", "--store", url])
    assert out.exit_code != 0 and "is being run by h:1:x" in out.output
    entry = anyio.run(_with_store, url, lambda s: s.effect_state(key))
    assert entry.state is LedgerState.CLAIMED

    async def unrecorded(store: Store) -> str:  # a claim no session record speaks for
        key = effect_key(tool="refund", arguments={"payment_id": "p9", "bank_token": SECRET},
                         principal_id="alice", session_id="s9", template="refund:{payment_id}")
        await store.claim_execution("s9", "c9", "d", effect=key)
        return key.key

    other = anyio.run(_with_store, url, unrecorded)
    out = CliRunner().invoke(_cli(), ["effects", "reconcile", other, "--tools",
                                      f"{module}:toolbox", "--store", url])
    assert out.exit_code != 0 and "whether the run holding it is over" in out.output

    async def lapse(store: Store) -> None:  # the run died: its lease lapsed
        state = await store.load_session("s1")
        assert state is not None
        await store.save_session(dataclasses.replace(state, lease_expires=time.time() - 1,
                                                     messages=(), saved_messages=0))

    anyio.run(_with_store, url, lapse)
    out = CliRunner().invoke(_cli(), ["effects", "reconcile", key, "--tools",
                                      f"{module}:toolbox", "--store", url])
    assert out.exit_code == 0, out.output
    assert "failed" in out.output  # the hook asked the sink: nothing was sent
