"""Named schema migrations, shared by the SQLite and PostgreSQL stores.

Each migration is a name and a list of statements written in the SQL both databases accept
(``TEXT``, ``BIGINT``, ``DOUBLE PRECISION``). Applied names are recorded in
``anfitrion_migrations``; a migration runs once, inside one transaction with its record.
JSON is kept as canonical JSON *text* in both databases: the audit chain hashes it, so it must
come back byte for byte (PostgreSQL ``jsonb`` would reorder keys).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIGRATIONS", "MIGRATIONS_TABLE", "Migration", "pending"]

MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS anfitrion_migrations (
    name TEXT PRIMARY KEY,
    applied_at TEXT NOT NULL
)"""


@dataclass(frozen=True, slots=True)
class Migration:
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration("0001_sessions_approvals_ledger", (
        """CREATE TABLE anfitrion_sessions (
            session_id TEXT PRIMARY KEY,
            principal_id TEXT NOT NULL,
            status TEXT NOT NULL,
            data TEXT NOT NULL,
            version BIGINT NOT NULL,
            updated_at TEXT NOT NULL)""",
        "CREATE INDEX anfitrion_sessions_status ON anfitrion_sessions (status)",
        """CREATE TABLE anfitrion_approvals (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            digest TEXT NOT NULL,
            request TEXT NOT NULL,
            answer TEXT,
            used INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL)""",
        "CREATE INDEX anfitrion_approvals_session ON anfitrion_approvals (session_id)",
        """CREATE TABLE anfitrion_ledger (
            session_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            state TEXT NOT NULL,
            digest TEXT NOT NULL,
            result TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (session_id, call_id))""",
        "CREATE INDEX anfitrion_ledger_state ON anfitrion_ledger (state)",
    )),
    Migration("0002_audit_chain", (
        """CREATE TABLE anfitrion_audit (
            seq BIGINT PRIMARY KEY,
            type TEXT NOT NULL,
            session_id TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            data TEXT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL)""",
        "CREATE INDEX anfitrion_audit_session ON anfitrion_audit (session_id)",
        # One row: the chain head. Appenders lock it, so the chain has one writer order.
        """CREATE TABLE anfitrion_audit_head (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            seq BIGINT NOT NULL,
            hash TEXT NOT NULL)""",
        "INSERT INTO anfitrion_audit_head (id, seq, hash) VALUES (1, 0, '" + "0" * 64 + "')",
    )),
    Migration("0003_counters_records", (
        """CREATE TABLE anfitrion_call_log (
            principal_id TEXT NOT NULL,
            tool TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX anfitrion_call_log_lookup ON anfitrion_call_log (principal_id, tool, at)",
        """CREATE TABLE anfitrion_records (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (namespace, key))""",
    )),
    # A session's transcript, one row per message: saving appends what is new instead of
    # rewriting the whole transcript, so the cost of a save does not grow with the session.
    Migration("0004_session_messages", (
        """CREATE TABLE anfitrion_session_messages (
            session_id TEXT NOT NULL,
            idx BIGINT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, idx))""",
    )),
    # The session runtime: a lease with an expiry instead of a status that sticks (a process
    # that died mid-turn leaves a lease that lapses), and the token of the claim a ledger
    # entry is held under (settling presents it: a run that lost its claim writes nothing).
    Migration("0005_leases_and_claim_tokens", (
        "ALTER TABLE anfitrion_sessions ADD COLUMN lease_owner TEXT",
        "ALTER TABLE anfitrion_sessions ADD COLUMN lease_expires DOUBLE PRECISION",
        "ALTER TABLE anfitrion_ledger ADD COLUMN claim_token TEXT",
    )),
    # Effect keys: one row per side effect, naming the ledger entry (call) that holds it; the
    # effect's state is that entry's. Existing ledgers need nothing: their calls reserved no
    # key, and a key is reserved at the next claim.
    Migration("0006_effects", (
        """CREATE TABLE anfitrion_effects (
            key TEXT PRIMARY KEY,
            display TEXT NOT NULL,
            scope TEXT NOT NULL,
            tool TEXT NOT NULL,
            session_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            resolved_by TEXT,
            resolution_note TEXT,
            repeats BIGINT NOT NULL DEFAULT 0)""",
        "CREATE INDEX anfitrion_effects_call ON anfitrion_effects (session_id, call_id)",
    )),
    # The arguments of the call holding an effect (canonical JSON), and the names its tool
    # declares sensitive: a reconcile hook run later (``anfitrion effects reconcile``) needs
    # the real arguments; every display redacts them. Effects reserved at 0006 keep NULL: they
    # can still be resolved by a person, not reconciled.
    Migration("0007_effect_arguments", (
        "ALTER TABLE anfitrion_effects ADD COLUMN arguments TEXT",
        "ALTER TABLE anfitrion_effects ADD COLUMN sensitive TEXT",
    )),
    # The two-person rule: one row per person's vote on a request (a second vote by the same
    # person conflicts on the key), and how many distinct approvals the request needs
    # (0: one answer, as before; the store refuses a single approving answer otherwise).
    Migration("0008_approval_votes", (
        """CREATE TABLE anfitrion_approval_votes (
            request_id TEXT NOT NULL,
            voter TEXT NOT NULL,
            seq BIGINT NOT NULL,
            digest TEXT NOT NULL,
            approved INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (request_id, voter))""",
        "ALTER TABLE anfitrion_approvals ADD COLUMN quorum BIGINT NOT NULL DEFAULT 0",
    )),
    # OAuth credentials to upstream MCP servers: a principal's tokens and the client
    # registrations, per authorization server (issuer) and resource, sealed with AES-GCM by
    # the caller (``sealed``, base64) under the key ``key_id`` names; ``meta`` is what may be
    # shown (scopes, expiry, client id), canonical JSON.
    Migration("0009_oauth_credentials", (
        """CREATE TABLE anfitrion_credentials (
            principal TEXT NOT NULL,
            issuer TEXT NOT NULL,
            resource TEXT NOT NULL,
            kind TEXT NOT NULL,
            key_id TEXT NOT NULL,
            sealed TEXT NOT NULL,
            meta TEXT NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (principal, resource, issuer, kind))""",
    )),
    # Signed checkpoints (issue 37) are audit records of type ``audit.checkpoint`` in the chain
    # itself; a partial index finds them (a prune, an export bundle, the last checkpoint)
    # without reading the log, and costs an append nothing but the test of its type.
    Migration("0010_audit_checkpoints", (
        "CREATE INDEX anfitrion_audit_checkpoints ON anfitrion_audit (seq) "
        "WHERE type = 'audit.checkpoint'",
    )),
)


def pending(applied: set[str]) -> list[Migration]:
    """The migrations not yet applied, in order."""
    return [m for m in MIGRATIONS if m.name not in applied]
