"""What the inbox shows around the call: the tool's description, the request, the warnings."""

from __future__ import annotations

import re
from html import unescape
from importlib import resources
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from anfitrion._approvals import ApprovalRequest, make_visible
from anfitrion.web._pages import visible_html
from anfitrion.web._render import (
    Intent,
    Piece,
    finding_parts,
    findings,
    intent_of,
    notices,
    plural,
    visible_pieces,
)


def _request(**extra: object) -> ApprovalRequest:
    return ApprovalRequest.for_call(
        session_id="s1", principal_id="alice", call_id="c1", tool_name="send_email",
        tool_definition_hash="h", arguments={"to": "bob@example.com"}, effect="write",
        reason="r", rule_id="default.write", **extra)  # type: ignore[arg-type]


def test_the_tool_description_is_kept_for_display_and_is_not_part_of_the_digest() -> None:
    described = _request(tool_description="Send an e-mail.")
    assert described.digest == _request().digest
    assert ApprovalRequest.from_dict(described.to_dict()) == described


def test_a_request_stored_before_descriptions_were_recorded_still_loads() -> None:
    old_row = _request().to_dict()
    del old_row["tool_description"]
    assert ApprovalRequest.from_dict(old_row).tool_description is None


# -- the warnings ------------------------------------------------------------------------------

def test_the_session_taint_is_named_once_and_folds_the_policys_own_taint_warning() -> None:
    shown = notices(["this session read untrusted content from fetch_url",
                     "argument to: e-mail `eve@evil.example` appeared only in a result of "
                     "fetch_url at turn 1"], [], ["fetch_url"])
    assert [n.kind for n in shown] == ["taint", "policy"]
    assert shown[0].parts == (("Untrusted content entered this session from ", False),
                              ("fetch_url", True))
    assert shown[1].parts == (("argument to: e-mail ", False), ("eve@evil.example", True),
                              (" appeared only in a result of fetch_url at turn 1", False))


def test_a_warning_is_never_repeated() -> None:
    shown = notices(["x has a problem", "x has a problem"], ["x has a problem", "other"], None)
    assert [n.text for n in shown] == ["x has a problem", "other"]


def test_without_the_session_the_policys_taint_warning_still_names_the_sources() -> None:
    shown = notices(["this session read untrusted content from fetch_url, read_inbox"], [], None)
    assert [p for p, quoted in shown[0].parts if quoted] == ["fetch_url", "read_inbox"]


def test_an_odd_backtick_leaves_the_warning_as_prose() -> None:
    """A value holding a backtick would pair the quotes wrongly: nothing is quoted then."""
    [shown] = notices(["value `a`b` appeared only in a result of x"], [], None)
    assert shown.parts == (("value `a`b` appeared only in a result of x", False),)


def test_counts_are_pluralised() -> None:
    assert plural(1, "character") == "1 character"
    assert plural(0, "character") == "0 characters"
    assert plural(2, "character") == "2 characters"


# -- hidden characters -------------------------------------------------------------------------

def test_hidden_characters_become_markers_and_look_alike_text_stays_plain() -> None:
    pieces = visible_pieces("bob\u202e ⟨U+202E RLO⟩\nend")
    assert pieces == [Piece("bob"), Piece("⟨U+202E RLO⟩", "RIGHT-TO-LEFT OVERRIDE"),
                      Piece(" ⟨U+202E RLO⟩"), Piece("⏎", "line break"), Piece("\nend")]
    html = str(visible_html("a\u200bb ⟨U+200B ZWSP⟩ <b>"))
    assert html == ('a<mark class="hidden-char" title="ZERO WIDTH SPACE">⟨U+200B ZWSP⟩</mark>'
                    'b ⟨U+200B ZWSP⟩ &lt;b&gt;')


@given(st.text())
def test_pieces_spell_exactly_what_make_visible_shows(text: str) -> None:
    assert "".join(p.text for p in visible_pieces(text)) == make_visible(text)


@given(st.text())
def test_the_only_markup_in_shown_text_is_the_hosts_own_markers(text: str) -> None:
    html = str(visible_html(text))
    stripped = re.sub(r'<mark class="hidden-char" title="[^"<>]*">([^<>]*)</mark>', r"\1", html)
    assert "<" not in stripped and ">" not in stripped
    assert unescape(stripped) == make_visible(text)


# -- what the call is for ----------------------------------------------------------------------

def _user(text: str) -> dict[str, Any]:
    return {"kind": "user", "parts": [{"kind": "text", "text": text}]}


def _reply(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "reply", "parts": list(parts), "stop_reason": "tool_use"}


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"kind": "tool_call", "id": call_id, "name": name, "raw_arguments": "{}"}


def test_the_intent_is_the_last_request_before_the_call_and_the_turn_since() -> None:
    messages = [
        _user("first question"), _reply({"kind": "text", "text": "answer"}),
        _user("Read the page and mail Bob"),
        _reply(_call("c1", "fetch_url")),
        {"kind": "user", "parts": [{"kind": "tool_result", "call_id": "c1", "name": "fetch_url",
                                    "content": "…", "is_error": False,
                                    "provenance": "untrusted"}]},
        _reply({"kind": "text", "text": "Sending it now."}, _call("c2", "send_email")),
        _user("a later question"),
    ]
    assert intent_of(messages, "c2") == Intent("Read the page and mail Bob", "Sending it now.",
                                               (("fetch_url", "untrusted"),))


def test_the_intent_of_a_transcript_without_a_request_or_with_junk_is_empty() -> None:
    assert intent_of([], "c1") == Intent()
    junk: list[Any] = [None, {"kind": "user", "parts": "nope"}, {"kind": "user"},
                       {"kind": "user", "parts": [1, {"kind": "text"}]}]
    assert intent_of(junk, "c1") == Intent()


def test_a_finding_quotes_the_argument_it_is_about_and_marks_its_hidden_characters() -> None:
    [parts] = finding_parts({"a": {"b\u200b": "x\u202ey"}})
    assert parts[0] == ("a.b\u200b", True)
    # the API's text shows the same finding with the hidden characters named
    assert findings({"a": {"b\u200b": "x\u202ey"}}) == [
        "a.b⟨U+200B ZWSP⟩ contains a bidi control character (U+202E RLO): text may display "
        "reordered"]
    [shown] = notices([], [parts], None)
    assert shown.parts[0] == ("a.b\u200b", True)


def test_no_template_marks_a_value_safe_or_carries_inline_code() -> None:
    """The CSP forbids inline script and style; autoescaping is only as good as its gaps."""
    folder = resources.files("anfitrion.web").joinpath("templates")
    names = [t.name for t in folder.iterdir() if t.name.endswith(".html")]
    assert "detail.html" in names
    for name in names:
        text = folder.joinpath(name).read_text(encoding="utf-8")
        assert not re.search(r"\|\s*safe\b|autoescape\s+false|style=|<style|\bon[a-z]+=", text), \
            name
        assert not re.search(r"<script(?![^>]*\bsrc=)", text), name
