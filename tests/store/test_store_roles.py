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
    assert len(seen) == 30


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


async def test_the_optional_roles_are_protocols_each_backend_plays_or_not(
        store: Store, store_url: str) -> None:
    """Issue #29: an optional role is a runtime-checkable protocol, found with isinstance (the
    session-and-audit role on the class), never by probing attributes."""
    from anfitrion.store import (
        ApprovalWatchStore,
        CredentialStore,
        FileStore,
        MigratingStore,
        lease_tail_role,
        session_audit_role,
    )

    kind = store_url.split(":", 1)[0]
    plays = {role.__name__ for role in (ApprovalWatchStore, CredentialStore, FileStore,
                                        MigratingStore) if isinstance(store, role)}
    if session_audit_role(store) is not None:
        plays.add("SessionAuditStore")
    if lease_tail_role(store) is not None:
        plays.add("LeaseTailStore")
    assert plays == {
        "memory": {"CredentialStore", "LeaseTailStore"},
        "sqlite": {"CredentialStore", "FileStore", "LeaseTailStore", "MigratingStore",
                   "SessionAuditStore"},
        "postgresql": {"ApprovalWatchStore", "CredentialStore", "LeaseTailStore",
                       "MigratingStore", "SessionAuditStore"},
    }[kind]


def test_a_wrapper_forwarding_to_a_store_does_not_play_the_session_audit_role() -> None:
    """The runtime must call a wrapper's own save_session, not skip it through the role."""
    from anfitrion.store import MemoryStore, session_audit_role

    class Forwarding:
        def __init__(self, inner: object) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

    class HasTheRole:
        async def save_session_and_audit(self, state: object, entries: object) -> object:
            return state

    assert session_audit_role(Forwarding(HasTheRole())) is None
    assert session_audit_role(HasTheRole()) is not None
    assert session_audit_role(MemoryStore()) is None


def test_no_module_probes_a_store_for_a_role_by_attribute() -> None:
    import re
    from pathlib import Path

    source = Path(__file__).parents[2] / "src" / "anfitrion"
    probing = [f"{p.relative_to(source)}:{n}" for p in source.rglob("*.py")
               for n, line in enumerate(p.read_text("utf-8").splitlines(), 1)
               if re.search(r"\b(getattr|hasattr)\((type\()?\w*store\b", line)]
    assert probing == []


def test_the_combined_roles_are_unions_of_roles_that_add_nothing() -> None:
    """Issue #29: a module cluster that needs several roles types against one small union
    (answering, settling an effect, drafts, an audited record), never against ``Store``."""
    from anfitrion.store import AnswerStore, AuditedRecordStore, DraftStore, ResolutionStore

    def roles_of(protocol: type) -> set[type]:
        found: set[type] = set()
        for base in protocol.__bases__:
            if base is not Protocol:
                found |= {base} if base in ROLES else roles_of(base)
        return found

    assert roles_of(AnswerStore) == {ApprovalStore, AuditStore, RecordStore}
    assert roles_of(AuditedRecordStore) == {AuditStore, RecordStore}
    assert roles_of(ResolutionStore) == {LedgerStore, SessionStore, AuditStore}
    assert roles_of(DraftStore) == {RecordStore, LedgerStore}
    for union in (AnswerStore, AuditedRecordStore, ResolutionStore, DraftStore):
        assert not _methods(union), union


def test_the_whole_store_is_named_by_no_more_annotations_than_today() -> None:
    """Issue #29: code types against the role it uses; this count only goes down (48 when
    the roles landed, from 82)."""
    import re
    from pathlib import Path

    src = Path(__file__).parents[2] / "src" / "anfitrion"
    whole = re.compile(r": Store\b|-> Store\b|\[Store\]")
    count = sum(len(whole.findall(p.read_text(encoding="utf-8"))) for p in src.rglob("*.py"))
    assert count <= 48
