"""Rolling a policy out: replay recorded calls through a new policy, and report what a shadow
policy would have done.

:func:`replay` takes every call the store's audit log says was decided, rebuilds what the
policy saw at that moment — the principal, the turn, the session's counters and recent calls,
the taint index and flagged arguments as they were (from the stored transcript, up to that
call), rate counts from the executions recorded before it — and asks the new policy, through
the same :meth:`Policy.decide` the gate's decide stage calls. No tool runs; nothing is
written. It first verifies the audit chain and checks that each stored call is the one its
audit record describes (an edited session or log is refused, or reported loudly).

:func:`shadow_report` summarises the ``call.shadow_decided`` records a shadow policy left
(``Runtime(shadow_policy=...)``): where it disagreed with the enforced policy, by rule and
tool.

Example:
    >>> import anyio
    >>> from anfitrion import MemoryStore, Policy
    >>> report = anyio.run(lambda: replay(MemoryStore(), Policy.default(), tools={}))
    >>> report.calls, report.chain.ok
    (0, True)
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ._audit import ChainReport, verify_chain
from ._conversation import Reply, ToolResult, UserMessage
from ._json import parse_json_strict
from ._provenance import TaintIndex
from ._redaction import redact
from ._session import RECENT_PROPOSALS_KEPT, Session
from ._tools import BoundCall, Tool
from .exceptions import ArgumentError, ConfigError, JsonError, StoreError, UserError
from .policy import Decision, Policy, PolicyContext, Verdict, arguments_digest
from .store import AuditRecord, AuditStore, SessionState, Store

__all__ = ["Change", "ReplayRefused", "ReplayReport", "ShadowReport", "replay",
           "shadow_report"]

EXAMPLES_KEPT = 3
_STRICTNESS = {Verdict.ALLOW: 0, Verdict.ASK: 1, Verdict.DENY: 2}
_INVALID = ("invalid_arguments", "retry_limit")

ToolsFor = Mapping[str, Tool] | Callable[[SessionState], Mapping[str, Tool] | None]
"""The tools to replay a session's calls with: one mapping for every session, or a function
of the stored session (its ``app``) returning them (``None``: this session cannot be
replayed)."""


class ReplayRefused(UserError):
    """The audit log is broken, or the stored sessions do not match it: a replay over it
    would describe a history that did not happen."""

    def __init__(self, message: str, chain: ChainReport, mismatches: Sequence[str]) -> None:
        super().__init__(message)
        self.chain = chain
        self.mismatches = tuple(mismatches)


@dataclass(frozen=True, slots=True)
class Change:
    """Calls whose verdict would change the same way, by the same rule, for the same tool."""

    before: Verdict
    after: Verdict
    rule_id: str
    tool: str
    count: int
    examples: tuple[Mapping[str, Any], ...]

    @property
    def loosens(self) -> bool:
        return _STRICTNESS[self.after] < _STRICTNESS[self.before]

    @property
    def newly_allowed(self) -> bool:
        return self.after is Verdict.ALLOW

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.before.value, "to": self.after.value, "rule_id": self.rule_id,
                "tool": self.tool, "count": self.count, "loosens": self.loosens,
                "examples": [dict(e) for e in self.examples]}


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What :func:`replay` found.

    Attributes:
        calls: decided calls in the window (``since``).
        replayed: those the new policy decided (the others are in *skipped*, by reason).
        unchanged: replayed calls whose verdict stays.
        changes: the others, grouped; most calls first.
        mismatches: stored calls that differ from their audit record (forged or edited).
        before_policies: content hashes of the policies that made the recorded decisions,
            with their counts (``"unrecorded"`` for records older than the hash).
    """

    policy_sha256: str
    chain: ChainReport
    calls: int
    replayed: int
    unchanged: int
    changes: tuple[Change, ...]
    skipped: Mapping[str, int] = field(default_factory=dict)
    mismatches: tuple[str, ...] = ()
    before_policies: Mapping[str, int] = field(default_factory=dict)

    @property
    def newly_allowed(self) -> int:
        return sum(c.count for c in self.changes if c.newly_allowed)

    @property
    def trustworthy(self) -> bool:
        return self.chain.ok and not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {"policy_sha256": self.policy_sha256, "chain": self.chain.to_dict(),
                "trustworthy": self.trustworthy, "mismatches": list(self.mismatches),
                "calls": self.calls, "replayed": self.replayed, "unchanged": self.unchanged,
                "changed": sum(c.count for c in self.changes),
                "newly_allowed": self.newly_allowed, "skipped": dict(self.skipped),
                "before_policies": dict(self.before_policies),
                "changes": [c.to_dict() for c in self.changes]}


async def replay(store: Store, policy: Policy, *, tools: ToolsFor, since: float | None = None,
                 expect_head: str | None = None, allow_broken: bool = False) -> ReplayReport:
    """Run every recorded, decided call (from *since*, a UNIX time) through *policy*.

    Raises:
        ReplayRefused: the audit chain does not verify (or does not end at *expect_head*), or
            a stored session's call differs from its audit record — unless *allow_broken*,
            which replays anyway and says so in the report (``trustworthy`` is false).
    """
    records = list(await store.audit_records())
    chain = verify_chain(records, expect_head=expect_head)
    if not chain.ok and not allow_broken:
        raise ReplayRefused(f"the audit log does not verify: {chain.problem}; nothing was "
                            "replayed", chain, ())
    by_session: dict[str, list[AuditRecord]] = {}
    executions: dict[str, list[tuple[float, str]]] = {}
    for record in records:
        by_session.setdefault(record.session_id, []).append(record)
        data = record.data
        if record.type == "result.returned" and data.get("status") == "execute":
            executions.setdefault(str(data.get("principal")), []).append(
                (record.at, str(data.get("tool"))))
    for runs in executions.values():
        runs.sort()
    work = _Replay(policy, executions, since)
    for session_id, session_records in by_session.items():
        if not any(r.type == "call.decided" for r in session_records):
            continue
        state = await store.load_session(session_id)
        chosen = None if state is None else tools if isinstance(tools, Mapping) else tools(state)
        await work.session(session_id, session_records, state, chosen)
    if work.mismatches and not allow_broken:
        raise ReplayRefused(f"{len(work.mismatches)} stored call(s) differ from their audit "
                            f"records (first: {work.mismatches[0]}); nothing was replayed",
                            chain, work.mismatches)
    return work.report(chain)


class _Replay:
    """The state of one replay: counts, groups, problems."""

    def __init__(self, policy: Policy, executions: Mapping[str, list[tuple[float, str]]],
                 since: float | None) -> None:
        self.policy = policy
        self.executions = executions
        self.since = since
        self.calls = self.replayed = self.unchanged = 0
        self.skipped: dict[str, int] = {}
        self.mismatches: list[str] = []
        self.groups: dict[tuple[Verdict, Verdict, str, str], list[Mapping[str, Any]]] = {}
        self.counts: dict[tuple[Verdict, Verdict, str, str], int] = {}
        self.before_policies: dict[str, int] = {}

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    async def session(self, session_id: str, records: list[AuditRecord],
                      state: SessionState | None,
                      tools: Mapping[str, Tool] | None) -> None:
        decided: dict[str, AuditRecord] = {}
        for record in records:
            call_id = record.data.get("call_id")
            if record.type == "call.decided" and isinstance(call_id, str):
                decided.setdefault(call_id, record)  # the first: a resume decides again
        in_window = [r for r in decided.values() if self.since is None or r.at >= self.since]
        if state is None:
            for _ in in_window:
                self.calls += 1
                self.skip("the session is no longer stored")
            return
        try:
            session = Session.from_state(state)
        except StoreError:
            for _ in in_window:
                self.calls += 1
                self.skip("the stored session cannot be read")
            return
        seen: set[str] = set()
        taint = TaintIndex()
        turn = 0
        indexed: set[int] = set()  # results already in the index (ids of the objects)
        messages = list(session.transcript)
        for i, message in enumerate(messages):
            if isinstance(message, Reply):
                # the host indexes each result as its call settles, so a later call of the
                # same reply sees the earlier ones' results: take them from the next message
                turn += 1
                taint.add_reply(message)  # the plan and the outward pieces, as the host saw them
                following = messages[i + 1] if i + 1 < len(messages) else None
                results = {p.call_id: p for p in following.parts if isinstance(p, ToolResult)} \
                    if isinstance(following, UserMessage) else {}
                for call in message.tool_calls:
                    found = decided.get(call.id)
                    if found is not None:
                        seen.add(call.id)
                        await self.call(session, records, found, call.name,
                                        call.raw_arguments, call.id, taint, tools)
                    result = results.get(call.id) or session.settled(call.id)
                    if result is not None:
                        taint.add_result(result, turn)
                        indexed.add(id(result))
            elif isinstance(message, UserMessage):
                for part in message.parts:
                    if isinstance(part, ToolResult):
                        if id(part) not in indexed:
                            taint.add_result(part, turn)
                    else:
                        taint.add_principal_text(part.text)
        for call_id, record in decided.items():
            if call_id not in seen and (self.since is None or record.at >= self.since):
                self.calls += 1
                self.mismatches.append(f"session {session_id!r}: the audit log records call "
                                       f"{redact(call_id, 80)!r}, which the stored session "
                                       "does not hold")

    async def call(self, session: Session, records: list[AuditRecord], record: AuditRecord,
                   name: str, raw_arguments: str, call_id: str, taint: TaintIndex,
                   tools: Mapping[str, Tool] | None) -> None:
        if self.since is not None and record.at < self.since:
            return
        self.calls += 1
        data = record.data
        try:
            parsed = parse_json_strict(raw_arguments or "{}")
        except JsonError:
            parsed = None
        recorded = data.get("arguments_sha256")
        if not isinstance(parsed, dict) or data.get("tool") != redact(name, 80) or \
                recorded != arguments_digest(parsed):
            self.mismatches.append(f"session {session.id!r}, call {redact(call_id, 80)!r}: "
                                   "the stored call is not the one its audit record describes")
            return
        before_data = data.get("decision")
        if not isinstance(before_data, Mapping) or \
                before_data.get("verdict") not in ("allow", "ask", "deny"):
            self.skip("the audit record holds no decision")
            return
        before = Verdict(before_data["verdict"])
        policy_sha = data.get("policy_sha256")
        key = policy_sha if isinstance(policy_sha, str) else "unrecorded"
        self.before_policies[key] = self.before_policies.get(key, 0) + 1
        tool = tools.get(name) if tools is not None else None
        if tools is None:
            self.skip("no tools for this session's app (give --toolbox)")
            return
        if tool is None:
            self.skip("the tool is not among the tools given")
            return
        try:  # as the gate sees it: the new policy's [tools] declarations applied
            tool = self.policy.declared(tool)
        except ConfigError as exc:
            self.skip(f"the policy's declaration does not fit the tool: {exc}")
            return
        try:
            tool.validate(parsed)
        except ArgumentError:
            self.skip("the arguments no longer fit the tool's schema")
            return
        context = self.context(session, records, record, parsed, taint)
        bound = BoundCall(call_id, tool, parsed)
        after = self.policy.decide(bound, await self.policy.consult(bound, context))
        self.replayed += 1
        if after.verdict is before:
            self.unchanged += 1
            return
        group = (before, after.verdict, after.rule_id, tool.name)
        self.counts[group] = self.counts.get(group, 0) + 1
        examples = self.groups.setdefault(group, [])
        if len(examples) < EXAMPLES_KEPT:
            examples.append(_example(session.id, call_id, record, before_data, after))

    def context(self, session: Session, records: list[AuditRecord], decided: AuditRecord,
                parsed: Mapping[str, Any], taint: TaintIndex) -> PolicyContext:
        """What the gate gave the policy for *decided*, rebuilt from the records before it."""
        counters = {"tool_calls": 0, "approvals_asked": 0, "invalid_calls": 0}
        recent: list[tuple[str, str]] = []
        proposed: set[str] = set()
        for record in records:
            if record.seq >= decided.seq:
                break
            data = record.data
            if record.type == "result.returned":
                result = data.get("result")
                kind = result.get("error_kind") if isinstance(result, Mapping) else None
                if data.get("status") == "execute":
                    counters["tool_calls"] += 1
                if kind in _INVALID:
                    counters["invalid_calls"] += 1
            elif record.type == "approval.requested":
                counters["approvals_asked"] += 1
            elif record.type == "call.decided" and data.get("call_id") not in proposed:
                proposed.add(str(data.get("call_id")))
                recent.append((str(data.get("tool")), str(data.get("arguments_sha256"))))
        now = datetime.fromtimestamp(decided.at, UTC)
        turn = decided.data.get("turn")
        return PolicyContext(
            principal=session.principal, session_id=session.id,
            turn=turn if isinstance(turn, int) else 0, now=now, counters=counters,
            recent_calls=tuple(recent[-RECENT_PROPOSALS_KEPT:]),
            untrusted_sources=taint.sources, flagged_arguments=taint.flag(parsed),
            provenance=taint,
            rate_counts=self.rate_counts(session.principal.id, str(decided.data.get("tool")),
                                         decided.at))

    def rate_counts(self, principal: str, tool: str, at: float) -> dict[str, int]:
        runs = self.executions.get(principal, [])
        counts: dict[str, int] = {}
        for key in self.policy.rate_keys(tool):
            start = bisect.bisect_left(runs, (at - key.seconds, ""))
            end = bisect.bisect_left(runs, (at, ""))
            counts[key.id] = sum(1 for _, t in runs[start:end] if key.tool in ("*", t))
        return counts

    def report(self, chain: ChainReport) -> ReplayReport:
        changes = sorted((Change(b, a, rule, tool, self.counts[(b, a, rule, tool)],
                                 tuple(examples))
                          for (b, a, rule, tool), examples in self.groups.items()),
                         key=lambda c: (-c.count, c.tool, c.rule_id))
        return ReplayReport(self.policy.sha256, chain, self.calls, self.replayed,
                            self.unchanged, tuple(changes), dict(self.skipped),
                            tuple(self.mismatches), dict(self.before_policies))


def _example(session_id: str, call_id: str, record: AuditRecord, before: Mapping[str, Any],
             after: Decision) -> dict[str, Any]:
    """One changed call as the report shows it: ids, time, both decisions and the redacted
    argument preview the audit log kept (never the raw arguments)."""
    return {"session_id": session_id, "call_id": redact(call_id, 80),
            "turn": record.data.get("turn"),
            "at": datetime.fromtimestamp(record.at, UTC).isoformat(timespec="seconds"),
            "before": {"verdict": before.get("verdict"), "rule_id": before.get("rule_id")},
            "after": {"verdict": after.verdict.value, "rule_id": after.rule_id,
                      "reason": redact(after.reason)},
            "arguments_preview": record.data.get("arguments_preview", {})}


# -- shadow mode ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ShadowReport:
    """What :func:`shadow_report` found: the shadow policy's decisions against the enforced.

    Attributes:
        decisions: shadow decisions in the window; *agreed*, *errors* (the shadow failed)
            and the disagreements, grouped in *changes* (``before`` is the enforced verdict).
        policies: shadow policy hashes seen, with their counts.
    """

    chain: ChainReport
    decisions: int
    agreed: int
    errors: int
    changes: tuple[Change, ...]
    policies: Mapping[str, int]

    @property
    def disagreed(self) -> int:
        return sum(c.count for c in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {"chain": self.chain.to_dict(), "decisions": self.decisions,
                "agreed": self.agreed, "disagreed": self.disagreed, "errors": self.errors,
                "policies": dict(self.policies), "changes": [c.to_dict() for c in self.changes]}


async def shadow_report(store: AuditStore, *, since: float | None = None,
                        policy_sha256: str | None = None, expect_head: str | None = None,
                        allow_broken: bool = False) -> ShadowReport:
    """Summarise the shadow policy's recorded decisions (from *since*; of one shadow policy
    when *policy_sha256* is given, a prefix of it is enough).

    Raises:
        ReplayRefused: the audit chain does not verify (unless *allow_broken*).
    """
    records = list(await store.audit_records())
    chain = verify_chain(records, expect_head=expect_head)
    if not chain.ok and not allow_broken:
        raise ReplayRefused(f"the audit log does not verify: {chain.problem}", chain, ())
    decisions = agreed = errors = 0
    policies: dict[str, int] = {}
    counts: dict[tuple[Verdict, Verdict, str, str], int] = {}
    examples: dict[tuple[Verdict, Verdict, str, str], list[Mapping[str, Any]]] = {}
    seen: set[tuple[str, str]] = set()
    for record in records:
        if record.type != "call.shadow_decided" or (since is not None and record.at < since):
            continue
        data = record.data
        call = (record.session_id, str(data.get("call_id")))
        if call in seen:  # decided again when it resumed after an approval: counted once
            continue
        seen.add(call)
        sha = data.get("policy_sha256")
        if policy_sha256 is not None and not (isinstance(sha, str)
                                              and sha.startswith(policy_sha256)):
            continue
        decisions += 1
        if isinstance(sha, str):
            policies[sha] = policies.get(sha, 0) + 1
        shadow, enforced = data.get("decision"), data.get("enforced")
        if data.get("status") == "error" or not isinstance(shadow, Mapping) or \
                not isinstance(enforced, Mapping) or \
                shadow.get("verdict") not in ("allow", "ask", "deny") or \
                enforced.get("verdict") not in ("allow", "ask", "deny"):
            errors += 1
            continue
        before, after = Verdict(enforced["verdict"]), Verdict(shadow["verdict"])
        if before is after:
            agreed += 1
            continue
        key = (before, after, str(shadow.get("rule_id")), str(data.get("tool")))
        counts[key] = counts.get(key, 0) + 1
        kept = examples.setdefault(key, [])
        if len(kept) < EXAMPLES_KEPT:
            kept.append({"session_id": record.session_id, "call_id": data.get("call_id"),
                         "turn": data.get("turn"),
                         "at": datetime.fromtimestamp(record.at, UTC).isoformat(
                             timespec="seconds"),
                         "enforced": dict(enforced), "shadow": dict(shadow)})
    changes = sorted((Change(b, a, rule, tool, n, tuple(examples[(b, a, rule, tool)]))
                      for (b, a, rule, tool), n in counts.items()),
                     key=lambda c: (-c.count, c.tool, c.rule_id))
    return ShadowReport(chain, decisions, agreed, errors, tuple(changes), policies)
