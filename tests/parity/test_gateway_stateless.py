"""A 2026-07-28 client of the gateway (no ``initialize``, no ``Mcp-Session-Id``: every request
stands alone) keeps one session: the principal's conversation, in the store. Every parity
guarantee holds for it (``test_parity.py``'s ``gateway-stateless`` door); here, that the
session is not the process's: it outlives a gateway restart, and a client naming its own
conversation handle gets a session apart."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from doors import StatelessDoor, open_door

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

POLICY = """
[[rules]]
id = "mail-is-fine"
tool = "p.send_mail"
verdict = "allow"

[[rules]]
id = "pages-are-free"
tool = "p.fetch_page"
verdict = "allow"

[repeat_guard]
max_repeats = 2
"""


async def test_a_stateless_clients_taint_and_repeat_guard_outlive_a_gateway_restart(
        tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'g.db'}"
    with anyio.fail_after(120):
        async with open_door("gateway-stateless", store, POLICY, tmp_path) as door:
            assert isinstance(door, StatelessDoor)
            page = await door.call("p.fetch_page", {"url": "https://news.example/today"})
            first = [await door.call("p.lookup", {"name": "ana"}) for _ in range(2)]
        async with open_door("gateway-stateless", store, POLICY, tmp_path) as door:
            again = await door.call("p.lookup", {"name": "ana"})
            mail = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi"})
    async with open_door("gateway-http", store, POLICY, tmp_path) as legacy:
        fresh = await legacy.call("p.lookup", {"name": "ana"})
    assert [o.status for o in first] == ["ok", "ok"] and page.status == "ok"
    # not two sessions of one request each: the third lookup in a row is refused, and the
    # write after untrusted content asks a person, on another gateway process
    assert again.status == "error" and "denied" in again.text
    assert mail.status == "waiting"
    assert fresh.status == "ok"  # a connection's own conversation is another one


async def test_a_stateless_client_naming_its_conversation_gets_a_session_apart(
        tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'g.db'}"
    with anyio.fail_after(120):
        async with open_door("gateway-stateless", store, POLICY, tmp_path) as door:
            assert isinstance(door, StatelessDoor)
            page = await door.call("p.fetch_page", {"url": "https://news.example/today"})
            door.handle = "my-own-conversation-1"
            mail = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi"})
            result_meta = door.last_meta
            door.handle = None
            tainted = await door.call("p.send_mail", {"to": "ana@example.org", "body": "2"})
    assert page.status == "ok"
    assert mail.status == "ok", mail  # its own conversation read nothing untrusted
    assert result_meta is not None
    assert result_meta.get("io.anfitrion/conversation") == "my-own-conversation-1"
    assert tainted.status == "waiting"  # the principal's conversation did


async def test_a_stateless_clients_lists_are_private_and_never_cached(tmp_path: Path) -> None:
    """What the gateway lists depends on the principal (the policy's view): a 2026-07-28 list
    says ``cacheScope: private`` (no cache shares it between principals) and ``ttlMs: 0``
    (an approval or a revocation counts at the next list)."""
    with anyio.fail_after(120):
        async with open_door("gateway-stateless", "memory://", POLICY, tmp_path) as door:
            assert isinstance(door, StatelessDoor)
            listed = await door.modern.session.list_tools()
    assert {t.name for t in listed.tools} >= {"p.lookup", "p.send_mail"}
    assert listed.cache_scope == "private"
    assert listed.ttl_ms == 0
