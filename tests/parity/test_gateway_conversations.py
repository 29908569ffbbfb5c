"""A conversation is not a connection: a client that reconnects continues its session, and a
re-send after a lost reply is caught as the same effect (run once).

Real gateway over streamable HTTP, the parity server upstream, the official ``mcp`` client.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")

from doors import PRINCIPAL, TOKEN, WAITING, _serve_http, approve_pins, server_config
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from anfitrion import _answers as answers
from anfitrion.mcp._conversations import CONVERSATION_META_KEY
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers
from anfitrion.policy import parse_policy
from anfitrion.store._sqlite import SQLiteStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

MAIL = {"to": "ana@example.org", "body": "the report"}


async def _client(stack: AsyncExitStack, url: str) -> ClientSession:
    http = await stack.enter_async_context(
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300),
                           headers={"Authorization": f"Bearer {TOKEN}"}))
    read, write = await stack.enter_async_context(streamable_http_client(url,
                                                                         http_client=http))
    client = await stack.enter_async_context(ClientSession(read, write))
    await client.initialize()
    return client


def _text(result: Any) -> str:
    return str(result.content[0].text)


class _Served:
    """One gateway on a SQLite file, served over HTTP; clients connect and go."""

    def __init__(self, tmp_path: Path, policy: str, **options: Any) -> None:
        self.store = SQLiteStore(tmp_path / "a.db")
        self.effects = tmp_path / "fx.log"
        self.policy = parse_policy(policy)
        self.options = {"approval_wait": 0.05, "poll_interval": 0.01, **options}

    async def __aenter__(self) -> _Served:
        self._stack = AsyncExitStack()
        servers = await self._stack.enter_async_context(
            McpServers([server_config(self.effects)], self.store))
        await approve_pins(servers, self.store)
        self.gateway = Gateway(servers, store=self.store, policy=self.policy,
                               principal=PRINCIPAL, **self.options)
        self.url = await _serve_http(self._stack, self.gateway)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()
        await self.store.close()

    def mails(self) -> list[str]:
        return self.effects.read_text().splitlines() if self.effects.exists() else []


async def test_a_resend_from_a_new_connection_after_a_lost_reply_runs_once(
        tmp_path: Path) -> None:
    allow = '[[rules]]\ntool = "p.send_mail"\nverdict = "allow"\nreason = "mail is fine"\n'
    with anyio.fail_after(120):
        async with _Served(tmp_path, allow) as served:
            async with AsyncExitStack() as first:
                a = await _client(first, served.url)
                sent = await a.call_tool("p.send_mail", MAIL)
                assert not sent.is_error
            # the reply was lost: the client opens a new MCP session and re-sends the call
            async with AsyncExitStack() as second:
                b = await _client(second, served.url)
                again = await b.call_tool("p.send_mail", MAIL)
            assert served.mails() == ["mail to ana@example.org"]
            assert not again.is_error and "not run again" in _text(again)
            assert "sent to ana@example.org" in _text(again)  # the stored result


async def test_a_resend_that_asks_a_person_says_it_already_ran(tmp_path: Path) -> None:
    ask = '[[rules]]\ntool = "p.send_mail"\nverdict = "ask"\nreason = "a person decides"\n'
    with anyio.fail_after(120):
        async with _Served(tmp_path, ask) as served:
            async with AsyncExitStack() as first:
                a = await _client(first, served.url)
                waiting = await a.call_tool("p.send_mail", MAIL)
                match = WAITING.search(_text(waiting))
                assert match is not None
                await answers.answer(served.store, match.group(1), None, approved=True,
                                     approver="bob", via="cli")
                assert not (await a.call_tool("p.send_mail", MAIL)).is_error
            async with AsyncExitStack() as second:
                b = await _client(second, served.url)
                resent = await b.call_tool("p.send_mail", MAIL)
                assert resent.is_error and WAITING.search(_text(resent)) is not None
                (request,) = await served.store.list_approvals()
            assert served.mails() == ["mail to ana@example.org"]
            assert any("already ran" in w for w in request.warnings), request.warnings


async def test_a_reconnecting_client_naming_its_conversation_continues_it(
        tmp_path: Path) -> None:
    policy = ('[repeat_guard]\nmax_repeats = 2\n[[rules]]\ntool = "p.send_mail"\n'
              'verdict = "allow"\nreason = "mail is fine"\n')
    with anyio.fail_after(150):
        async with _Served(tmp_path, policy) as served:
            async with AsyncExitStack() as first:
                a = await _client(first, served.url)
                page = await a.call_tool("p.fetch_page", {"url": "https://example.org"})
                assert not page.is_error
                for _ in range(2):
                    looked = await a.call_tool("p.lookup", {"name": "ana"})
                    assert not looked.is_error
                handle = page.meta[CONVERSATION_META_KEY] if page.meta else None
                assert isinstance(handle, str) and looked.meta is not None
                assert looked.meta[CONVERSATION_META_KEY] == handle
            named = {CONVERSATION_META_KEY: handle}
            async with AsyncExitStack() as second:
                b = await _client(second, served.url)
                # the repeat guard remembers the two look-ups of the first connection …
                assert (await b.call_tool("p.lookup", {"name": "ana"}, meta=named)).is_error
                # … and the taint of the page read there: a mail now asks a person
                mail = await b.call_tool("p.send_mail", MAIL, meta=named)
                assert mail.is_error and WAITING.search(_text(mail)) is not None
                assert mail.meta is not None and mail.meta[CONVERSATION_META_KEY] == handle
            async with AsyncExitStack() as third:  # without the handle: a new conversation
                c = await _client(third, served.url)
                assert not (await c.call_tool("p.lookup", {"name": "ana"})).is_error
                mailed = await c.call_tool("p.send_mail", {**MAIL, "to": "eva@example.org"})
                assert not mailed.is_error, _text(mailed)
                fresh = mailed.meta[CONVERSATION_META_KEY] if mailed.meta else None
                assert fresh not in (None, handle)
            assert served.mails() == ["mail to eva@example.org"]
            # the named conversation's request was left for a person, not withdrawn
            (request,) = await served.store.list_approvals()
            assert request.tool_name == "p.send_mail"


FORGED = [
    "short", "x" * 129, "has space in it", "semi;colon;handle", "ünïcödé-handle", 12345678,
    {"nested": "object-handle"}, "line\nbreak-handle",
    "anf1.0123456789abcdef01234567.ffffffffffffffffffffffffffffffff",  # a forged signature
    "anf1.nonce-without-mac",
]


async def test_a_malformed_or_forged_handle_is_refused_and_nothing_runs(
        tmp_path: Path) -> None:
    allow = '[[rules]]\ntool = "p.send_mail"\nverdict = "allow"\nreason = "mail is fine"\n'
    with anyio.fail_after(120):
        async with _Served(tmp_path, allow) as served, AsyncExitStack() as stack:
            client = await _client(stack, served.url)
            for handle in FORGED:
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("p.send_mail", MAIL,
                                           meta={CONVERSATION_META_KEY: handle})
                assert "conversation handle" in caught.value.error.message, handle
                assert "\n" not in caught.value.error.message
            assert served.mails() == []
            assert not await served.store.list_sessions()
