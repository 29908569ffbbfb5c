"""The session (:mod:`anfitrion._session`): its state, what the gate tells it, and its one
stored shape with the migration of the shapes earlier releases stored."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from anfitrion._conversation import Reply, ToolCall, ToolResult
from anfitrion._principal import Principal
from anfitrion._session import (
    MAX_RETRIES_REMEMBERED,
    RECENT_PROPOSALS_KEPT,
    SESSION_SCHEMA,
    Session,
    migrate_session_data,
    untrusted_sources_of,
)
from anfitrion.exceptions import StoreError
from anfitrion.store import SessionState

NOW = datetime(2026, 1, 1, tzinfo=UTC)

# -- the stored shape ---------------------------------------------------------------------

V1_DATA = {  # what release 0.1 stored for a session waiting on call w1
    "principal": {"id": "alice", "roles": [], "scopes": [], "attributes": {}}, "turn": 1,
    "counters": {"approvals_asked": 1}, "invalid_by_tool": {},
    "recent_calls": [["send_mail", "d" * 64]], "untrusted_sources": ["read_inbox"],
    "pending": {"w1": "REQUEST"}, "settled": [],
}


def test_a_session_stored_by_release_0_1_migrates_by_its_named_step() -> None:
    migrated = migrate_session_data(V1_DATA)
    assert migrated["schema"] == SESSION_SCHEMA
    assert "untrusted_sources" not in migrated  # the taint index owns it now
    assert migrated["app"] is None and migrated["retries"] == []
    with pytest.raises(StoreError, match="shape version 9"):
        migrate_session_data({**V1_DATA, "schema": 9})
    with pytest.raises(StoreError, match="cannot be read"):
        Session.from_state(SessionState("s", "alice", "suspended", {"turn": 1}))


def _busy() -> Session:
    """A session in the middle of a turn: one call settled, one waiting, counters moved."""
    session = Session("s1", Principal("alice", roles=frozenset({"ops"})), app="anfitrion:demo")
    session.begin_turn()
    session.add_principal_text("Mail ana the weather.")
    session.add(Reply((ToolCall.from_object("c1", "get_weather", {"city": "Lisboa"}),
                       ToolCall.from_object("c2", "send_mail", {"to": "ana@example.org"}))))
    session.record_proposal("get_weather", "a" * 64)
    session.record_invalid("send_mail")
    session.record_approval_asked()
    session.record_waiting("c2", "REQUEST")
    session.remember_retry("send_mail", "b" * 64, "c2")
    session.record_result(ToolResult("c1", "get_weather", "15 C"), executed=True)
    return session


def test_the_stored_shape_brings_back_every_part_of_the_state() -> None:
    session = _busy()
    state = session.to_state()
    assert state.data["schema"] == SESSION_SCHEMA
    back = Session.from_state(state)
    assert (back.id, back.principal, back.app, back.turn) == ("s1", session.principal,
                                                             "anfitrion:demo", 1)
    assert dict(back.counters) == {"invalid_calls": 1, "approvals_asked": 1, "tool_calls": 1}
    assert dict(back.pending) == {"c2": "REQUEST"}
    assert back.settled("c1") == ToolResult("c1", "get_weather", "15 C")
    assert back.retry_of("send_mail", "b" * 64) == "c2"
    assert back.used_call_id("c2") and not back.used_call_id("c3")
    assert back.policy_context(NOW, {}, {}).recent_calls == (("get_weather", "a" * 64),)
    assert back.to_state().data == state.data and back.to_state().messages == state.messages


def test_a_result_leaves_the_waiting_calls_and_counts_only_when_it_ran() -> None:
    session = _busy()
    assert session.record_result(ToolResult("c2", "send_mail", "denied", is_error=True),
                                 executed=False) is False
    assert dict(session.pending) == {} and session.tool_calls == 1  # a refusal ran nothing
    message = session.close_turn([ToolCall.from_object("c2", "send_mail", {}),
                                  ToolCall.from_object("c1", "get_weather", {})])
    assert [r.call_id for r in message.parts if isinstance(r, ToolResult)] == ["c2", "c1"]
    assert session.settled("c1") is None and session.last_reply() is None


def test_the_repeated_call_guard_remembers_only_the_newest_proposals() -> None:
    session = Session("s1", Principal("alice"))
    for i in range(RECENT_PROPOSALS_KEPT + 5):
        session.record_proposal("t", f"{i:064d}")
    recent = session.policy_context(NOW, {}, {}).recent_calls
    assert len(recent) == RECENT_PROPOSALS_KEPT
    assert recent[0] == ("t", f"{5:064d}") and recent[-1][1] == f"{RECENT_PROPOSALS_KEPT + 4:064d}"


def test_remembered_retries_are_bounded_and_the_oldest_is_forgotten_first() -> None:
    session = Session("s1", Principal("alice"))
    for i in range(MAX_RETRIES_REMEMBERED):
        session.remember_retry("t", str(i), f"c{i}")
    session.remember_retry("t", "0", "c0-again")  # remembered again: the newest now
    session.remember_retry("t", "new", "c-new")  # one too many: the oldest ("1") goes
    assert session.retry_of("t", "1") is None
    assert session.retry_of("t", "0") == "c0-again" and session.retry_of("t", "new") == "c-new"
    session.forget_retry("t", "new")
    assert session.retry_of("t", "new") is None


def test_invalid_calls_are_counted_per_tool_and_per_session() -> None:
    session = Session("s1", Principal("alice"))
    assert session.record_invalid("a") == (1, 1)
    assert session.record_invalid("b") == (1, 2)
    assert session.record_invalid("a") == (2, 3)


def test_a_stored_session_that_cannot_be_read_lists_no_sources_and_names_no_crash(
        caplog: pytest.LogCaptureFixture) -> None:
    broken = SessionState("s9", "alice", "suspended", {"schema": SESSION_SCHEMA, "turn": 1})
    assert untrusted_sources_of(broken) == ()
    assert "s9" in caplog.text
