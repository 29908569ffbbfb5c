"""A gateway conversation: the durable anfitrion session of a client, apart from its connection.

A client of the gateway is identified by the authenticated principal plus a *conversation
handle*, never by its transport session (``Mcp-Session-Id``, a stdio pipe): a client that
reconnects and names its handle continues its session — its taint, budgets, repeat guard and
effect keys — on any gateway process sharing the store.

The handle is either the client's own (a string it sends in a request's ``_meta`` under
:data:`CONVERSATION_META_KEY`) or one the gateway minted and signed for the connection and
returned in each ``tools/call`` result's ``_meta`` under the same key. The session id is an
HMAC of (principal, handle) under the gateway's key: another principal naming the same handle
reaches another session, and nobody derives a session id from a handle without the key. A
handle the gateway minted (``anf1.<random>.<mac>``) is checked against the principal it was
minted for: a copied handle presented by another principal, or one altered, is refused.

:class:`Conversations` is the one place this mapping lives.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from typing import Any

from .._home import environment
from ..exceptions import UserError
from ..store import RecordStore

__all__ = ["CONVERSATION_KEY_ENV", "CONVERSATION_META_KEY", "Conversations", "HandleError"]

CONVERSATION_META_KEY = "io.anfitrion/conversation"
"""The ``_meta`` key of a request (the client's handle) and of a result (the handle in use)."""

CONVERSATION_KEY_ENV = "ANFITRION_GATEWAY_KEY"
"""The environment variable holding the gateway's signing key (at least 32 characters)."""

_RECORDS = ("gateway", "conversation-key")
_MINTED = "anf1."
_HANDLE = re.compile(r"[A-Za-z0-9._:\-]{8,128}")
_MAC_CHARS = 32


class HandleError(UserError):
    """A conversation handle that is malformed, forged or another principal's."""


class Conversations:
    """Mints, checks and maps conversation handles to session ids, under one key.

    Args:
        key: the signing key (bytes, at least 32).

    Raises:
        UserError: a key shorter than 32 bytes.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise UserError("the gateway's conversation key must have at least 32 bytes")
        self._key = key

    @classmethod
    async def load(cls, store: RecordStore, key: str | bytes | None = None) -> Conversations:
        """The key given, else ``$ANFITRION_GATEWAY_KEY``, else the one kept in the store
        (made on first use, so every gateway process on the store shares it)."""
        given = key if key is not None else environment().get(CONVERSATION_KEY_ENV)
        if given:
            return cls(given.encode() if isinstance(given, str) else given)
        stored = await store.get_record(*_RECORDS)
        if stored is None:  # made once: of processes starting together, one key wins for all
            await store.create_record(*_RECORDS, {"key": secrets.token_hex(32)})
            stored = await store.get_record(*_RECORDS)
        value = stored.get("key") if stored is not None else None
        if not isinstance(value, str) or len(value) < 32:
            raise UserError("the gateway's conversation key in the store is unreadable: "
                            f"set {CONVERSATION_KEY_ENV} or remove the record")
        return cls(value.encode())

    def _mac(self, *parts: str) -> str:
        message = "\0".join(parts).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def mint(self, principal_id: str) -> str:
        """A new handle for *principal_id*, signed."""
        nonce = secrets.token_hex(12)
        return f"{_MINTED}{nonce}.{self._mac('mint', principal_id, nonce)[:_MAC_CHARS]}"

    def check(self, principal_id: str, handle: object) -> str:
        """*handle* if *principal_id* may use it.

        Raises:
            HandleError: not a string of 8–128 letters, digits, ``._:-``; or a minted handle
                whose signature does not fit (altered, or minted for another principal).
        """
        if not isinstance(handle, str) or not _HANDLE.fullmatch(handle):
            raise HandleError(f"the conversation handle in _meta[{CONVERSATION_META_KEY!r}] must "
                              "be 8-128 letters, digits, '.', '_', ':' or '-'")
        if handle.startswith(_MINTED):
            nonce, _, mac = handle[len(_MINTED):].partition(".")
            expected = self._mac("mint", principal_id, nonce)[:_MAC_CHARS]
            if not hmac.compare_digest(mac.encode(), expected.encode()):
                raise HandleError("the conversation handle was not minted by this gateway for "
                                  "this principal (altered, or another principal's)")
        return handle

    def session_id(self, principal_id: str, handle: str) -> str:
        """The anfitrion session of (*principal_id*, *handle*): the same on every process
        holding the key, another for any other principal."""
        return f"gateway-{self._mac('session', principal_id, handle)[:32]}"

    def handle_in(self, principal_id: str, meta: Mapping[str, Any] | None) -> str | None:
        """The checked handle a request's ``_meta`` names, or ``None``.

        Raises:
            HandleError: as :meth:`check`.
        """
        if not meta or CONVERSATION_META_KEY not in meta:
            return None
        return self.check(principal_id, meta[CONVERSATION_META_KEY])
