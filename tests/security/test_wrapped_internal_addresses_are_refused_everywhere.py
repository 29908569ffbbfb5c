"""An internal address wrapped in IPv6 is refused wherever anfitrion connects out (issue #29).

Python calls ``2002:7f00:1::`` (6to4 of 127.0.0.1), ``64:ff9b::a9fe:a9fe`` (NAT64 of the
cloud metadata address 169.254.169.254) and ``fec0::1`` (site-local) global. An attacker who
read the code names such an address where a host reaches an address someone else chose: a
sandboxed MCP server's egress proxy, and the OAuth metadata a server points the client at. The
``http_fetch`` toolkit always looked inside the wrapping; the egress proxy and the OAuth
transport checked ``is_global`` alone and let these through. Now all use the one check of
:mod:`anfitrion._addresses`, and no other module asks ``is_global`` itself.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from anfitrion._addresses import address_is_public

WRAPPED_INTERNAL = [
    "2002:7f00:1::",           # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::",        # 6to4 of the metadata address
    "64:ff9b::a9fe:a9fe",      # NAT64 of the metadata address
    "64:ff9b::a00:1",          # NAT64 of 10.0.0.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "::ffff:169.254.169.254",  # IPv4-mapped
    "fec0::1",                 # site-local
]
PUBLIC = "93.184.216.34"

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("address", WRAPPED_INTERNAL)
def test_the_one_check_looks_inside_the_wrapping(address: str) -> None:
    assert not address_is_public(ipaddress.ip_address(address))


def test_a_public_address_passes() -> None:
    assert address_is_public(ipaddress.ip_address(PUBLIC))
    assert address_is_public(ipaddress.ip_address("2606:4700:4700::1111"))


@pytest.mark.parametrize("address", WRAPPED_INTERNAL)
async def test_the_sandbox_egress_proxy_refuses_a_wrapped_internal_literal(address: str) -> None:
    from anfitrion.mcp._egress import _resolve

    with pytest.raises(PermissionError, match="not a public address"):
        await _resolve(address, 80)


async def test_the_sandbox_egress_proxy_lets_a_public_literal_through() -> None:
    from anfitrion.mcp._egress import _resolve

    assert await _resolve(PUBLIC, 80) == [PUBLIC]


@pytest.mark.parametrize("address", WRAPPED_INTERNAL)
async def test_oauth_metadata_at_a_wrapped_internal_address_is_refused(address: str) -> None:
    pytest.importorskip("mcp", reason="the mcp extra")
    import httpx2

    from anfitrion.mcp._oauth import CredentialError, GuardedTransport

    guard = GuardedTransport("https://mcp.example/mcp", allow_internal=False)
    with pytest.raises(CredentialError, match="internal address"):
        await guard.check(httpx2.URL(f"https://[{address}]/.well-known/oauth-authorization-server"))


def test_no_module_but_the_one_check_asks_whether_an_address_is_global() -> None:
    src = Path(__file__).parents[2] / "src" / "anfitrion"
    asking = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                    if ".is_global" in p.read_text(encoding="utf-8"))
    assert asking == ["_addresses.py"]
