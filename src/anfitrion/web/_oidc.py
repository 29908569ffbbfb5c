"""Signing reviewers in with OpenID Connect (``inbox.auth``): the authorization-code flow with
PKCE (S256), a ``nonce`` and a ``state``, at the same issuer the gateway trusts.

- ``POST /login/oidc`` (a form: the guard requires this inbox's ``Origin``) starts a flow and
  sends the browser on to the provider's authorization endpoint (a page that goes there by
  itself: a redirect after a form would break the pages' CSP ``form-action``), with a one-time
  cookie that
  binds the flow to this browser (``SameSite=Lax``, only sent back to ``/login/callback``);
- ``GET /login/callback`` finishes it: the flow is found by its ``state`` and finished only
  in the browser that started it, once, within 10 minutes; the code is redeemed at the token
  endpoint with the PKCE verifier; the ID token is checked (signature with the issuer's key of
  its ``kid`` and an allowed public-key algorithm, ``iss`` exact, ``aud`` this client, ``azp``,
  ``exp``/``iat``, and the flow's ``nonce``) — and only then is a session opened, whose
  reviewer is the token's ``principalClaim``. The browser then goes to ``/`` and nowhere else.

Everything here that touches the network or a token reuses the gateway's resource-server
parts (:mod:`anfitrion.mcp._gateway_auth`: the bounded, SSRF-guarded :class:`Fetcher`, the
issuer's :class:`JwksCache`) and PyJWT, so it needs the ``mcp`` extra; nothing parses a token
by hand. Each refusal is audited (``inbox.sign_in_refused``, never a code or a token), and
each sign-in (``inbox.signed_in``: issuer, subject, name).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import jwt
from mcp.client.auth import PKCEParameters

from .._approvals import Reviewer, make_visible
from .._redaction import redact
from ..exceptions import InputError
from ..mcp import SignInSettings
from ..mcp._gateway_auth import AuthRefused, Fetcher, JwksCache, claim_at, claim_words

__all__ = ["FLOW_SECONDS", "MAX_FLOWS", "REFUSED_AUDIT", "SIGNED_IN_AUDIT", "OidcSignIn",
           "SignInRefused"]

FLOW_SECONDS = 600.0
"""How long a started sign-in waits for the provider's redirect."""
MAX_FLOWS = 1024
"""Sign-ins pending at once: a flood of starts cannot grow memory (the oldest go first)."""
MAX_TOKEN_CHARS = 16 * 1024
REFUSED_AUDIT = "inbox.sign_in_refused"
SIGNED_IN_AUDIT = "inbox.signed_in"
_TEXT = 200

OnEvent = Callable[[str, Mapping[str, Any]], Awaitable[None]]


class SignInRefused(InputError):
    """A sign-in that did not complete: a reason safe to show (never a code or a token), the
    HTTP status, and whether the flow belongs to another browser (its cookie is kept then)."""

    def __init__(self, reason: str, status: int = 400, *, foreign: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.foreign = foreign


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class _Flow:
    """One started sign-in: found by the digest of its ``state``, bound to the digest of its
    browser's cookie; its ``nonce`` and PKCE verifier never leave this process but to the
    provider."""

    browser: bytes
    nonce: str
    verifier: str
    expires: float


class OidcSignIn:
    """The sign-in flows of one inbox at one OpenID Provider.

    Args:
        settings: ``inbox.auth``.
        redirect_uri: the inbox's ``<origin>/login/callback`` (registered at the provider).
        on_event: awaited with each audit record (kind, data).
        transport: an httpx transport for the fetches (tests).
    """

    def __init__(self, settings: SignInSettings, redirect_uri: str, *,
                 on_event: OnEvent | None = None, transport: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.redirect_uri = redirect_uri
        self.on_event = on_event
        self.fetcher = Fetcher(timeout=settings.fetch_timeout,
                               allow_internal=settings.allow_internal, transport=transport)
        self.keys = JwksCache(self._jwks_uri, self.fetcher,
                              max_age=settings.jwks_cache_seconds)
        self._clock = clock
        self._metadata: dict[str, Any] | None = None
        self._flows: dict[bytes, _Flow] = {}

    # -- the provider ----------------------------------------------------------------------

    async def metadata(self) -> dict[str, Any]:
        """The provider's OpenID discovery document, its ``issuer`` checked exactly."""
        if self._metadata is None:
            issuer = self.settings.issuer
            found = await self.fetcher.get_json(
                f"{issuer.rstrip('/')}/.well-known/openid-configuration")
            if found.get("issuer") != issuer:
                raise AuthRefused("the provider's metadata names another issuer", status=503,
                                  error="temporarily_unavailable")
            for name in ("authorization_endpoint", "token_endpoint"):
                url = found.get(name)
                if (not isinstance(url, str) or urlsplit(url).scheme not in ("https", "http")
                        or "#" in url or not urlsplit(url).hostname):
                    raise AuthRefused(f"the provider's metadata has no usable {name}",
                                      status=503, error="temporarily_unavailable")
            self._metadata = found
        return self._metadata

    async def _jwks_uri(self) -> str:
        if self.settings.jwks_uri is not None:
            return self.settings.jwks_uri
        uri = (await self.metadata()).get("jwks_uri")
        if not isinstance(uri, str):
            raise AuthRefused("the provider's metadata has no jwks_uri", status=503,
                              error="temporarily_unavailable")
        return uri

    # -- the flow --------------------------------------------------------------------------

    def _prune(self) -> None:
        now = self._clock()
        for key in [k for k, f in self._flows.items() if f.expires <= now]:
            del self._flows[key]
        while len(self._flows) >= MAX_FLOWS:
            del self._flows[next(iter(self._flows))]

    async def start(self) -> tuple[str, str]:
        """A new flow: the provider's authorization URL to send the browser to, and the value
        of the cookie that binds the flow to that browser.

        Raises:
            SignInRefused: the provider's metadata cannot be had (503).
        """
        metadata = await self._provider()
        self._prune()
        state, nonce, browser = (secrets.token_urlsafe(32) for _ in range(3))
        pkce = PKCEParameters.generate()
        self._flows[_digest(state)] = _Flow(_digest(browser), nonce, pkce.code_verifier,
                                            self._clock() + FLOW_SECONDS)
        query = urlencode({"response_type": "code", "client_id": self.settings.client_id,
                           "redirect_uri": self.redirect_uri,
                           "scope": " ".join(self.settings.scopes), "state": state,
                           "nonce": nonce, "code_challenge": pkce.code_challenge,
                           "code_challenge_method": "S256"})
        endpoint = str(metadata["authorization_endpoint"])
        return f"{endpoint}{'&' if urlsplit(endpoint).query else '?'}{query}", browser

    async def finish(self, query: Mapping[str, str], browser: str | None) -> Reviewer:
        """The reviewer the provider vouches for, from its redirect back (*query*) in the
        browser holding the flow's cookie (*browser*).

        Raises:
            SignInRefused: anything wrong; the reason is also audited.
        """
        try:
            reviewer = await self._finish(query, browser)
        except SignInRefused as exc:
            await self._event(REFUSED_AUDIT, {"reason": exc.reason, "status": exc.status})
            raise
        await self._event(SIGNED_IN_AUDIT, {
            "issuer": reviewer.issuer, "subject": reviewer.subject,
            "name": redact(reviewer.display_name, _TEXT), "reviewer": reviewer.name,
            "roles": sorted(reviewer.roles)})
        return reviewer

    async def _finish(self, query: Mapping[str, str], browser: str | None) -> Reviewer:
        state = query.get("state", "")
        flow = self._flows.get(_digest(state)) if state else None
        if flow is None:
            raise SignInRefused("this sign-in is unknown, was used already or has expired: "
                                "sign in again")
        if browser is None or not hmac.compare_digest(_digest(browser), flow.browser):
            # another browser's flow (a link someone was sent): it stays for its owner
            raise SignInRefused("this sign-in was started in another browser", 403,
                                foreign=True)
        del self._flows[_digest(state)]  # single use, whatever happens next
        if flow.expires <= self._clock():
            raise SignInRefused("this sign-in has expired: sign in again")
        metadata = await self._provider()
        issuer = query.get("iss")
        if issuer is not None and issuer != self.settings.issuer:  # RFC 9207: a mix-up
            raise SignInRefused("the answer came from another issuer")
        if issuer is None and metadata.get("authorization_response_iss_parameter_supported"):
            raise SignInRefused("the answer does not name its issuer")
        if "error" in query:
            error = make_visible(query["error"][:60])
            raise SignInRefused(f"the provider did not sign you in ({error})", 403)
        code = query.get("code")
        if not code:
            raise SignInRefused("the answer carries no authorization code")
        raw = await self._redeem(metadata, code, flow)
        claims = await self._verify(raw, flow.nonce)
        return self._reviewer(claims)

    async def _provider(self) -> dict[str, Any]:
        try:
            return await self.metadata()
        except AuthRefused as exc:
            raise SignInRefused(exc.reason, 503) from None

    async def _redeem(self, metadata: Mapping[str, Any], code: str, flow: _Flow) -> str:
        settings = self.settings
        data = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": self.redirect_uri, "code_verifier": flow.verifier}
        auth = None
        if settings.client_secret is None:
            data["client_id"] = settings.client_id
        else:
            auth = (settings.client_id, settings.client_secret)
        try:
            status, body = await self.fetcher.request("POST", str(metadata["token_endpoint"]),
                                                      data=data, auth=auth)
        except AuthRefused as exc:
            raise SignInRefused(exc.reason, 503) from None
        if status != 200 or not isinstance(body, dict):
            error = body.get("error") if isinstance(body, dict) else None
            shown = make_visible(error[:60]) if isinstance(error, str) else f"HTTP {status}"
            raise SignInRefused(f"the provider refused the authorization code ({shown})", 403)
        raw = body.get("id_token")
        if not isinstance(raw, str) or not raw or len(raw) > MAX_TOKEN_CHARS:
            raise SignInRefused("the provider's answer has no usable ID token", 403)
        return raw

    async def _verify(self, raw: str, nonce: str) -> dict[str, Any]:
        """The ID token's claims (OpenID Connect Core §3.1.3.7), or :class:`SignInRefused`."""
        settings = self.settings
        try:
            header = jwt.get_unverified_header(raw)
        except jwt.PyJWTError:
            raise SignInRefused("the ID token is not a JWT", 403) from None
        alg, kid = header.get("alg"), header.get("kid", "")
        if not isinstance(alg, str) or alg not in settings.algorithms:
            raise SignInRefused(f"the ID token's algorithm {str(alg)[:20]!r} is not accepted",
                                403)
        if not isinstance(kid, str):
            raise SignInRefused("the ID token's key id is not a string", 403)
        try:
            key = await self.keys.key(kid)
        except AuthRefused as exc:
            raise SignInRefused(exc.reason, 503 if exc.status == 503 else 403) from None
        if not key.verifies(alg):
            raise SignInRefused("the ID token's algorithm does not match its key", 403)
        try:
            claims: dict[str, Any] = jwt.decode(
                raw, key.jwk.key, algorithms=[alg], audience=settings.client_id,
                issuer=settings.issuer, leeway=settings.leeway,
                options={"require": ["exp", "iat", "iss", "aud", "sub"],
                         "verify_signature": True})
        except jwt.ExpiredSignatureError:
            raise SignInRefused("the ID token has expired", 403) from None
        except jwt.InvalidAudienceError:
            raise SignInRefused("the ID token was issued for another client", 403) from None
        except jwt.InvalidIssuerError:
            raise SignInRefused("the ID token was issued by another issuer", 403) from None
        except jwt.MissingRequiredClaimError as exc:
            raise SignInRefused(f"the ID token lacks the {exc.claim!r} claim", 403) from None
        except jwt.PyJWTError:
            raise SignInRefused("the ID token's signature or claims are invalid", 403) from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        azp = claims.get("azp")
        if (len(audiences) > 1 or azp is not None) and azp != settings.client_id:
            raise SignInRefused("the ID token was issued for another client", 403)
        given = claims.get("nonce")
        if not isinstance(given, str) or not hmac.compare_digest(
                given.encode("utf-8", "surrogatepass"), nonce.encode()):
            raise SignInRefused("the ID token's nonce is not this sign-in's", 403)
        return claims

    def _reviewer(self, claims: Mapping[str, Any]) -> Reviewer:
        settings = self.settings
        name = claim_at(claims, settings.principal_claim)
        if (not isinstance(name, str) or not name or len(name) > _TEXT
                or not name.isprintable() or any(c.isspace() for c in name)):
            raise SignInRefused(f"the ID token has no usable {settings.principal_claim!r} "
                                "claim to name you by", 403)
        shown = claim_at(claims, settings.name_claim)
        display = shown[:_TEXT] if isinstance(shown, str) and shown.isprintable() else ""
        roles = claim_words(claim_at(claims, settings.roles_claim)) if settings.roles_claim else (
            frozenset())
        return Reviewer(name, roles, issuer=str(claims["iss"])[:_TEXT],
                        subject=str(claims["sub"])[:_TEXT], display_name=display)

    async def _event(self, kind: str, data: Mapping[str, Any]) -> None:
        if self.on_event is not None:
            await self.on_event(kind, data)
