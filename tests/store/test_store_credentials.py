"""The credential role (OAuth tokens and client registrations, sealed by the caller) on every
backend: one entry per (principal, resource, issuer, kind), newest first, deleted by match."""

from __future__ import annotations

import pytest

from anfitrion.store import CredentialEntry, CredentialStore, Store

pytestmark = pytest.mark.anyio


def _entry(principal: str, issuer: str, at: float, kind: str = "tokens",
           sealed: str = "c2VhbGVk") -> CredentialEntry:
    return CredentialEntry(principal, issuer, "https://docs.example/mcp", kind, "k1", sealed,
                           {"scope": "read", "expires_at": at + 60}, at)


async def test_credentials_are_kept_per_principal_resource_issuer_and_kind(store: Store) -> None:
    assert isinstance(store, CredentialStore)
    await store.put_credential(_entry("alice", "https://as1.example", 1.0))
    await store.put_credential(_entry("alice", "https://as2.example", 2.0))
    await store.put_credential(_entry("alice", "https://as1.example", 3.0, sealed="bmV3"))
    await store.put_credential(_entry("alice", "https://as1.example", 4.0, kind="client"))
    await store.put_credential(_entry("bob", "https://as1.example", 5.0))

    found = await store.get_credentials("alice", "https://docs.example/mcp", "tokens")
    assert [(e.issuer, e.sealed, e.updated_at) for e in found] == [
        ("https://as1.example", "bmV3", 3.0), ("https://as2.example", "c2VhbGVk", 2.0)]
    assert found[0].meta == {"scope": "read", "expires_at": 63.0}
    assert await store.get_credentials("carol", "https://docs.example/mcp", "tokens") == []
    assert len(await store.list_credentials()) == 4
    assert {e.principal for e in await store.list_credentials("bob")} == {"bob"}

    assert await store.delete_credentials("alice", "https://docs.example/mcp",
                                          issuer="https://as2.example") == 1
    assert await store.delete_credentials("alice", "https://docs.example/mcp",
                                          kind="tokens") == 1
    assert [e.kind for e in await store.list_credentials("alice")] == ["client"]
    assert len(await store.list_credentials("bob")) == 1
