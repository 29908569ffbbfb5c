"""The tool linter (pure): each finding, silences, policy constraints, hostile metadata."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion import Effect, Toolbox
from anfitrion.exceptions import ConfigError
from anfitrion.policy import parse_policy
from anfitrion.policy._lint import (
    LINT_CODES,
    Silence,
    ToolFacts,
    facts_of_mcp,
    facts_of_tool,
    lint_tools,
    parse_silenced,
    skeleton,
)

GOOD = ("Send one e-mail to a colleague at example.com and return its message id. Do not use "
        "it for newsletters; use bulk_mail instead.")


def codes(*facts: ToolFacts, **options: Any) -> list[tuple[str, str, str | None]]:
    return [(f.code, f.tool, f.argument) for f in lint_tools(facts, **options).standing]


def schema(**properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_a_well_described_read_tool_has_no_finding() -> None:
    tool = ToolFacts("get_time", "Return the current time in a time zone as ISO 8601 text. Do "
                     "not use it to convert dates.", schema(zone={"type": "string",
                                                                  "description": "IANA zone"}),
                     "read")
    assert codes(tool) == []


def test_a_short_vague_description_without_when_not_is_reported_with_reasons() -> None:
    report = lint_tools([ToolFacts("files", "Does things with files.", {}, "read")])
    found = {f.code: f.reason for f in report.findings}
    assert set(found) == {"description-short", "description-vague", "no-when-not"}
    assert "4 word(s)" in found["description-short"]
    assert "'Does things'" in found["description-vague"]


def test_a_tool_registered_without_an_effect_is_reported_as_a_default_write() -> None:
    tools = Toolbox()

    @tools.tool
    def archive(name: str) -> str:
        """Archive a finished project by its name; never use it on active projects.

        Args:
            name: the project's name.
        """
        return name

    @tools.tool(effect=Effect.WRITE)
    def rename(name: str) -> str:
        """Rename a finished project by its name; never use it on active projects.

        Args:
            name: the project's name.
        """
        return name

    found = codes(*(facts_of_tool(t) for t in tools))
    assert found == [("effect-undeclared", "archive", None)]


def test_a_write_tool_with_a_free_form_target_is_reported_until_the_policy_narrows_it() -> None:
    tool = ToolFacts("send_email", GOOD, schema(
        to={"type": "string", "description": "recipient"},
        subject={"type": "string", "description": "subject line"}), "write")
    assert codes(tool) == [("write-free-form", "send_email", "to")]
    narrowed = parse_policy('[[rules]]\ntool = "send_*"\n[rules.arguments.to]\n'
                            'email_domains = ["example.com"]\n')
    assert codes(tool, policy=narrowed) == []
    # a constraint that holds for one role only does not narrow everyone's calls
    for_admins = parse_policy('[[rules]]\ntool = "send_email"\nroles = ["admin"]\n'
                              '[rules.arguments.to]\nemail_domains = ["example.com"]\n')
    assert codes(tool, policy=for_admins) == [("write-free-form", "send_email", "to")]


@pytest.mark.parametrize("argument", ["path", "url", "to", "sql", "command", "target_path",
                                      "recipients"])
def test_every_free_form_kind_of_write_argument_is_caught(argument: str) -> None:
    spec = {"type": "string", "description": "x"}
    if argument == "recipients":
        spec = {"type": "array", "items": {"type": "string"}, "description": "x"}
    tool = ToolFacts("act", GOOD, schema(**{argument: spec}), "write")
    assert codes(tool) == [("write-free-form", "act", argument)]


def test_a_schema_that_narrows_the_argument_is_enough() -> None:
    tool = ToolFacts("run", GOOD, schema(
        command={"type": "string", "enum": ["status", "restart"], "description": "x"},
        path={"type": "string", "pattern": "^/srv/[a-z]+$", "description": "x"}), "write")
    assert codes(tool) == []


def test_a_read_tool_that_can_reach_the_network_is_reported() -> None:
    fetch = ToolFacts("fetch", GOOD, schema(url={"type": "string", "description": "page"}),
                      "read")
    assert codes(fetch) == [("read-network", "fetch", "url")]
    hosts = parse_policy('[[rules]]\ntool = "fetch"\n[rules.arguments.url]\n'
                         'url_hosts = ["docs.example.com"]\n')
    assert codes(fetch, policy=hosts) == []
    # an MCP read tool is open-world unless it says otherwise (the protocol's default)
    listed = facts_of_mcp({"name": "search", "description": GOOD, "inputSchema": schema(),
                           "annotations": {"readOnlyHint": True}})
    assert codes(listed) == [("read-network", "search", None)]
    closed = facts_of_mcp({"name": "search", "description": GOOD, "inputSchema": schema(),
                           "annotations": {"readOnlyHint": True, "openWorldHint": False}})
    assert codes(closed) == []


def test_parameters_without_description_or_type_are_reported() -> None:
    tool = ToolFacts("calc", GOOD, schema(a={"type": "integer"}, b={"description": "second"}),
                     "read")
    assert codes(tool) == [("parameter-undescribed", "calc", "a"),
                           ("parameter-untyped", "calc", "b")]


@pytest.mark.parametrize("other", ["Git_Log", "git_l0g", "gіt_log", "git-log", "ɡit_log",
                                   "git\u200b_log"])
def test_names_that_differ_only_by_case_or_look_alikes_are_reported(other: str) -> None:
    found = codes(ToolFacts("git_log", GOOD, schema(), "read"),
                  ToolFacts(other, GOOD, schema(), "read"))
    assert ("name-confusable", "git_log", None) in found
    assert skeleton(other) == skeleton("git_log")


def test_a_name_with_invisible_or_foreign_characters_is_reported_escaped() -> None:
    report = lint_tools([ToolFacts("send\u202email", GOOD, schema(), "read")])
    finding = next(f for f in report.findings if f.code == "name-unusual")
    assert finding.tool == "send\\u202email"


def test_a_silence_keeps_the_finding_in_the_report_marked_with_its_reason() -> None:
    tool = ToolFacts("run_sql", GOOD, schema(sql={"type": "string", "description": "x"}),
                     "write")
    silence = Silence("write-free-form", "run_*", "sql", "the DB user can only read")
    report = lint_tools([tool], silenced=[silence,
                                          Silence("no-when-not", "other", None, "unused")])
    assert report.standing == ()
    assert report.findings[0].silenced == "the DB user can only read"
    assert [s.tool for s in report.unused_silences] == ["other"]


def test_silences_come_from_the_policy_file_and_need_a_reason() -> None:
    text = ('[[lint.silence]]\nfinding = "write-free-form"\ntool = "run_sql"\n'
            'argument = "sql"\nreason = "read-only database user"\n')
    parse_policy(text)  # the policy file accepts its [lint] table
    import tomllib

    assert parse_silenced(tomllib.loads(text)["lint"]) == [
        Silence("write-free-form", "run_sql", "sql", "read-only database user")]
    for bad, problem in [('finding = "write-free-form"\ntool = "x"', "needs a reason"),
                         ('finding = "nope"\nreason = "r"', "finding must be one of"),
                         ('finding = "*"\nreason = "r"\ncolour = "red"', "unknown key")]:
        with pytest.raises(ConfigError, match=problem):
            parse_policy(f"[[lint.silence]]\n{bad}\n")


def test_every_code_is_documented_in_the_policy_reference() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "policy.md").read_text()
    for code in LINT_CODES:
        assert f"`{code}`" in doc


def test_hostile_metadata_cannot_put_terminal_escapes_or_floods_in_the_report() -> None:
    evil = "\x1b]52;c;ZXZpbA==\x07\x1b[2J" + "A" * 200_000
    definition = {"name": "x\x1b[31mred", "description": evil,
                  "inputSchema": {"type": "object", "properties": {
                      evil: {"type": "string"}, **{f"p{i}": {} for i in range(5000)}}}}
    report = lint_tools([facts_of_mcp(definition)])
    text = json.dumps(report.to_dict(), ensure_ascii=False)
    assert "\x1b" not in text and "\x07" not in text
    assert len(text) < 2_000_000
    # names are cut to 64 characters before escaping (an escape is at most 10 characters)
    assert all(len(f.tool) <= 641 and len(f.argument or "") <= 641 for f in report.findings)
    assert any("only the first 256 were checked" in f.reason for f in report.findings)


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=80), description=st.text(max_size=300),
       properties=st.dictionaries(st.text(max_size=20), st.one_of(
           st.none(), st.integers(), st.text(max_size=10),
           st.dictionaries(st.sampled_from(["type", "description", "enum"]),
                           st.one_of(st.text(max_size=10), st.integers()))), max_size=6),
       annotations=st.one_of(st.none(), st.text(max_size=5), st.dictionaries(
           st.sampled_from(["readOnlyHint", "openWorldHint"]),
           st.one_of(st.booleans(), st.text(max_size=3)))))
def test_any_definition_a_server_sends_lints_without_error_into_printable_text(
        name: str, description: str, properties: dict[str, Any], annotations: Any) -> None:
    report = lint_tools([facts_of_mcp({"name": name, "description": description,
                                       "inputSchema": {"properties": properties},
                                       "annotations": annotations}),
                         facts_of_mcp({"name": name.upper(), "description": description})])
    for finding in report.findings:
        for text in (finding.tool, finding.argument or "", finding.reason):
            assert text.isprintable(), text
