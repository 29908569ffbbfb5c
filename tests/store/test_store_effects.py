"""Effects run once, not calls: a write proposed again under a new call id is not run silently.

Each test runs on the in-memory store, a SQLite file and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from anfitrion import DenyAllApprover, Effect, Policy, Tool, ToolError, ToolNotExecuted
from anfitrion._approvals import ApprovalAnswer, ApprovalRequest
from anfitrion._conversation import ToolCall
from anfitrion._effects import EffectScope, effect_key
from anfitrion._gate import Gate, _silent
from anfitrion.exceptions import ConflictError, ToolDefinitionError
from anfitrion.policy import Decision
from anfitrion.store import ClaimState, LedgerState, Store
from anfitrion.store._base import PRE_CLAIM
from anfitrion.testing import gate_session

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"payment_id": {"type": "string"},
                                           "note": {"type": "string"}},
          "required": ["payment_id"]}


def _refund(ran: list[dict[str, Any]], *, fail: BaseException | None = None,
            **options: Any) -> Tool:
    def handler(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        if fail is not None:
            raise fail
        return f"refunded {arguments['payment_id']}"
    return Tool.from_schema("refund", SCHEMA, handler, effect=Effect.WRITE, **options)


def _allow() -> Policy:
    return Policy([lambda c, ctx: Decision.allow("test", "allow")])


def _ask() -> Policy:
    return Policy([lambda c, ctx: Decision.ask("a person decides", "ask")])


class _Yes:
    """An approver saying yes to everything, keeping what it was shown."""

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request)
        return ApprovalAnswer.to(request, True, "ops")


async def _propose(gate: Gate, tool: Tool, call_id: str, arguments: str,
                   session: str = "s1", principal: str = "alice") -> Any:
    outcome = await gate.process(ToolCall.from_raw(call_id, tool.name, arguments),
                                 {tool.name: tool}, gate_session(principal, session, turn=1))
    assert outcome.result is not None
    return outcome.result


async def test_the_same_write_proposed_again_under_a_new_call_id_returns_the_stored_result(
        store: Store) -> None:
    ran: list[dict[str, Any]] = []
    tool = _refund(ran)
    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=_silent)
    first = await _propose(gate, tool, "c1", '{"payment_id": "p1"}')
    again = await _propose(gate, tool, "c2", '{"payment_id": "p1"}')
    assert ran == [{"payment_id": "p1"}]
    assert first.content == "refunded p1"
    assert not again.is_error
    assert again.content.startswith("[not run again: this exact effect")
    assert "already happened at" in again.content and again.content.endswith("refunded p1")
    # other arguments are another effect
    await _propose(gate, tool, "c3", '{"payment_id": "p2"}')
    assert len(ran) == 2


async def test_a_declared_key_template_makes_calls_differing_elsewhere_one_effect(
        store: Store) -> None:
    ran: list[dict[str, Any]] = []
    tool = _refund(ran, effect_key="refund:{payment_id}", effect_scope="principal")
    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=_silent)
    await _propose(gate, tool, "c1", '{"payment_id": "p1", "note": "a"}')
    # another note, another session: the same refund
    again = await _propose(gate, tool, "c2", '{"payment_id": "p1", "note": "b"}', session="s2")
    assert len(ran) == 1 and "refund:\"p1\"" in again.content
    # another principal: scope principal keeps them apart
    await _propose(gate, tool, "c3", '{"payment_id": "p1"}', principal="bob")
    assert len(ran) == 2


async def test_a_write_tool_that_raises_leaves_the_effect_unknown_and_a_retry_is_refused(
        store: Store) -> None:
    ran: list[dict[str, Any]] = []
    tool = _refund(ran, fail=RuntimeError("connection reset after sending"))
    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=_silent)
    first = await _propose(gate, tool, "c1", '{"payment_id": "p1"}')
    assert first.error_kind == "outcome_unknown" and "may have happened" in first.content
    entry = await store.execution_state("s1", "c1")
    assert entry is not None and entry.state is LedgerState.UNKNOWN
    retry = await _propose(gate, _refund(ran), "c2", '{"payment_id": "p1"}')
    assert retry.error_kind == "outcome_unknown" and "a person must resolve" in \
        retry.content.lower()
    assert len(ran) == 1
    # a person says it did not happen: it may run again, once
    (effect,) = await store.list_effects(unsettled_only=True)
    resolved = await store.resolve_effect(effect.key, done=False, by="ops", note="no refund")
    assert resolved is not None and resolved.state is LedgerState.FAILED
    assert resolved.resolved_by == "ops"
    assert (await _propose(gate, _refund(ran), "c3", '{"payment_id": "p1"}')).content == \
        "refunded p1"
    assert len(ran) == 2
    assert await store.list_effects(unsettled_only=True) == []


async def test_an_effect_resolved_as_done_answers_the_next_proposal_with_the_resolution(
        store: Store) -> None:
    ran: list[dict[str, Any]] = []
    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=_silent)
    await _propose(gate, _refund(ran, fail=ToolError("gateway timeout")), "c1",
                   '{"payment_id": "p1"}')
    (effect,) = await store.list_effects()
    await store.resolve_effect(effect.key, done=True, by="ops", note="bank shows it")
    with pytest.raises(ConflictError):
        await store.resolve_effect(effect.key, done=False, by="ops")
    again = await _propose(gate, _refund(ran), "c2", '{"payment_id": "p1"}')
    assert "resolved by ops" in again.content and "bank shows it" in again.content
    assert len(ran) == 1
    assert await store.resolve_effect("0" * 64, done=True, by="ops") is None


async def test_a_tool_that_says_it_did_not_act_fails_and_the_effect_may_be_proposed_again(
        store: Store) -> None:
    ran: list[dict[str, Any]] = []
    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=_silent)
    for fail in (ToolNotExecuted("card declined"), ToolError("no", executed=False)):
        first = await _propose(gate, _refund(ran, fail=fail), f"c{len(ran)}",
                               '{"payment_id": "p1"}')
        assert first.error_kind == "tool_error"
    assert (await _propose(gate, _refund(ran), "c9", '{"payment_id": "p1"}')).content == \
        "refunded p1"
    assert len(ran) == 3


async def test_a_timed_out_write_is_unknown_but_an_idempotent_one_may_be_retried(
        store: Store) -> None:
    ran: list[dict[str, Any]] = []
    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=_silent)
    first = await _propose(gate, _refund(ran, fail=TimeoutError()), "c1", '{"payment_id": "p1"}')
    assert first.error_kind == "outcome_unknown"
    assert (await _propose(gate, _refund(ran), "c2", '{"payment_id": "p1"}')).is_error
    idempotent = _refund(ran, idempotent=True)
    assert (await _propose(gate, idempotent, "c3", '{"payment_id": "p1"}')).content == \
        "refunded p1"
    assert len(ran) == 2


async def test_a_person_asked_to_repeat_an_effect_is_told_it_already_ran(store: Store) -> None:
    ran: list[dict[str, Any]] = []
    approver = _Yes()
    gate = Gate(policy=_ask(), approver=approver, store=store, emit=_silent)
    await _propose(gate, _refund(ran), "c1", '{"payment_id": "p1"}')
    assert approver.asked[0].warnings == ()
    again = await _propose(gate, _refund(ran), "c2", '{"payment_id": "p1"}')
    (warning,) = approver.asked[1].warnings
    assert "already ran at" in warning and "approve running it again?" in warning
    assert "refunded p1" in warning
    assert again.content == "refunded p1" and len(ran) == 2
    effect = await store.effect_state(effect_key(tool="refund", arguments={"payment_id": "p1"},
                                                 principal_id="alice", session_id="s1").key)
    assert effect is not None and effect.repeats == 1 and effect.call_id == "c2"


async def test_an_effect_running_elsewhere_is_refused_before_anyone_is_asked(
        store: Store) -> None:
    ran: list[dict[str, Any]] = []
    approver = _Yes()
    key = effect_key(tool="refund", arguments={"payment_id": "p1"}, principal_id="alice",
                     session_id="s1")
    held = await store.claim_execution("s1", "other", "d", effect=key)  # live elsewhere
    assert held.state is ClaimState.CLAIMED
    gate = Gate(policy=_ask(), approver=approver, store=store, emit=_silent)
    result = await _propose(gate, _refund(ran), "c2", '{"payment_id": "p1"}')
    assert result.error_kind == "effect_running"
    assert ran == [] and approver.asked == []


async def test_a_reconcile_hook_settles_an_unknown_effect_when_it_is_proposed_again(
        store: Store) -> None:
    ran: list[dict[str, Any]] = []
    answers = iter([None, True])
    asked: list[dict[str, Any]] = []

    async def reconcile(arguments: dict[str, Any], context: Any) -> bool | None:
        asked.append(arguments)
        return next(answers)

    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=_silent)
    await _propose(gate, _refund(ran, fail=RuntimeError("?"), reconcile=reconcile), "c1",
                   '{"payment_id": "p1"}')
    tool = _refund(ran, reconcile=reconcile)
    cannot_tell = await _propose(gate, tool, "c2", '{"payment_id": "p1"}')
    assert cannot_tell.error_kind == "outcome_unknown"
    happened = await _propose(gate, tool, "c3", '{"payment_id": "p1"}')
    assert "resolved by reconcile:refund" in happened.content
    assert len(ran) == 1 and len(asked) == 2
    (effect,) = await store.list_effects()
    assert effect.state is LedgerState.DONE and effect.resolved_by == "reconcile:refund"


async def test_the_claim_reserving_a_key_held_by_a_done_call_claims_nothing(
        store: Store) -> None:
    key = effect_key(tool="t", arguments={"a": 1}, principal_id="p", session_id="s")
    first = await store.claim_execution("s", "c1", "d", effect=key)
    assert first.token is not None
    from anfitrion._conversation import ToolResult
    await store.settle_execution("s", "c1", ToolResult("c1", "t", "ok"), first.token)
    second = await store.claim_execution("s", "c2", "d", effect=key)
    assert second.state is ClaimState.DUPLICATE and second.token is None
    assert second.result is not None and second.result.content == "ok"
    assert second.effect is not None and second.effect.call_id == "c1"
    assert await store.execution_state("s", "c2") is None
    # the holder itself still sees its own result
    assert (await store.claim_execution("s", "c1", "d", effect=key)).state is ClaimState.DONE
    # an approved repeat of exactly that run moves the key
    repeat = await store.claim_execution("s", "c3", "d", effect=key, repeat_of=("s", "c1"))
    assert repeat.state is ClaimState.CLAIMED
    stale = await store.claim_execution("s", "c4", "d", effect=key, repeat_of=("s", "c1"))
    assert stale.state is ClaimState.DUPLICATE


# -- hostile keys --------------------------------------------------------------------------

@pytest.mark.parametrize(("a", "b"), [
    ({"payment_id": "a", "note": "b"}, {"payment_id": "a\", \"note\": \"b"}),
    ({"payment_id": "x:y"}, {"payment_id": "x", "note": "y"}),
    ({"payment_id": "é"}, {"payment_id": "e\u0301"}),           # NFC vs NFD
    ({"payment_id": "paypal"}, {"payment_id": "p\u0430ypal"}),  # Cyrillic а
    ({"payment_id": "1"}, {"payment_id": 1}),
    ({"payment_id": "x" * 1_000_000}, {"payment_id": "x" * 1_000_001}),
])
def test_hostile_values_never_share_a_key(a: dict[str, Any], b: dict[str, Any]) -> None:
    for template in (None, "refund:{payment_id}", "{payment_id}:{note}"):
        ka = effect_key(tool="refund", arguments=a, principal_id="p", session_id="s",
                        template=template)
        kb = effect_key(tool="refund", arguments=b, principal_id="p", session_id="s",
                        template=template)
        if template == "refund:{payment_id}" and a.get("payment_id") == b.get("payment_id"):
            continue
        assert ka.key != kb.key
        assert len(ka.display) <= 201


def test_scopes_and_tools_never_share_keys() -> None:
    args = {"payment_id": "p"}
    keys = {effect_key(tool=t, arguments=args, principal_id=p, session_id=s, scope=scope,
                       template=tpl).key
            for t in ("refund", "charge") for p, s in (("a", "b:c"), ("a:b", "c"))
            for scope in EffectScope for tpl in (None, "{payment_id}")}
    # global ignores principal/session: 2 tools x 2 templates x (2 + 2 + 1) scoped ids
    assert len(keys) == 2 * 2 * 5


def test_a_key_template_must_name_declared_arguments_only() -> None:
    for bad in ("refund", "{missing}", "{payment_id.__class__}", "{payment_id!r}",
                "{payment_id:>10}", "{payment_id[0]}", "{"):
        with pytest.raises(ToolDefinitionError):
            _refund([], effect_key=bad)
    with pytest.raises(ToolDefinitionError):
        _refund([], effect_scope="planet")


async def test_a_store_failure_while_reserving_the_key_runs_nothing(tmp_path: Any) -> None:
    import sqlite3

    from anfitrion.exceptions import StoreError
    from anfitrion.store import open_store

    path = tmp_path / "store.db"
    store = open_store(f"sqlite:///{path}")
    await store.list_effects()  # created and migrated
    with sqlite3.connect(path) as db:  # the database refuses the reservation, for real
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON anfitrion_effects "
                   "BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
    ran: list[dict[str, Any]] = []
    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=_silent)
    try:
        with pytest.raises(StoreError, match="disk says no"):
            await _propose(gate, _refund(ran), "c1", '{"payment_id": "p1"}')
        assert ran == []
        entry = await store.execution_state("s1", "c1")
        # the claim rolled back: an allowed call's first ledger write is its claim
        assert entry is None or entry.state in PRE_CLAIM
    finally:
        await store.close()


async def test_a_ledger_from_before_effect_keys_is_migrated_and_keeps_its_entries(
        tmp_path: Any) -> None:
    import sqlite3

    from anfitrion.store import open_store
    from anfitrion.store._migrations import MIGRATIONS, MIGRATIONS_TABLE

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # a store as 0005 left it, with a settled call
        db.execute(MIGRATIONS_TABLE)
        for migration in MIGRATIONS[:5]:
            for statement in migration.statements:
                db.execute(statement)
            db.execute("INSERT INTO anfitrion_migrations VALUES (?, '2026-01-01')",
                       (migration.name,))
        db.execute("INSERT INTO anfitrion_ledger (session_id, call_id, state, digest, "
                   "updated_at) VALUES ('s1', 'old', 'unknown', 'd', '2026-01-01T00:00:00')")
    store = open_store(f"sqlite:///{path}")
    try:
        assert await store.list_effects() == []
        old = await store.execution_state("s1", "old")
        assert old is not None and old.state is LedgerState.UNKNOWN
        key = effect_key(tool="t", arguments={}, principal_id="p", session_id="s1")
        assert (await store.claim_execution("s1", "new", "d", effect=key)).state is \
            ClaimState.CLAIMED
        assert [m for m, at in await store.migration_status()  # type: ignore[attr-defined]
                if at is None] == []
    finally:
        await store.close()


async def test_audit_records_carry_the_effect_key_and_the_duplicate_and_unknown_states(
        store: Store) -> None:
    from anfitrion._audit import AuditRecorder, verify_chain

    recorder = AuditRecorder(store)
    ran: list[dict[str, Any]] = []
    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=recorder)
    await _propose(gate, _refund(ran), "c1", '{"payment_id": "p1"}')
    await _propose(gate, _refund(ran), "c2", '{"payment_id": "p1"}')
    await _propose(gate, _refund(ran, fail=RuntimeError()), "c3", '{"payment_id": "p2"}')
    await recorder.flush()
    records = await store.audit_records("s1")
    key = effect_key(tool="refund", arguments={"payment_id": "p1"}, principal_id="alice",
                     session_id="s1").key
    states = [(r.data.get("call_id"), r.type, r.data.get("status")) for r in records
              if r.data.get("effect_key") == key]
    assert ("c1", "execution.claimed", "claimed") in states
    assert ("c1", "execution.settled", "done") in states
    assert ("c2", "execution.claimed", "duplicate") in states
    assert any(r.type == "execution.settled" and r.data.get("status") == "unknown"
               for r in records)
    assert verify_chain(records).ok


async def test_a_call_resumed_after_a_crash_asks_the_reconcile_hook_what_happened(
        store: Store) -> None:
    ran: list[dict[str, Any]] = []

    async def reconcile(arguments: dict[str, Any], context: Any) -> bool:
        return False  # the outside system never saw it

    tool = _refund(ran, reconcile=reconcile)
    key = effect_key(tool="refund", arguments={"payment_id": "p1"}, principal_id="alice",
                     session_id="s1")
    await store.claim_execution("s1", "c1", "d", effect=key)  # the process died here
    gate = Gate(policy=_allow(), approver=DenyAllApprover(), store=store, emit=_silent)
    resumed = await _propose(gate, tool, "c1", '{"payment_id": "p1"}')
    assert "resolved by reconcile:refund: it did not happen" in resumed.content
    assert ran == []
    # it did not happen: proposed again, it runs once
    assert (await _propose(gate, tool, "c2", '{"payment_id": "p1"}')).content == "refunded p1"
    assert len(ran) == 1


async def test_the_store_keeps_the_exact_arguments_of_the_call_holding_an_effect(
        store: Store) -> None:
    """A reconcile hook run later needs the real arguments: kept as given, with the names the
    tool declares sensitive, and replaced when the key moves to another call."""
    arguments = {"payment_id": "p1", "card": {"pin": "1234"}, "note": "ünï\u202e"}
    key = effect_key(tool="refund", arguments=arguments, principal_id="alice",
                     session_id="s1", template="refund:{payment_id}",
                     sensitive=frozenset({"card"}))
    arguments["note"] = "changed after the reservation"  # the key holds its own copy
    assert (await store.claim_execution("s1", "c1", "d", effect=key)).state is \
        ClaimState.CLAIMED
    held = await store.effect_state(key.key)
    assert held is not None
    assert held.arguments == {"payment_id": "p1", "card": {"pin": "1234"}, "note": "ünï\u202e"}
    assert held.sensitive == frozenset({"card"})
    listed = [e for e in await store.list_effects() if e.key == key.key]
    assert listed[0].arguments == held.arguments
    # the holding call failed: the key moves to the next call, with that call's arguments
    claim = await store.claim_execution("s1", "c1", "d", effect=key)
    assert claim.state is ClaimState.UNKNOWN
    resolved = await store.resolve_effect(key.key, done=False, by="ops")
    assert resolved is not None and resolved.arguments == held.arguments
    second = effect_key(tool="refund", arguments={"payment_id": "p1", "note": "again"},
                        principal_id="alice", session_id="s1", template="refund:{payment_id}")
    assert second.key == key.key
    assert (await store.claim_execution("s1", "c2", "d", effect=second)).state is \
        ClaimState.CLAIMED
    moved = await store.effect_state(key.key)
    assert moved is not None and moved.call_id == "c2"
    assert moved.arguments == {"payment_id": "p1", "note": "again"}
    assert moved.sensitive == frozenset()


def _store_at_0006_statements() -> list[tuple[str, tuple[str, ...]]]:
    from anfitrion.store._migrations import MIGRATIONS

    names = [m.name for m in MIGRATIONS]
    return [(m.name, m.statements) for m in MIGRATIONS[:names.index("0006_effects") + 1]]


_OLD_ROWS = (
    "INSERT INTO anfitrion_ledger (session_id, call_id, state, digest, updated_at) "
    "VALUES ('s1', 'old', 'unknown', 'd', '2026-01-01T00:00:00')",
    "INSERT INTO anfitrion_effects (key, display, scope, tool, session_id, call_id, "
    "created_at, updated_at) VALUES ('" + "a" * 64 + "', 'refund:\"p1\"', 'session', "
    "'refund', 's1', 'old', '2026-01-01T00:00:00', '2026-01-01T00:00:00')",
)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
async def test_a_ledger_made_at_0006_migrates_to_kept_effect_arguments(
        backend: str, tmp_path: Any) -> None:
    """Its effects stay (with no arguments: a person resolves them); new ones keep theirs."""
    from anfitrion.store import open_store
    from anfitrion.store._migrations import MIGRATIONS_TABLE

    from .pg_schema import pg_schema_url

    schema_urls = None
    if backend == "sqlite":
        import sqlite3

        path = tmp_path / "old.db"
        url = f"sqlite:///{path}"
        with sqlite3.connect(path) as db:
            db.execute(MIGRATIONS_TABLE)
            for name, statements in _store_at_0006_statements():
                for statement in statements:
                    db.execute(statement)
                db.execute("INSERT INTO anfitrion_migrations VALUES (?, '2026-01-01')", (name,))
            for statement in _OLD_ROWS:
                db.execute(statement)
    else:
        psycopg = pytest.importorskip("psycopg")

        schema_urls = pg_schema_url()
        url = next(schema_urls)
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(MIGRATIONS_TABLE)
            for name, statements in _store_at_0006_statements():
                for statement in statements:
                    db.execute(statement)  # type: ignore[arg-type]
                db.execute("INSERT INTO anfitrion_migrations VALUES (%s, '2026-01-01')",
                           (name,))
            for statement in _OLD_ROWS:
                db.execute(statement)  # type: ignore[arg-type]
    store = open_store(url)
    try:
        old = await store.effect_state("a" * 64)
        assert old is not None and old.state is LedgerState.UNKNOWN
        assert old.arguments is None and old.sensitive == frozenset()
        assert [m for m, at in await store.migration_status()  # type: ignore[attr-defined]
                if at is None] == []
        resolved = await store.resolve_effect("a" * 64, done=True, by="ops")
        assert resolved is not None and resolved.state is LedgerState.DONE
        key = effect_key(tool="t", arguments={"x": 1}, principal_id="p", session_id="s1")
        assert (await store.claim_execution("s1", "new", "d", effect=key)).state is \
            ClaimState.CLAIMED
        new = await store.effect_state(key.key)
        assert new is not None and new.arguments == {"x": 1}
    finally:
        await store.close()
        if schema_urls is not None:
            schema_urls.close()
