"""The tests' authorization server does what the other tests rely on (tests/auth/idp.py)."""

from __future__ import annotations

import jwt
import pytest
from idp import GATEWAY_CLIENT, SERVICE_CLIENT, Idp

RESOURCE = "http://127.0.0.1:9/mcp"


def claims(idp: Idp, token: str, audience: str = RESOURCE) -> dict[str, object]:
    return idp.claims(token, audience)


def test_users_get_their_own_signed_tokens_with_only_the_scopes_they_may_have(idp: Idp) -> None:
    alice = idp.user_token("alice", RESOURCE, "openid notes:read notes:write")
    bob = idp.user_token("bob", RESOURCE, "openid notes:read notes:write")
    a, b = claims(idp, alice["access_token"]), claims(idp, bob["access_token"])
    assert (a["sub"], b["sub"]) == ("alice", "bob")
    assert set(str(a["scope"]).split()) == {"notes:read", "notes:write"}
    assert set(str(b["scope"]).split()) == {"notes:read"}
    assert a["roles"] == ["admin", "support"] and b["roles"] == ["support"]
    assert a["client_id"] == "mcp-client"


def test_token_exchange_keeps_the_subject_and_narrows_audience_and_scopes(idp: Idp) -> None:
    alice = idp.user_token("alice", RESOURCE, "notes:read notes:write")["access_token"]
    upstream = "http://127.0.0.1:10/mcp"
    response = idp.exchange(alice, upstream, "notes:read")
    assert response.status_code == 200, response.text
    exchanged = claims(idp, response.json()["access_token"], audience=upstream)
    assert exchanged["sub"] == "alice" and exchanged["scope"] == "notes:read"
    assert exchanged["act"] == {"sub": "gateway"}
    # a scope the subject token did not carry is not granted
    bob = idp.user_token("bob", RESOURCE, "notes:read")["access_token"]
    widened = idp.exchange(bob, upstream, "notes:read notes:write").json()
    assert claims(idp, widened["access_token"], audience=upstream)["scope"] == "notes:read"
    # a forged subject token is refused; a client without the grant is refused
    assert idp.exchange(alice[:-4] + "AAAA", upstream).status_code == 400
    assert idp.exchange(alice, upstream, client=SERVICE_CLIENT).status_code in (400, 401)


def test_introspection_and_revocation_of_opaque_tokens(idp: Idp) -> None:
    resource = "http://127.0.0.1:9/opaque/mcp"
    token = idp.user_token("bob", resource, "notes:read")["access_token"]
    assert token.count(".") == 0  # opaque
    found = idp.introspect(token)
    assert found["active"] is True and found["sub"] == "bob" and found["aud"] == resource
    idp.revoke(token)
    assert idp.introspect(token) == {"active": False}


def test_client_credentials_and_key_rotation(idp: Idp) -> None:
    token = idp.client_token(GATEWAY_CLIENT, RESOURCE, "tools:read")["access_token"]
    assert claims(idp, token)["sub"] == "gateway"
    old_kid = jwt.get_unverified_header(token)["kid"]
    new_kid = idp.rotate()
    rotated = idp.client_token(GATEWAY_CLIENT, RESOURCE, "tools:read")["access_token"]
    assert jwt.get_unverified_header(rotated)["kid"] == new_kid != old_kid
    with pytest.raises(KeyError):
        claims(idp, rotated)  # the keys known at start do not have the new one
    assert claims(idp, token)["sub"] == "gateway"  # the old key still verifies its tokens
