"""The tests' authorization server: ``oidc-provider`` (npm, a certified OpenID Provider) run by
Node 22 from ``tests/auth/idp/provider.mjs`` on a free 127.0.0.1 port.

``tests/auth/install_idp.sh`` installs it (``make install-idp``); without it the tests that need
it skip, unless ``ANFITRION_REQUIRE_IDP=1`` (CI) makes a missing server a failure.

Reuse from any test folder::

    sys.path.insert(0, str(Path(__file__).parents[1] / "auth"))
    from idp import Idp, idp_fixture

    idp = idp_fixture()          # a module- or session-scoped pytest fixture named ``idp``

What :class:`Idp` offers: the issuer and its public keys; user tokens for ``alice`` and ``bob``
through the real authorization-code flow with PKCE (the server logs in the user named by
``login_hint`` and grants what that user may have); client-credentials tokens; token
exchange (RFC 8693); revocation; introspection; and a signing-key rotation.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

HERE = Path(__file__).parent
PROVIDER = HERE / "idp" / "provider.mjs"
INSTALL = HERE / "install_idp.sh"
REQUIRE = "ANFITRION_REQUIRE_IDP"
START_TIMEOUT = 30.0
"""Seconds Node may take to print the issuer (about 0.3 s here)."""

PUBLIC_CLIENT = "mcp-client"
REDIRECT_URI = "http://127.0.0.1/callback"
GATEWAY_CLIENT = ("gateway", "gateway-secret-0123456789abcdef")
SERVICE_CLIENT = ("service", "service-secret-0123456789abcdef")
USERS = {"alice": {"tools:read", "tools:write", "notes:read", "notes:write"},
         "bob": {"tools:read", "notes:read"}}
"""The test users and the scopes each may be granted (tests/auth/idp/provider.mjs)."""
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


def default_home() -> Path:
    return Path(os.environ.get("ANFITRION_IDP_HOME")
                or Path.home() / ".cache" / "anfitrion" / "idp")


def installed() -> tuple[str, str] | None:
    """The node binary and the node_modules holding oidc-provider, or None."""
    current = default_home() / "current"
    if not current.is_file():
        return None
    lines = current.read_text().split("\n")
    if len(lines) < 2 or not Path(lines[0]).is_file() or not Path(lines[1]).is_dir():
        return None
    return lines[0], lines[1]


@dataclass
class Idp:
    """A running oidc-provider."""

    issuer: str
    jwks: dict[str, Any]
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/token"

    @property
    def jwks_uri(self) -> str:
        return f"{self.issuer}/jwks"

    @property
    def introspection_endpoint(self) -> str:
        return f"{self.issuer}/token/introspection"

    def _client(self) -> httpx.Client:
        return httpx.Client(timeout=10.0, follow_redirects=False)

    def user_token(self, user: str, resource: str, scopes: str) -> dict[str, Any]:
        """A token response for *user* through the authorization-code flow with PKCE (S256).

        The server grants only the scopes that user may have: ``bob`` asking for
        ``notes:write`` gets a token without it."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(
            hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        state = secrets.token_urlsafe(16)
        query = {"client_id": PUBLIC_CLIENT, "response_type": "code",
                 "redirect_uri": REDIRECT_URI, "scope": scopes, "resource": resource,
                 "code_challenge": challenge, "code_challenge_method": "S256",
                 "state": state, "login_hint": user, "prompt": "consent"}
        with self._client() as http:
            url = f"{self.issuer}/auth?{urlencode(query)}"
            for _ in range(10):  # auth → interaction (login) → auth → interaction (consent) → …
                response = http.get(url)
                location = response.headers.get("location")
                if response.status_code not in (302, 303) or location is None:
                    raise AssertionError(f"authorization stopped at {response.status_code}: "
                                         f"{response.text[:300]}")
                url = location if location.startswith("http") else self.issuer + location
                if url.startswith(REDIRECT_URI):
                    break
            else:
                raise AssertionError("the authorization flow did not reach the redirect URI")
            params = parse_qs(urlsplit(url).query)
            assert params.get("state") == [state], params
            assert "code" in params, params
            response = http.post(self.token_endpoint, data={
                "grant_type": "authorization_code", "code": params["code"][0],
                "redirect_uri": REDIRECT_URI, "client_id": PUBLIC_CLIENT,
                "code_verifier": verifier, "resource": resource})
            response.raise_for_status()
            token: dict[str, Any] = response.json()
            return token

    def client_token(self, client: tuple[str, str], resource: str,
                     scopes: str) -> dict[str, Any]:
        """A client-credentials token response."""
        with self._client() as http:
            response = http.post(self.token_endpoint, auth=client, data={
                "grant_type": "client_credentials", "resource": resource, "scope": scopes})
            response.raise_for_status()
            token: dict[str, Any] = response.json()
            return token

    def exchange(self, subject_token: str, resource: str, scopes: str | None = None,
                 client: tuple[str, str] = GATEWAY_CLIENT) -> httpx.Response:
        """An RFC 8693 token-exchange request, as the gateway client."""
        data = {"grant_type": TOKEN_EXCHANGE, "subject_token": subject_token,
                "subject_token_type": ACCESS_TOKEN_TYPE, "resource": resource}
        if scopes is not None:
            data["scope"] = scopes
        with self._client() as http:
            return http.post(self.token_endpoint, auth=client, data=data)

    def revoke(self, token: str, client: tuple[str, str] | None = None) -> None:
        """Revoke a token as the client it was issued to (the public client by default)."""
        with self._client() as http:
            if client is None:
                response = http.post(f"{self.issuer}/token/revocation",
                                     data={"token": token, "client_id": PUBLIC_CLIENT})
            else:
                response = http.post(f"{self.issuer}/token/revocation", auth=client,
                                     data={"token": token})
            response.raise_for_status()

    def introspect(self, token: str,
                   client: tuple[str, str] = GATEWAY_CLIENT) -> dict[str, Any]:
        with self._client() as http:
            response = http.post(self.introspection_endpoint, auth=client,
                                 data={"token": token})
            response.raise_for_status()
            found: dict[str, Any] = response.json()
            return found

    def claims(self, token: str, audience: str) -> dict[str, Any]:
        """A JWT of this server checked with its keys (a ``Bearer `` prefix is dropped)."""
        import jwt

        token = token.removeprefix("Bearer ")
        key = jwt.PyJWKSet.from_dict(self.jwks)[jwt.get_unverified_header(token)["kid"]]
        found: dict[str, Any] = jwt.decode(token, key, algorithms=["RS256"], audience=audience,
                                           issuer=self.issuer)
        return found

    def register(self, redirect_uri: str) -> tuple[str, str]:
        """A confidential web client registered dynamically (RFC 7591) for the code flow
        with *redirect_uri*: its id and secret (an OpenID Connect relying party)."""
        with self._client() as http:
            response = http.post(f"{self.issuer}/reg", json={
                "redirect_uris": [redirect_uri], "grant_types": ["authorization_code"],
                "response_types": ["code"], "token_endpoint_auth_method": "client_secret_basic",
                "scope": "openid profile roles email"})
            response.raise_for_status()
            found = response.json()
            return str(found["client_id"]), str(found["client_secret"])

    def rotate(self) -> str:
        """A new signing key becomes current (the old one stays published); its ``kid``."""
        with self._client() as http:
            response = http.post(f"{self.issuer}/test/rotate")
            response.raise_for_status()
            kid: str = response.json()["kid"]
            return kid


def start() -> Idp:
    """Start oidc-provider on a free loopback port; waits (bounded) for its issuer line."""
    found = installed()
    if found is None:
        raise FileNotFoundError(f"oidc-provider is not installed: run {INSTALL}")
    node, modules = found
    env = {"PATH": os.environ.get("PATH", ""), "ANFITRION_IDP_MODULES": modules,
           "NODE_ENV": "test"}
    process = subprocess.Popen([node, str(PROVIDER)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()  # type: ignore[union-attr]
                                                          ), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    if not line or not line[0].strip():
        process.kill()
        process.wait(10)
        raise RuntimeError(f"oidc-provider did not start within {START_TIMEOUT:g} s")
    ready = json.loads(line[0])
    return Idp(issuer=ready["issuer"], jwks=ready["jwks"], process=process)


def stop(idp: Idp) -> None:
    if idp.process.stdin is not None:
        idp.process.stdin.close()  # it exits when its stdin ends
    try:
        idp.process.wait(10)
    except subprocess.TimeoutExpired:
        idp.process.kill()
        idp.process.wait(10)
    if idp.process.stdout is not None:
        idp.process.stdout.close()


def require_idp() -> None:
    """Skip (or fail, with ``ANFITRION_REQUIRE_IDP=1``) without an installed server."""
    if installed() is None:
        why = f"oidc-provider is not installed: run {INSTALL} (make install-idp)"
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 and {why}")
        pytest.skip(why)


def idp_fixture(scope: str = "module") -> Any:
    """A pytest fixture named ``idp``: a running server for the module (killed at the end)."""
    @pytest.fixture(scope=scope, name="idp")  # type: ignore[misc]
    def _idp() -> Iterator[Idp]:
        require_idp()
        server = start()
        try:
            yield server
        finally:
            stop(server)
    return _idp
