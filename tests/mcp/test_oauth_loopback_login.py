"""``anfitrion auth login``'s loopback redirect: one request to the redirect path on 127.0.0.1
ends the wait; other paths get a 404 and the wait goes on; an error from the authorization
server is a clear refusal; no answer within the timeout is one too."""

from __future__ import annotations

import socket

import anyio
import pytest

pytest.importorskip("mcp")
import httpx2

from anfitrion.mcp._oauth import CredentialError
from anfitrion.mcp._oauth_login import LoopbackAuthorizer

pytestmark = pytest.mark.anyio


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _login(query: str, *, before: str | None = None) -> object:
    port = _free_port()
    printed: list[str] = []
    authorizer = LoopbackAuthorizer(f"http://127.0.0.1:{port}/callback", no_browser=True,
                                    timeout=30, echo=printed.append)
    await authorizer.redirect("https://as.example/authorize?state=s")
    assert "https://as.example/authorize?state=s" in printed[0]
    async with anyio.create_task_group() as tg, httpx2.AsyncClient() as client:
        async def visit() -> None:
            if before is not None:
                assert (await client.get(f"http://127.0.0.1:{port}{before}")).status_code == 404
            await client.get(f"http://127.0.0.1:{port}/callback?{query}")

        tg.start_soon(visit)
        try:
            return await authorizer.callback()
        except CredentialError as exc:
            return exc


async def test_the_redirect_with_a_code_is_the_answer() -> None:
    result = await _login("code=abc&state=s1&iss=https%3A%2F%2Fas.example",
                          before="/favicon.ico")
    assert (result.code, result.state, result.iss) == (  # type: ignore[attr-defined]
        "abc", "s1", "https://as.example")


@pytest.mark.parametrize(("query", "message"), [
    ("error=access_denied&state=s", "refused: access_denied"),
    ("error=%0Aforged%20line&state=s", "refused: forgedline"),
    ("state=s", "carries no code"),
])
async def test_an_error_or_a_missing_code_is_a_clear_refusal(query: str, message: str) -> None:
    result = await _login(query)
    assert isinstance(result, CredentialError)
    assert message in str(result)


async def test_no_answer_within_the_timeout_is_a_refusal() -> None:
    authorizer = LoopbackAuthorizer(f"http://127.0.0.1:{_free_port()}/cb", no_browser=True,
                                    timeout=1, echo=lambda _: None)
    await authorizer.redirect("https://as.example/authorize")
    with pytest.raises(CredentialError, match="no answer"):
        await authorizer.callback()


def test_only_a_loopback_redirect_is_accepted() -> None:
    for uri in ("https://127.0.0.1/cb", "http://evil.example/cb", "http://0.0.0.0:1/cb"):
        with pytest.raises(CredentialError, match="redirect URI"):
            LoopbackAuthorizer(uri)
