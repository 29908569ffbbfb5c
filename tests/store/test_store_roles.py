"""The store protocol is one protocol per role; :class:`Store` is their union, and every
backend implements every role (code that needs one role types against that role alone)."""

from __future__ import annotations

import inspect
from dataclasses import FrozenInstanceError
from typing import Protocol

import pytest

from anfitrion._approvals import ApprovalRequest
from anfitrion.store import (
    ApprovalStore,
    AuditStore,
    CallCounterStore,
    LedgerStore,
    RecordStore,
    SessionAuditStore,
    SessionStore,
    Store,
    StoredApproval,
)

ROLES = (SessionStore, ApprovalStore, LedgerStore, AuditStore, CallCounterStore, RecordStore)
pytestmark = pytest.mark.anyio


def _methods(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items()
            if inspect.iscoroutinefunction(value)}


def test_the_roles_split_the_store_protocol_with_no_method_in_two_roles() -> None:
    seen: dict[str, type] = {}
    for role in ROLES:
        for name in _methods(role):
            assert name not in seen, f"{name} is in {seen.get(name)} and {role}"
            seen[name] = role
    assert {base for base in Store.__bases__ if base is not Protocol} == set(ROLES)
    assert _methods(Store) == {"close"}  # the store adds nothing but closing to its roles
    assert len(seen) == 29


async def test_every_backend_implements_every_role(store: Store) -> None:
    for role in (*ROLES, Store):
        assert isinstance(store, role), role


async def test_the_durable_backends_save_a_session_with_its_audit_records_in_one_call(
        store: Store, store_url: str) -> None:
    assert isinstance(store, SessionAuditStore) == (not store_url.startswith("memory"))


async def test_a_stored_approval_is_read_by_name_never_by_position(store: Store) -> None:
    request = ApprovalRequest.for_call(
        session_id="s1", principal_id="alice", call_id="c1", tool_name="save_note",
        tool_definition_hash="d" * 64, arguments={"path": "a.md"}, effect="write",
        reason="writes need a person", rule_id="default.write")
    await store.create_approval(request)
    found = await store.get_approval(request.id)
    assert found == StoredApproval(request, None, False)
    with pytest.raises(TypeError):
        found[0]  # type: ignore[index]
    with pytest.raises(TypeError):
        _, _, _ = found  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        found.used = True  # type: ignore[misc]
