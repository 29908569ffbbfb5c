"""Stores: where sessions, approvals, the execution ledger and the audit log live.

One async protocol per role — :class:`SessionStore`, :class:`ApprovalStore`,
:class:`LedgerStore`, :class:`AuditStore`, :class:`CallCounterStore`, :class:`RecordStore` —
and :class:`Store`, all of them in one backend, chosen by URL with :func:`open_store`:

- ``memory://`` — in process, for tests;
- ``sqlite:///path/to/file.db`` — the embedded default;
- ``postgresql://…`` — many workers on many machines (extra ``postgres``).
"""

from __future__ import annotations

from ._base import (
    PRE_CLAIM,
    AnswerStore,
    ApprovalStore,
    ApprovalWatchStore,
    AuditedRecordStore,
    AuditEntry,
    AuditRecord,
    AuditStore,
    AuditTrailStore,
    CallCounterStore,
    Claim,
    ClaimAuditStore,
    ClaimState,
    CredentialEntry,
    CredentialStore,
    DraftStore,
    EffectEntry,
    FileStore,
    LeaseTailStore,
    LedgerEntry,
    LedgerState,
    LedgerStore,
    MigratingStore,
    PrunePlan,
    RecordStore,
    ResolutionStore,
    SessionAuditStore,
    SessionState,
    SessionStore,
    Settlement,
    SettleSaveStore,
    Store,
    StoredApproval,
    VoteOutcome,
    VoteState,
    claim_audit_role,
    lease_tail_role,
    session_audit_role,
    settle_save_role,
)
from ._memory import MemoryStore
from ._rows import CorruptRow, CorruptRowError, skipped_rows

__all__ = [
    "PRE_CLAIM",
    "AnswerStore",
    "ApprovalStore",
    "ApprovalWatchStore",
    "AuditEntry",
    "AuditRecord",
    "AuditStore",
    "AuditTrailStore",
    "AuditedRecordStore",
    "CallCounterStore",
    "Claim",
    "ClaimAuditStore",
    "ClaimState",
    "CorruptRow",
    "CorruptRowError",
    "CredentialEntry",
    "CredentialStore",
    "DraftStore",
    "EffectEntry",
    "FileStore",
    "LeaseTailStore",
    "LedgerEntry",
    "LedgerState",
    "LedgerStore",
    "MemoryStore",
    "MigratingStore",
    "PrunePlan",
    "RecordStore",
    "ResolutionStore",
    "SessionAuditStore",
    "SessionState",
    "SessionStore",
    "SettleSaveStore",
    "Settlement",
    "Store",
    "StoredApproval",
    "VoteOutcome",
    "VoteState",
    "claim_audit_role",
    "lease_tail_role",
    "open_store",
    "session_audit_role",
    "settle_save_role",
    "skipped_rows",
    "sqlite_file",
]


def open_store(url: str | Store | None) -> Store:
    """Open the store named by *url* (or pass a store through).

    Raises:
        UserError: the URL scheme is unknown.
    """
    from ..exceptions import UserError

    if url is None or url == "memory://":
        return MemoryStore()
    if not isinstance(url, str):
        return url
    if url.startswith("sqlite:"):
        try:
            from ._sqlite import SQLiteStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:  # pragma: no cover - sqlite3 is in the standard library
            raise UserError(f"the SQLite store is unavailable: {exc}") from exc
        store: Store = SQLiteStore.from_url(url)
        return store
    if url.startswith(("postgresql:", "postgres:")):
        from ._postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]

        pg_store: Store = PostgresStore.from_url(url)
        return pg_store
    raise UserError(f"unknown store URL {url!r}: use memory://, sqlite:///PATH or "
                    "postgresql://…")


def sqlite_file(url: str) -> str | None:
    """The file a ``sqlite:`` store URL names, without opening it; ``None`` for another store.

    Raises:
        UserError: a ``sqlite:`` URL that names no file.
    """
    if not url.startswith("sqlite:"):
        return None
    from ._sqlite import sqlite_file as named  # type: ignore[import-not-found,unused-ignore]

    path: str = named(url)
    return path
