"""A result's media survives the store on every backend, the audit log keeps its type, size and
hash but never its bytes, and sessions stored before media parts existed still load."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from anfitrion import Effect, Host, Toolbox
from anfitrion._conversation import Media, ToolResult, UserMessage
from anfitrion._media import MediaResult
from anfitrion._session import Session
from anfitrion.exceptions import StoreError
from anfitrion.models._base import ModelRequest
from anfitrion.store import SessionState, Store
from anfitrion.testing import ScriptedModel, call

pytestmark = pytest.mark.anyio

PNG = base64.b64decode(  # a real 1×1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC")
OLD_ROW: list[dict[str, Any]] = [
    {"kind": "user", "parts": [{"kind": "text", "text": "look"}]},
    {"kind": "reply", "parts": [{"kind": "tool_call", "id": "c1", "name": "snapshot",
                                 "raw_arguments": "{}", "arguments": {}}],
     "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1},
     "model": "m"},
    {"kind": "user", "parts": [{"kind": "tool_result", "call_id": "c1", "name": "snapshot",
                                "content": "[image image/png, 9 bytes: not shown]",
                                "is_error": False, "error_kind": None, "truncated": False,
                                "provenance": "untrusted"}]},
]
"""Messages as a release before media parts stored them: no ``media`` key."""


def tools() -> Toolbox:
    box = Toolbox()

    @box.tool(effect=Effect.READ, provenance="untrusted")
    def snapshot() -> Any:
        """A picture of the room."""
        return MediaResult("the room", (Media("image/png", PNG),))

    return box


def model() -> ScriptedModel:
    def respond(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and any(isinstance(p, ToolResult) for p in last.parts):
            return "seen"
        return [call("snapshot", {}, id="c1")]
    return ScriptedModel(respond)


async def test_media_is_stored_with_the_session_and_audited_without_its_bytes(
        store: Store) -> None:
    run = await Host(model=model(), tools=tools(), store=store).run("look", principal="alice")
    assert run.output == "seen", run.error
    state = await store.load_session(run.session_id)
    assert state is not None
    (result,) = Session.from_state(state).transcript.tool_results
    assert result.media == (Media("image/png", PNG),)
    assert result.content == "the room"
    encoded = base64.b64encode(PNG).decode()
    records = json.dumps([r.data for r in await store.audit_records(run.session_id)])
    assert encoded not in records
    returned = [r.data["result"] for r in await store.audit_records(run.session_id)
                if r.data.get("result") and r.data["result"].get("media")]
    assert returned and returned[0]["media"] == [
        {"mime_type": "image/png", "bytes": len(PNG), "sha256": Media("image/png", PNG).sha256}]


async def test_a_session_stored_before_media_parts_loads_with_no_media(store: Store) -> None:
    saved = await store.save_session(SessionState(
        "old-session", "alice", "completed",
        {"schema": 1, "principal": {"id": "alice"}, "turn": 1}, messages=OLD_ROW))
    loaded = await store.load_session(saved.session_id)
    assert loaded is not None
    (result,) = Session.from_state(loaded).transcript.tool_results
    assert result.media == ()
    assert result.content == "[image image/png, 9 bytes: not shown]"


async def test_stored_media_that_does_not_match_its_hash_is_refused(store: Store) -> None:
    row = json.loads(json.dumps(OLD_ROW))
    row[2]["parts"][0]["media"] = [{"mime_type": "image/png",
                                    "data": base64.b64encode(PNG).decode(), "sha256": "0" * 64}]
    await store.save_session(SessionState(
        "tampered", "alice", "completed",
        {"schema": 1, "principal": {"id": "alice"}, "turn": 1}, messages=row))
    loaded = await store.load_session("tampered")
    assert loaded is not None
    with pytest.raises(StoreError, match="sha256"):
        Session.from_state(loaded)
