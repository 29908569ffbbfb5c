"""SQL the SQLite and PostgreSQL stores share where the two dialects agree: written once with
``?`` for a parameter (SQLite's), turned into ``%s`` for psycopg by :func:`for_postgres`.

What differs stays in each backend: PostgreSQL's row locks (``FOR UPDATE``), ``ON CONFLICT``
clauses that need a unique index's conflict to wait, ``ANY(%b::text[])``; SQLite's single
writer that reads before it writes.
"""

from __future__ import annotations

from typing import Any

from ._rows import EFFECT_COLUMNS

__all__ = [
    "APPROVAL",
    "CLAIMABLE_SESSIONS",
    "CLAIM_CANDIDATES",
    "EFFECTS",
    "EFFECTS_ORDER",
    "EFFECT_INSERT",
    "EFFECT_TAKE_OVER",
    "LEASE",
    "SESSION_COLUMNS",
    "SESSION_ROW",
    "SETTLE",
    "TAIL_AND_SPAN",
    "UNSETTLED_CALLS",
    "UNSETTLED_EFFECTS",
    "VOTES",
    "approvals_query",
    "for_postgres",
]

EFFECTS = (f"SELECT {EFFECT_COLUMNS} FROM anfitrion_effects e LEFT JOIN anfitrion_ledger l "
           "ON l.session_id = e.session_id AND l.call_id = e.call_id")
"""Effects with the state of the ledger entry holding each (add a ``WHERE``)."""
UNSETTLED_EFFECTS = " WHERE l.state IN ('claimed', 'unknown')"
EFFECTS_ORDER = " ORDER BY e.created_at DESC, e.key"

EFFECT_INSERT = ("INSERT INTO anfitrion_effects (key, display, scope, tool, session_id, "
                 "call_id, created_at, updated_at, arguments, sensitive) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
"""A new effect key, reserved for a call: key, display, scope, tool, session, call, created,
updated, then :func:`~anfitrion.store._rows.effect_arguments`."""
EFFECT_TAKE_OVER = ("UPDATE anfitrion_effects SET session_id = ?, call_id = ?, updated_at = ?, "
                    "resolved_by = NULL, resolution_note = NULL, repeats = repeats + ?, "
                    "arguments = ?, sensitive = ? WHERE key = ?")
"""An effect key taken over by another call (a retry or a repeat): session, call, updated,
1 for a repeat, the arguments, the key."""

UNSETTLED_CALLS = ("SELECT session_id, call_id FROM anfitrion_ledger "
                   "WHERE state IN ('claimed', 'unknown') ORDER BY updated_at")
"""Calls whose outcome is not known: claimed (maybe running) or unknown."""
SETTLE = ("UPDATE anfitrion_ledger SET state = ?, result = ?, updated_at = ? "
          "WHERE session_id = ? AND call_id = ? AND state = 'claimed' AND claim_token = ?")
"""Settle a claimed call, only by the claim's own token: state, result, now, session, call,
token."""

VOTES = "SELECT data FROM anfitrion_approval_votes WHERE request_id = ? ORDER BY seq"
APPROVAL = "SELECT request, answer, used FROM anfitrion_approvals WHERE id = ?"

CLAIM_CANDIDATES = 32
"""Sessions a claim looks at: the oldest that can be read is taken, corrupt ones passed over."""

SESSION_COLUMNS = ("session_id, principal_id, status, data, version, updated_at, lease_owner, "
                   "lease_expires")
SESSION_ROW = f"SELECT {SESSION_COLUMNS} FROM anfitrion_sessions WHERE session_id = ?"
LEASE = (
    "UPDATE anfitrion_sessions SET status = 'running', version = version + 1, "
    "updated_at = ?, lease_owner = ?, lease_expires = ? WHERE session_id = ? AND "
    "(lease_owner IS NULL OR lease_owner = ? OR lease_owner = ? "
    "OR lease_expires IS NULL OR lease_expires < ?) "
    f"RETURNING {SESSION_COLUMNS}")
"""A session leased to an owner (updated_at, owner, until, session id, owner, replace, now):
no row if another owner's lease is live."""
TAIL_AND_SPAN = (
    "SELECT -1, NULL, COUNT(*), MAX(idx) FROM anfitrion_session_messages WHERE session_id = ? "
    "UNION ALL SELECT idx, data, NULL, NULL FROM anfitrion_session_messages "
    "WHERE session_id = ? AND idx >= ? ORDER BY 1")
"""A session's messages from an index on (session id, session id, index), after one row of
``COUNT(*)`` and ``MAX(idx)`` of all of them (index ``-1``): one statement
(:func:`~anfitrion.store._rows.tail_rows` reads it)."""
CLAIMABLE_SESSIONS = (
    f"SELECT {SESSION_COLUMNS} FROM anfitrion_sessions s WHERE "
    "(s.lease_owner IS NULL OR s.lease_expires < ?) AND ("
    "(s.status = 'suspended' AND NOT EXISTS (SELECT 1 FROM anfitrion_approvals a "
    "WHERE a.session_id = s.session_id AND a.answer IS NULL)) "
    "OR (s.status = 'running' AND s.lease_owner IS NOT NULL)) "
    "ORDER BY s.updated_at LIMIT ?")
"""Sessions a worker may take, oldest first: unleased or lease lapsed, and either suspended
with every request answered or running (its worker gone): now, :data:`CLAIM_CANDIDATES`."""


def approvals_query(pending_only: bool, session_id: str | None) -> tuple[str, list[Any]]:
    """The listing of approval requests, newest first, and its parameters."""
    sql = "SELECT id, request, answer, used FROM anfitrion_approvals WHERE 1 = 1"
    args: list[Any] = []
    if pending_only:
        sql += " AND answer IS NULL"
    if session_id is not None:
        sql += " AND session_id = ?"
        args.append(session_id)
    return sql + " ORDER BY created_at DESC", args


def for_postgres(sql: str) -> str:
    """*sql* with psycopg's ``%s`` for each ``?`` (the shared statements hold no other ``?``
    and no ``%``)."""
    assert "%" not in sql
    return sql.replace("?", "%s")
