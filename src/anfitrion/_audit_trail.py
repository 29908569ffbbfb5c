"""The audit trail an auditor accepts: signed checkpoints, anchors, retention, verification.

A **checkpoint** is an audit record of type ``audit.checkpoint`` appended right after the
record it signs: its data is a statement ``{kind, chain_seq, chain_head, signed_at, key_id,
sig}`` (Ed25519, :mod:`anfitrion._audit_keys`) over the sequence number and hash of the record
before it. The :class:`Checkpointer` writes one every *every* records or *seconds* seconds of
activity, and hands it to the anchors (:mod:`anfitrion._audit_anchor`) without waiting.

:func:`verify_trail` checks a log's checkpoints (each signs the record it follows, with a key
given and not revoked, dated in order); :func:`compare_anchor` compares the log with what an
anchor holds and names how it differs — rewritten, truncated or forked — and from which
record. :func:`prune` removes old records, keeping the checkpoint that starts what remains.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._audit import ChainReport, record_to_dict, verify_chain
from ._audit_anchor import Anchor, AnchorFailure, AnchorQueue, anchors_from
from ._audit_keys import Keyring, SigningKey, format_time, load_signing_key, parse_time
from ._chain import CHECKPOINT, PRUNED, chain_hash
from ._home import environment
from ._redaction import redact
from .exceptions import ConfigError, UserError
from .store import AuditRecord, AuditStore, AuditTrailStore, PrunePlan

__all__ = ["ANCHOR_FAILED", "Checkpointer", "Finding", "TrailReport", "compare_anchor",
           "prune", "prune_sessions", "verify_trail"]

log = logging.getLogger("anfitrion.audit")

ANCHOR_FAILED = "audit.anchor_failed"
SESSIONS_PRUNED = "sessions.pruned"
EVERY_ENV, SECONDS_ENV, ANCHORS_ENV = ("ANFITRION_AUDIT_CHECKPOINT_EVERY",
                                       "ANFITRION_AUDIT_CHECKPOINT_SECONDS",
                                       "ANFITRION_AUDIT_ANCHORS")
DEFAULT_EVERY, DEFAULT_SECONDS = 1000, 60.0
SKEW = 300.0
"""Seconds a signed time may be off (out of order, or ahead of the verifier's clock)."""


class Checkpointer:
    """Appends a signed checkpoint every *every* records or *seconds* seconds of activity.

    The recorder tells it how many records it wrote (:meth:`written`) and awaits
    :meth:`maybe` after each write: one comparison unless a checkpoint is due. The count is
    this process's; the checkpoint signs the whole chain's head, whoever wrote it.
    """

    def __init__(self, store: AuditTrailStore, key: SigningKey, *, every: int = DEFAULT_EVERY,
                 seconds: float = DEFAULT_SECONDS, anchors: Sequence[Anchor] = (),
                 retry_delays: Sequence[float] = (1.0, 5.0, 30.0)) -> None:
        if every < 1 or seconds <= 0:
            raise ConfigError("a checkpoint needs every >= 1 record and seconds > 0")
        self.store, self.key, self.every, self.seconds = store, key, every, seconds
        self.queue = AnchorQueue(anchors, retry_delays)
        self._count = 0
        self._since = time.monotonic()

    @classmethod
    def from_env(cls, store: AuditStore,
                 environ: Mapping[str, str] | None = None) -> Checkpointer | None:
        """The checkpointer ``$ANFITRION_AUDIT_KEY_FILE`` (or ``$ANFITRION_AUDIT_KEY``),
        ``$ANFITRION_AUDIT_CHECKPOINT_EVERY``, ``…_SECONDS`` and ``$ANFITRION_AUDIT_ANCHORS``
        configure; ``None`` without a key.

        Raises:
            ConfigError: a bad key, number or anchor; a store that cannot take checkpoints.
        """
        env = environment() if environ is None else environ
        key = load_signing_key(environ=env)
        if key is None:
            return None
        if not isinstance(store, AuditTrailStore):
            raise ConfigError(f"{type(store).__name__} cannot write signed checkpoints")
        try:
            every = int(env.get(EVERY_ENV) or DEFAULT_EVERY)
            seconds = float(env.get(SECONDS_ENV) or DEFAULT_SECONDS)
        except ValueError:
            raise ConfigError(f"${EVERY_ENV} and ${SECONDS_ENV} must be numbers") from None
        return cls(store, key, every=every, seconds=seconds,
                   anchors=anchors_from(env.get(ANCHORS_ENV)))

    def written(self, count: int) -> None:
        self._count += count

    def due(self) -> bool:
        return self._count >= self.every or (
            self._count > 0 and time.monotonic() - self._since >= self.seconds)

    async def maybe(self) -> None:
        """Write a checkpoint if one is due (a failure is logged: the run goes on)."""
        if self._count and self.due():
            try:
                await self.checkpoint()
            # BLE001 - anchors are operator code: a failed checkpoint is logged, the run goes on
            except Exception:
                log.exception("the audit checkpoint could not be written")

    async def checkpoint(self) -> AuditRecord:
        """Audit the anchors' failures so far, then sign the head and queue it for them."""
        self._count, self._since = 0, time.monotonic()
        await self.audit_failures()
        at = time.time()

        def statement(seq: int, head: str) -> Mapping[str, Any]:
            return self.key.sign({"kind": "checkpoint", "chain_seq": seq, "chain_head": head,
                                  "signed_at": format_time(at)})

        record = await self.store.append_audit_at_head(CHECKPOINT, "", at, statement)
        self.queue.submit(record_to_dict(record))
        return record


    async def audit_failures(self) -> list[AnchorFailure]:
        """Append an ``audit.anchor_failed`` record for each checkpoint an anchor did not take
        since the last call; the failures."""
        failures = self.queue.failures()
        for failure in failures:
            fields: dict[str, Any] = {"anchor": failure.url, "checkpoint": failure.seq,
                                      "error": redact(failure.error, 300)}
            await self.store.append_audit_at_head(ANCHOR_FAILED, "", time.time(),
                                                  _constant(fields))
        return failures


def _constant(fields: Mapping[str, Any]) -> Callable[[int, str], Mapping[str, Any]]:
    return lambda _seq, _head: fields


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong with a trail: its ``kind``, the first record concerned, a sentence."""

    kind: str
    seq: int | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seq": self.seq, "message": self.message}


@dataclass
class TrailReport:
    """The chain's report, the checkpoints found, and every finding (empty: all is well)."""

    chain: ChainReport
    checkpoints: int = 0
    signatures_checked: bool = False
    unsigned_tail: int = 0
    """Records after the last checkpoint (not signed yet)."""
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.chain.ok and not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {**self.chain.to_dict(), "ok": self.ok, "checkpoints": self.checkpoints,
                "signatures_checked": self.signatures_checked,
                "unsigned_tail": self.unsigned_tail,
                "findings": [f.to_dict() for f in self.findings]}


def _signed_at(data: Mapping[str, Any]) -> float | None:
    value = data.get("signed_at")
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ConfigError:
        return None


def _check_statement(record: AuditRecord, keyring: Keyring, last: list[float],
                     now: float, skew: float) -> list[Finding]:
    """What is wrong with one checkpoint or prune record."""
    out: list[Finding] = []
    data = record.data
    what = "checkpoint" if record.type == CHECKPOINT else "prune record"
    if record.type == CHECKPOINT and (data.get("chain_seq") != record.seq - 1
                                      or data.get("chain_head") != record.prev_hash):
        out.append(Finding("checkpoint", record.seq, f"checkpoint {record.seq} does not sign "
                           "the record it follows (moved or forged)"))
    if keyring:
        problem = keyring.problem(data)
        if problem is not None:
            kind = "revoked" if "revoked" in problem else "signature"
            out.append(Finding(kind, record.seq, f"{what} {record.seq}: {problem}"))
    signed = _signed_at(data)
    if signed is None:
        out.append(Finding("signature", record.seq, f"{what} {record.seq} has no signing time"))
        return out
    dated = f"{what} {record.seq} is dated {format_time(signed)}"
    if last and signed < last[0] - skew:
        out.append(Finding("clock", record.seq, f"{dated}, before the one earlier in the chain "
                           f"({format_time(last[0])}): clock skew or records replayed"))
    if signed > now + skew:
        out.append(Finding("clock", record.seq,
                           f"{dated}, in the future: the signer's clock is wrong"))
    last[:] = [max([signed, *last])]
    return out


def verify_trail(records: Iterable[AuditRecord], keyring: Keyring | None = None, *,
                 expect_head: str | None = None, now: float | None = None,
                 skew: float = SKEW, chain: ChainReport | None = None) -> TrailReport:
    """The chain (:func:`~anfitrion._audit.verify_chain`) and its signed records.

    With *keyring*, every checkpoint and prune record must carry a valid signature by a key
    in it that is not revoked; a log that starts after record 1 must start at a checkpoint a
    signed prune record names. Without, the links are checked and the signatures are not.
    *chain*: the chain's report, when the caller has it already.
    """
    recs = list(records)
    ring = keyring or Keyring()
    report = TrailReport(chain or verify_chain(recs, expect_head=expect_head),
                         signatures_checked=bool(ring))
    moment = time.time() if now is None else now
    last: list[float] = []
    last_checkpoint = 0
    for record in recs:
        if record.type not in (CHECKPOINT, PRUNED):
            continue
        if record.type == CHECKPOINT:
            report.checkpoints += 1
            last_checkpoint = record.seq
        report.findings += _check_statement(record, ring, last, moment, skew)
    if recs and recs[0].seq > 1 and report.chain.ok and not ring:
        report.findings.append(Finding("unchecked", recs[0].seq, f"the log starts at record "
                                       f"{recs[0].seq} (pruned): pass the public key to check "
                                       "the signed prune"))
    report.unsigned_tail = sum(1 for r in recs if r.seq > last_checkpoint)
    return report


def _entry_record(entry: Mapping[str, Any]) -> AuditRecord | None:
    try:
        return AuditRecord(int(entry["seq"]), str(entry["type"]), str(entry["session_id"]),
                           float(entry["at"]), dict(entry["data"]), str(entry["prev_hash"]),
                           str(entry["hash"]))
    except (KeyError, TypeError, ValueError):
        return None


def _anchored_points(entries: Iterable[Mapping[str, Any]], keyring: Keyring,
                     where: str) -> tuple[dict[int, str], list[Finding]]:
    """``seq → hash`` the anchor vouches for (each checkpoint and the record it signs)."""
    points: dict[int, str] = {}
    findings: list[Finding] = []
    for entry in entries:
        record = _entry_record(entry)
        if record is None or record.type != CHECKPOINT or chain_hash(
                record.seq, record.type, record.session_id, record.at, record.data,
                record.prev_hash) != record.hash:
            findings.append(Finding("anchor", None, f"{where} holds an entry that is not an "
                                    "intact checkpoint record"))
            continue
        problem = keyring.problem(record.data) if keyring else None
        if problem is not None:
            findings.append(Finding("anchor", record.seq, f"{where}: checkpoint {record.seq}: "
                                    f"{problem}"))
            continue
        for seq, digest in ((record.seq, record.hash), (record.seq - 1, record.prev_hash)):
            if points.setdefault(seq, digest) != digest:
                findings.append(Finding("forked", seq, f"{where} holds two different records "
                                        f"{seq}: the history forked"))
    return points, findings


def compare_anchor(records: Sequence[AuditRecord], entries: Iterable[Mapping[str, Any]],
                   keyring: Keyring | None = None, *, where: str = "the anchor"
                   ) -> list[Finding]:
    """How the log *records* differs from the checkpoints an anchor holds (empty: it agrees).

    ``rewritten``: no anchored record agrees (a chain made anew); ``forked``: the log agrees
    with the anchor up to a record and differs after it; ``truncated``: the log ends before a
    record the anchor holds. Each finding names the first record that differs (or the range
    it lies in: the anchor holds every checkpoint and the record before it, not every record).
    """
    points, findings = _anchored_points(entries, keyring or Keyring(), where)
    if any(f.kind == "forked" for f in findings):
        return findings
    by_seq = {r.seq: r.hash for r in records}
    first = records[0].seq if records else 1
    last = records[-1].seq if records else 0
    agreed = first - 1
    for seq in sorted(points):
        if seq < first or seq == 0:
            continue  # pruned from the store (or the genesis)
        if seq > last:
            top = max(points)
            findings.append(Finding("truncated", last + 1, f"the log ends at record {last}, but "
                                    f"{where} holds record {top}: records {last + 1}–{top} "
                                    "at least were removed from the end (truncated)"))
            break
        if by_seq.get(seq) != points[seq]:
            start = agreed + 1
            span = f"record {start}" if start == seq else f"a record in {start}–{seq}"
            if agreed < first:
                findings.append(Finding("rewritten", start, f"record {seq} differs from "
                                        f"{where} and no anchored record agrees: the log was "
                                        f"rewritten; the first record that differs is {span}"))
            else:
                findings.append(Finding("forked", start, f"the log agrees with {where} up to "
                                        f"record {agreed} and differs at record {seq}: the "
                                        f"first record that differs is {span} (forked)"))
            break
        agreed = seq
    return findings


def _not_future(before: float, now: float | None, skew: float) -> None:
    moment = time.time() if now is None else now
    if before > moment + skew:
        raise UserError(f"refusing to prune before {format_time(before)}: that is in the future "
                        f"(this clock says {format_time(moment)}); check the date and the clock")


async def prune_sessions(store: AuditTrailStore, before: float, *, by: str,
                         now: float | None = None, skew: float = SKEW) -> list[str]:
    """Remove the transcripts of sessions that ended before *before* (never a suspended or
    running one, nor one with a call unsettled); a ``sessions.pruned`` record says which.

    Raises:
        UserError: *before* is in the future.
    """
    _not_future(before, now, skew)
    gone = list(await store.prune_sessions(before))
    if gone:
        await store.append_audit_at_head(SESSIONS_PRUNED, "", time.time(), _constant({
            "count": len(gone), "sessions": gone[:100], "before": format_time(before),
            "by": redact(by, 80)}))
    return gone


async def prune(store: AuditTrailStore, key: SigningKey, before: float, *, by: str,
                now: float | None = None, skew: float = SKEW) -> PrunePlan | None:
    """Remove the records before the last checkpoint written before *before*, keeping that
    checkpoint and every record of a call still unsettled; write a signed ``audit.pruned``.

    Raises:
        UserError: *before* is in the future (a clock set wrong, or a typo).
    """
    _not_future(before, now, skew)
    at = time.time()

    def statement(plan: PrunePlan) -> Mapping[str, Any]:
        fields: dict[str, Any] = {
            "kind": "prune", "first_kept": plan.first_kept, "base_hash": plan.base_hash,
            "removed": plan.removed, "before": format_time(before), "by": by[:200],
            "signed_at": format_time(at)}
        if plan.held_by is not None:
            fields["held_by"] = {"seq": plan.held_by[0], "session_id": plan.held_by[1],
                                 "call_id": plan.held_by[2]}
        return key.sign(fields)

    return await store.prune_audit(before, at, statement)
