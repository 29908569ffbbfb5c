"""Edges a new user of the library meets in the first hour: model strings, ids, messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from anfitrion import Host, ScriptedModel, UserError
from anfitrion.testing import call


def test_a_host_accepts_a_model_string() -> None:
    host = Host(model="scripted:demo")
    assert host.model.name == "scripted-demo"


@pytest.mark.parametrize(("model", "says"), [
    (None, "not None"),
    (object(), "not an instance of object"),
    (ScriptedModel, "not the class ScriptedModel"),
])
def test_a_host_refuses_what_is_not_a_model_when_it_is_built(model: object, says: str) -> None:
    with pytest.raises(UserError, match="model must be a Model") as caught:
        Host(model=model)  # type: ignore[arg-type]
    assert says in str(caught.value)
    assert "'openai:gpt-4o'" in str(caught.value)


def test_a_bad_model_string_is_refused_when_the_host_is_built() -> None:
    with pytest.raises(UserError, match="must look like PROVIDER:MODEL"):
        Host(model="gpt-4o")


def test_scripted_call_ids_are_readable_and_differ_between_processes() -> None:
    here = call("get_weather", {"location": "Lisboa"}).id
    code = "from anfitrion.testing import call; print(call('get_weather').id)"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert here.startswith("call_")
    assert there.startswith("call_")
    assert here.rsplit("_", 1)[0] != there.rsplit("_", 1)[0]
    assert call("x", id="call_1").id == "call_1"


SCRIPT = '''
import sys
from anfitrion import Effect, Host, ScriptedModel, Toolbox
from anfitrion.testing import call
tools = Toolbox()
@tools.tool(effect=Effect.READ, provenance="trusted")
def look(text: str) -> str:
    """Look."""
    return "seen"
host = Host(model=ScriptedModel([call("look", {"text": "a"}), "done"]), tools=tools,
            store=sys.argv[1])
run = host.run_sync("look", principal="ana", session_id=sys.argv[2] if len(sys.argv) > 2
                    else None)
print(run.session_id, run.status.value, run.error)
'''


def test_a_scripted_session_continues_in_another_process(tmp_path: Path) -> None:
    """Each process builds the script again: its ids must not repeat the stored ones."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    first = subprocess.run([sys.executable, "-c", SCRIPT, store], capture_output=True,
                           text=True, check=True).stdout.split()
    assert first[1] == "completed"
    second = subprocess.run([sys.executable, "-c", SCRIPT, store, first[0]],
                            capture_output=True, text=True, check=True).stdout
    assert second.split()[1:] == ["completed", "None"], second


def test_a_failed_constraint_tells_the_model_what_was_wrong_not_the_rules_reason() -> None:
    from anfitrion import Effect, Policy, Toolbox
    from anfitrion._conversation import ToolResult, UserMessage
    from anfitrion.policy import ArgumentRule, OneOf, PathInside

    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE)
    def write_draft(path: str, tone: str) -> str:
        """Write a draft."""
        return "written"

    policy = Policy.default().with_rules(ArgumentRule(
        "write_draft", {"path": PathInside("drafts"), "tone": OneOf(["calm", "warm"])},
        "allow", reason="drafts are free"))
    model = ScriptedModel([call("write_draft", {"path": "../x", "tone": "calm"}),
                           call("write_draft", {"path": "drafts/x", "tone": "loud"}), "ok"])
    run = Host(model=model, tools=tools, policy=policy).run_sync("draft", principal="ana")
    results = [p.content for m in run.transcript if isinstance(m, UserMessage)
               for p in m.parts if isinstance(p, ToolResult)]
    assert results == [
        "denied by policy: argument 'path' is not inside drafts",
        "denied by policy: argument 'tone' is not one of the allowed values ('calm', 'warm')"]
