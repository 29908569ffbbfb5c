"""``/healthz`` and ``/readyz`` for a load balancer: no token needed, nothing else served
without one, and ``/readyz`` says 503 with one line when the store does not answer."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")

from doors import PRINCIPAL, _serve_http, approve_pins, server_config

from anfitrion.exceptions import StoreError
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers
from anfitrion.store._sqlite import SQLiteStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]


async def test_health_and_readiness(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    with anyio.fail_after(120):
        async with McpServers([server_config(tmp_path / "fx.log")], store) as servers:
            await approve_pins(servers, store)
            gateway = Gateway(servers, store=store, principal=PRINCIPAL)
            async with AsyncExitStack() as stack:
                url = await _serve_http(stack, gateway)
                base = url.removesuffix("/mcp")
                async with httpx2.AsyncClient(timeout=30) as http:
                    assert (await http.get(f"{base}/healthz")).status_code == 200
                    ready = await http.get(f"{base}/readyz")
                    assert (ready.status_code, ready.text) == (200, "ready\n")
                    # anything else still needs the token
                    for path in ("/mcp", "/healthz/x", "/readyzz"):
                        assert (await http.get(f"{base}{path}")).status_code in (401, 421)
                    assert (await http.post(f"{base}/healthz", content=b"{}")).status_code \
                        in (401, 421)
                    async def broken(namespace: str, key: str) -> None:
                        raise StoreError("database is locked")

                    store.get_record = broken  # type: ignore[method-assign]  # the store fails
                    gone = await http.get(f"{base}/readyz")
                    assert gone.status_code == 503 and gone.text.startswith("not ready: ")
                    assert gone.text.count("\n") == 1
                    assert (await http.get(f"{base}/healthz")).status_code == 200
    await store.close()
