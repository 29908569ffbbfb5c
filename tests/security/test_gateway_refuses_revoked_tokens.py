"""With introspection (RFC 7662) the gateway asks the authorization server about every token:
a token revoked there stops working at the gateway at once — a replay after revocation or
logout is refused, with a clear 401 — and a token of another audience is refused too.

The authorization server is the tests' real one (oidc-provider, ``tests/auth/idp.py``), with
opaque access tokens (a resource whose URI holds ``opaque``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")
sys.path.insert(0, str(Path(__file__).parents[1] / "auth"))
from idp import GATEWAY_CLIENT, Idp, idp_fixture

from anfitrion.mcp._gateway_auth import AuthRefused, OAuthResource
from anfitrion.mcp._oauth_settings import IntrospectionSettings, OAuthSettings

pytestmark = pytest.mark.anyio

idp = idp_fixture("module")
RESOURCE = "http://127.0.0.1:8765/opaque/mcp"


def resource_server(idp: Idp, secret: str = GATEWAY_CLIENT[1]) -> OAuthResource:
    return OAuthResource(OAuthSettings(
        issuer=idp.issuer, resource=RESOURCE, allow_internal=True, roles_claim="roles",
        introspection=IntrospectionSettings(idp.introspection_endpoint, GATEWAY_CLIENT[0],
                                            secret)), RESOURCE)


async def test_a_revoked_token_is_refused_at_once(idp: Idp) -> None:
    oauth = resource_server(idp)
    token = idp.user_token("bob", RESOURCE, "tools:read")["access_token"]
    user = await oauth.authenticate({"authorization": f"Bearer {token}"})
    assert user.access_token.subject == "bob" and user.scopes == ["tools:read"]
    idp.revoke(token)
    for _ in range(2):  # and stays refused: nothing is cached
        with pytest.raises(AuthRefused) as refused:
            await oauth.authenticate({"authorization": f"Bearer {token}"})
        assert refused.value.status == 401 and "not active" in refused.value.reason


async def test_introspection_checks_the_audience_and_its_own_credentials(idp: Idp) -> None:
    oauth = resource_server(idp)
    other = idp.user_token("alice", "http://127.0.0.1:9/opaque/other", "tools:read")
    with pytest.raises(AuthRefused) as refused:
        await oauth.authenticate({"authorization": f"Bearer {other['access_token']}"})
    assert "another audience" in refused.value.reason
    token = idp.user_token("alice", RESOURCE, "tools:read")["access_token"]
    with pytest.raises(AuthRefused) as refused:  # the gateway's own secret is wrong
        await resource_server(idp, "wrong").authenticate({"authorization": f"Bearer {token}"})
    assert refused.value.status == 503 and token not in refused.value.reason
    with pytest.raises(AuthRefused):  # a made-up token
        await oauth.authenticate({"authorization": "Bearer " + "A" * 43})
