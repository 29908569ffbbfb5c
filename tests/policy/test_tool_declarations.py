"""``[tools."<name>"]`` in the policy file: the effect and effect identity of a tool the operator
does not own, applied where the gate resolves the tool; bad keys name the file and line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from anfitrion import ConfigError, DenyAllApprover, Effect, Tool, ToolError
from anfitrion._conversation import ToolCall
from anfitrion._effects import EffectScope, effect_key
from anfitrion._gate import Gate, _silent
from anfitrion.policy import parse_policy
from anfitrion.policy._declarations import ToolDeclaration, check_declarations
from anfitrion.store import LedgerState, MemoryStore
from anfitrion.testing import gate_session

SCHEMA = {"type": "object", "properties": {"payment_id": {"type": "string"},
                                           "note": {"type": "string"}},
          "required": ["payment_id"]}

POLICY = '''
[defaults]
write = "allow"

[tools."pay__refund"]
effect = "write"
effect_key = "refund:{payment_id}"
effect_scope = "global"

[tools."pay__lookup"]
effect = "read"
'''


def _server_tool(name: str, ran: list[Any], *, fail: bool = False, **options: Any) -> Tool:
    """A tool as an MCP server hands it over: it says nothing of its effect identity."""
    def handler(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        if fail:
            raise ToolError("the server went away")
        return "ok"
    return Tool.from_schema(name, SCHEMA, handler, **options)


async def _propose(gate: Gate, tool: Tool, call_id: str, arguments: dict[str, Any],
                   session: str = "s1", principal: str = "alice") -> Any:
    outcome = await gate.process(ToolCall.from_raw(call_id, tool.name, json.dumps(arguments)),
                                 {tool.name: tool}, gate_session(principal, session, turn=1))
    assert outcome.result is not None
    return outcome.result


def _error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_policy(text, path="anfitrion.toml")
    return info.value


def test_the_tools_table_declares_effect_key_scope_and_idempotence() -> None:
    policy = parse_policy(POLICY + '\n[tools."pay__ping"]\nidempotent = true\n')
    assert policy.declarations["pay__refund"] == ToolDeclaration(
        "pay__refund", Effect.WRITE, "refund:{payment_id}", EffectScope.GLOBAL)
    assert policy.declarations["pay__lookup"].effect is Effect.READ
    assert policy.declarations["pay__ping"].idempotent is True
    assert policy.declarations["pay__ping"].effect is None  # undeclared: the tool's own stands
    declared = policy.declared(_server_tool("pay__refund", [], effect=Effect.READ))
    assert (declared.effect, declared.effect_key, declared.effect_scope) == \
        (Effect.WRITE, "refund:{payment_id}", "global")
    plain = _server_tool("other", [])
    assert policy.declared(plain) is plain


@pytest.mark.parametrize(("text", "key", "line", "says"), [
    ('[tools."t"]\neffect = "delete"\n', "tools.t.effect", 2, "'read' or 'write'"),
    ('[tools."t"]\neffect = 1\n', "tools.t.effect", 2, "'read' or 'write'"),
    ('[tools."t"]\n\neffect_scope = "world"\n', "tools.t.effect_scope", 3, "'session'"),
    ('[tools."t"]\nidempotent = "yes"\n', "tools.t.idempotent", 2, "true or false"),
    ('[tools."t"]\neffect_key = "refund"\n', "tools.t.effect_key", 2, "names no argument"),
    ('[tools."t"]\neffect_key = "r:{id!r}"\n', "tools.t.effect_key", 2, "plain {argument}"),
    ('[tools."t"]\neffect_key = "r:{a.b}"\n', "tools.t.effect_key", 2, "plain {argument}"),
    ('[tools."t"]\neffect_key = "r:{0}"\n', "tools.t.effect_key", 2, "plain {argument}"),
    ('[tools."t"]\neffect_key = "r:{id"\n', "tools.t.effect_key", 2, "'}'"),
    ('[tools."t"]\neffect_key = "r:{x:>10}"\n', "tools.t.effect_key", 2, "plain {argument}"),
    ('[tools."t"]\ncolor = "x"\n', "tools.t.color", 2, "unknown key"),
    ('[tools."t"]\nsinks = ["x"]\n', "tools.t.sinks", 2, "argument name = kind"),
    ('[tools."bad name"]\neffect = "read"\n', "tools.bad name", 1, "not a tool name"),
    ('tools = 3\n', "tools", 1, "must be a table"),
    ('[tools]\nt = 3\n', "tools.t", 2, "must be a table"),
])
def test_bad_tool_declarations_are_errors_naming_file_line_and_key(
        text: str, key: str, line: int, says: str) -> None:
    err = _error(text)
    assert (err.path, err.key, err.line) == ("anfitrion.toml", key, line), str(err)
    assert says in str(err)


def test_a_template_naming_an_argument_the_tool_lacks_is_an_error_when_the_tool_is_known(
        ) -> None:
    policy = parse_policy('[tools."pay__refund"]\n\neffect_key = "refund:{payment}"\n',
                          path="anfitrion.toml")
    tool = _server_tool("pay__refund", [])
    with pytest.raises(ConfigError) as info:
        check_declarations(policy.declarations, [tool, _server_tool("other", [])])
    assert (info.value.path, info.value.line) == ("anfitrion.toml", 3)
    assert "'payment', which is not one of its arguments" in str(info.value)
    check_declarations(policy.declarations, [_server_tool("other", [])])  # not offered: fine


@pytest.mark.anyio
async def test_a_declared_key_makes_a_server_tool_effect_run_once_across_sessions() -> None:
    """The MCP-tool case: re-proposed by another session with other words, not run again."""
    ran: list[Any] = []
    store = MemoryStore()
    gate = Gate(policy=parse_policy(POLICY), approver=DenyAllApprover(), store=store,
                emit=_silent)
    tool = _server_tool("pay__refund", ran, effect=Effect.READ)  # the server says "read"
    first = await _propose(gate, tool, "c1", {"payment_id": "p1", "note": "a"})
    again = await _propose(gate, tool, "c2", {"payment_id": "p1", "note": "b"}, session="s2",
                           principal="bob")
    assert first.content == "ok" and ran == [{"payment_id": "p1", "note": "a"}]
    assert again.content.startswith("[not run again: this exact effect (refund:\"p1\")")
    key = effect_key(tool="pay__refund", arguments={"payment_id": "p1"}, principal_id="x",
                     session_id="y", template="refund:{payment_id}", scope="global")
    held = await store.effect_state(key.key)
    assert held is not None and held.call_id == "c1"


@pytest.mark.anyio
async def test_a_tool_declared_write_goes_through_the_ledger_and_its_failure_is_unknown(
        ) -> None:
    ran: list[Any] = []
    store = MemoryStore()
    gate = Gate(policy=parse_policy(POLICY), approver=DenyAllApprover(), store=store,
                emit=_silent)
    tool = _server_tool("pay__refund", ran, effect=Effect.READ, fail=True)
    result = await _propose(gate, tool, "c1", {"payment_id": "p1"})
    assert result.error_kind == "outcome_unknown"
    entry = await store.execution_state("s1", "c1")
    assert entry is not None and entry.state is LedgerState.UNKNOWN
    # declared idempotent: retried instead of refused
    idempotent = parse_policy(POLICY.replace('effect_scope = "global"',
                                             'effect_scope = "global"\nidempotent = true'))
    retry = Gate(policy=idempotent, approver=DenyAllApprover(), store=store, emit=_silent)
    await _propose(retry, _server_tool("pay__refund", ran), "c2", {"payment_id": "p1"})
    assert len(ran) == 2


@pytest.mark.anyio
async def test_a_tool_declared_read_is_not_asked_about_and_keeps_no_ledger() -> None:
    ran: list[Any] = []
    store = MemoryStore()
    policy = parse_policy('[tools."pay__lookup"]\neffect = "read"\n')  # write asks by default
    gate = Gate(policy=policy, approver=DenyAllApprover(), store=store, emit=_silent)
    result = await _propose(gate, _server_tool("pay__lookup", ran), "c1", {"payment_id": "p"})
    assert result.content == "ok" and len(ran) == 1
    assert await store.execution_state("s1", "c1") is None
    denied = await _propose(gate, _server_tool("pay__other", ran), "c2", {"payment_id": "p"})
    assert denied.error_kind == "denied" and len(ran) == 1  # undeclared write: asked, denied


@pytest.mark.anyio
async def test_a_declaration_that_does_not_fit_its_tool_refuses_the_call_and_runs_nothing(
        ) -> None:
    ran: list[Any] = []
    policy = parse_policy('[defaults]\nwrite = "allow"\n[tools."pay__refund"]\n'
                          'effect_key = "refund:{id}"\n', path="anfitrion.toml")
    gate = Gate(policy=policy, approver=DenyAllApprover(), store=MemoryStore(), emit=_silent)
    result = await _propose(gate, _server_tool("pay__refund", ran), "c1", {"payment_id": "p"})
    assert result.error_kind == "refused" and "declaration" in result.content
    assert ran == []


def test_policy_validate_with_a_toolbox_checks_the_declarations_against_its_tools(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid

    from click.testing import CliRunner

    from anfitrion._cli.main import cli

    name = f"declared_tools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from anfitrion import Toolbox\n"
        "tools = Toolbox()\n"
        "@tools.tool\n"
        "def pay__refund(payment_id: str) -> str:\n"
        "    '''Refund.'''\n"
        "    return 'ok'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "good.toml").write_text('[tools."pay__refund"]\neffect_key = "r:{payment_id}"\n')
    (tmp_path / "bad.toml").write_text('[tools."pay__refund"]\n\neffect_key = "r:{payment}"\n')
    good = CliRunner().invoke(cli, ["policy", "validate", "good.toml", "--toolbox",
                                    f"{name}:tools"])
    assert good.exit_code == 0, good.output
    bad = CliRunner().invoke(cli, ["policy", "validate", "bad.toml", "--toolbox",
                                   f"{name}:tools"])
    assert bad.exit_code != 0
    assert "bad.toml:3:" in bad.output and "'payment', which is not one of its arguments" in \
        bad.output


def test_a_declaration_applies_to_an_mcp_tool_and_keeps_what_pins_it() -> None:
    pytest.importorskip("mcp")
    from anfitrion.mcp._toolset import McpTool

    async def handler(arguments: dict[str, Any], context: Any) -> str:
        return "ok"

    tool = McpTool(name="pay__refund", description="Refund.", input_schema=SCHEMA,
                   handler=handler, server="pay", upstream_name="refund", pinned_digest="d" * 64)
    declared = parse_policy(POLICY).declared(tool)
    assert isinstance(declared, McpTool)
    assert (declared.server, declared.upstream_name, declared.pinned_digest) == \
        ("pay", "refund", "d" * 64)
    assert declared.effect_key == "refund:{payment_id}" and declared.effect_scope == "global"
    assert declared.definition_dict()["mcp"] == tool.definition_dict()["mcp"]
