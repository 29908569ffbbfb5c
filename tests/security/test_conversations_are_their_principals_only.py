"""Conversation handles (the gateway's ``_meta`` key ``io.anfitrion/conversation``): an attacker
who read the code cannot reach another principal's session with a handle, forge or alter a
minted one, or smuggle a malformed one through."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion.exceptions import UserError
from anfitrion.mcp._conversations import (
    CONVERSATION_KEY_ENV,
    CONVERSATION_META_KEY,
    Conversations,
    HandleError,
)
from anfitrion.store import MemoryStore

KEY = b"k" * 32
keeper = Conversations(KEY)


def test_a_minted_handle_is_its_principals_only() -> None:
    handle = keeper.mint("alice")
    assert keeper.check("alice", handle) == handle
    with pytest.raises(HandleError, match="another principal"):
        keeper.check("mallory", handle)
    # another gateway key (another deployment) does not accept it either
    with pytest.raises(HandleError):
        Conversations(b"z" * 32).check("alice", handle)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_alteration_of_a_minted_handle_is_refused(data: st.DataObject) -> None:
    handle = keeper.mint("alice")
    i = data.draw(st.integers(5, len(handle) - 1))
    c = data.draw(st.sampled_from("0123456789abcdef.-_:xyz"))
    altered = handle[:i] + c + handle[i + 1:]
    if altered == handle:
        return
    with pytest.raises(HandleError):
        keeper.check("alice", altered)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), st.integers(), st.none(), st.booleans(),
                 st.lists(st.text()), st.dictionaries(st.text(), st.text())))
def test_whatever_a_client_sends_is_a_checked_handle_or_one_clear_refusal(value: object) -> None:
    try:
        assert keeper.check("alice", value) == value
    except HandleError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 300
    else:
        assert isinstance(value, str) and 8 <= len(value) <= 128 and value.isascii()


def test_one_handle_names_different_sessions_for_different_principals() -> None:
    handle = "my-own-conversation-1"
    assert keeper.session_id("alice", handle) != keeper.session_id("mallory", handle)
    assert keeper.session_id("alice", handle) == Conversations(KEY).session_id("alice", handle)
    # without the key nobody derives the id from the handle
    assert keeper.session_id("alice", handle) != Conversations(b"z" * 32).session_id(
        "alice", handle)
    # the separator cannot be shifted between principal and handle
    assert keeper.session_id("a", "lice:handle-x") != keeper.session_id("alice", ":handle-x")


def test_handle_in_meta() -> None:
    assert keeper.handle_in("alice", None) is None
    assert keeper.handle_in("alice", {"progressToken": 1}) is None
    assert keeper.handle_in("alice", {CONVERSATION_META_KEY: "desk-0001"}) == "desk-0001"


@pytest.mark.anyio
async def test_the_key_is_given_or_taken_from_the_env_or_kept_in_the_store(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    monkeypatch.delenv(CONVERSATION_KEY_ENV, raising=False)
    first, second = await Conversations.load(store), await Conversations.load(store)
    handle = first.mint("alice")
    assert second.check("alice", handle) == handle  # every process on the store agrees
    monkeypatch.setenv(CONVERSATION_KEY_ENV, "e" * 40)
    with pytest.raises(HandleError):
        (await Conversations.load(store)).check("alice", handle)
    with pytest.raises(UserError, match="32 bytes"):
        await Conversations.load(store, "short")
