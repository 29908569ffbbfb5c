"""``anfitrion audit``: check, read and export the hash-chained audit log.

``verify [--expect-head HASH] [--file EXPORT.jsonl]``, ``show [--session S] [--tool T]
[--tail N] [--json]``,
``export [--session S] [-o FILE]`` (JSONL). Records are redacted when written; ``show`` also
escapes anything a terminal would interpret.

``verify`` on a store also looks for corrupt rows (data the store did not write) in the
sessions and approvals, names each one and exits 1; an audit record that cannot be read
breaks the chain (``corrupt``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import IO, Any

import click

from .._approvals import NO_APPROVER
from .._audit import ChainReport, export_jsonl, record_to_dict, records_from_jsonl, verify_chain
from .._canonical import canonical_json
from ..exceptions import StoreError
from ..store import AuditRecord, AuditStore, CorruptRowError, Store, skipped_rows
from . import audit_trail as _trail
from ._common import run_with_store, shown, store_option
from .audit_trail import bundle_export, trail_options, trail_verdict


@click.group("audit")
def command() -> None:
    """The audit log: verify its hash chain, show it, export it."""


MIN_SESSION_PREFIX = 6


def _records(store_url: str | None, session_id: str | None) -> Sequence[AuditRecord]:
    """The store's audit records; with *session_id*, that session's: its full id or a unique
    prefix of at least :data:`MIN_SESSION_PREFIX` characters (``audit show`` prints the first
    12). A session with no record is an error naming it, never an empty listing."""
    async def work(store: AuditStore) -> Sequence[AuditRecord]:
        if session_id is None:
            return await store.audit_records(None)
        exact = await store.audit_records(session_id)
        if exact or len(session_id) < MIN_SESSION_PREFIX:
            return _found(exact, session_id)
        everything = await store.audit_records(None)
        sessions = sorted({r.session_id for r in everything
                           if r.session_id.startswith(session_id)})
        if len(sessions) > 1:
            raise click.ClickException(
                f"{session_id!r} is the start of {len(sessions)} sessions' ids "
                f"({', '.join(s[:16] for s in sessions[:3])}…): give more of the id")
        return _found([r for r in everything if r.session_id in sessions], session_id)
    return run_with_store(store_url, work)


def _found(records: Sequence[AuditRecord], session_id: str) -> Sequence[AuditRecord]:
    if not records:
        short = "" if len(session_id) >= MIN_SESSION_PREFIX else (
            f" (a shortened id needs at least {MIN_SESSION_PREFIX} characters)")
        raise click.ClickException(f"no audit record of session {session_id!r} in this store"
                                   f"{short}; `anfitrion sessions list` names the sessions")
    return records


@command.command("verify")
@store_option
@click.option("--file", "path", type=click.File("r", encoding="utf-8"), default=None,
              help="Verify an exported JSONL file instead of the store.")
@click.option("--expect-head", default=None, metavar="HASH",
              help="The head hash noted earlier: detects a rewritten or shortened log.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@trail_options
def verify(store_url: str | None, path: IO[str] | None, expect_head: str | None,
           as_json: bool, keys: Sequence[str], revoked: Sequence[str],
           anchors: Sequence[str]) -> None:
    """Re-derive the hash chain; name the first broken link and any corrupt row of the store.
    With --key, check the signed checkpoints; with --anchor, compare with an anchor.
    Exit status 1 if broken, corrupt, or differing from an anchor."""
    corrupt: list[str] = []
    if path is not None:
        records: Sequence[AuditRecord] = list(records_from_jsonl(path))
        report = verify_chain(records, expect_head=expect_head)
    else:
        report, corrupt, records = run_with_store(store_url,
                                                  lambda s: _check_store(s, expect_head))
    trail, differs, lines = trail_verdict(records, keys=keys, revoked=revoked, anchors=anchors,
                                          chain=report)
    broken = bool(trail.findings) or bool(differs)
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "corrupt_rows": corrupt,
                               **{k: v for k, v in trail.to_dict().items() if k not in
                                  report.to_dict()},
                               "ok": report.ok and not broken,
                               "anchors": [f.to_dict() for f in differs]}))
    elif report.ok:
        click.echo(f"audit chain intact: {report.records} records, head {report.head}")
    elif report.broken_at is None:
        click.echo(f"audit chain BROKEN ({report.kind}): {report.problem}")
    else:
        click.echo(f"audit chain BROKEN at record {report.broken_at} ({report.kind}): "
                   f"{report.problem}")
    if corrupt and not as_json:
        for line in corrupt:
            click.echo(shown(line))
        click.echo(f"{len(corrupt)} corrupt row(s): the rest of the store is usable; restore "
                   "them from a backup or delete them")
    if not as_json:
        for line in lines:
            click.echo(line)
    if not report.ok or corrupt or broken:
        sys.exit(1)


async def _check_store(store: Store, expect_head: str | None
                       ) -> tuple[ChainReport, list[str], Sequence[AuditRecord]]:
    """The chain's report, every corrupt session or approval row, and the records read."""
    records: Sequence[AuditRecord] = []
    try:
        records = await store.audit_records(None)
        report = verify_chain(records, expect_head=expect_head)
    except CorruptRowError as exc:
        report = ChainReport(False, 0, problem=str(exc), kind="corrupt")
    sessions = await store.list_sessions()
    corrupt = [str(row) for row in skipped_rows(sessions)]
    for session in sessions:  # the messages are loaded only with the session
        try:
            await store.load_session(session.session_id)
        except StoreError as exc:
            corrupt.append(str(exc))
    corrupt.extend(str(row) for row in skipped_rows(
        await store.list_approvals(pending_only=False)))
    return report, corrupt, records


def _clip(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _summary(data: dict[str, Any]) -> str:
    """One record's meaning in a few words: the decision, the answer, the result, the reply;
    the rest as compact JSON (``--json`` has every field)."""
    parts: list[str] = []
    decision = data.pop("decision", None)
    if isinstance(decision, dict):
        parts.append(f"{decision.get('verdict')}: {decision.get('reason')} "
                     f"[{decision.get('rule_id')}]")
        data.pop("arguments_sha256", None)
        data.pop("policy_sha256", None)
    answer = data.pop("approval_answer", None)
    if isinstance(answer, dict):
        word = "approved" if answer.get("approved") else "declined"
        note = f": {answer.get('note')}" if answer.get("note") else ""
        parts.append("denied: no approver configured" if answer.get("approver") == NO_APPROVER
                     else f"{word} by {answer.get('approver')}{note}")
    request = data.pop("approval_request", None)
    if isinstance(request, dict) and not parts:
        parts.append(f"request {request.get('id')}")
    result = data.pop("result", None)
    if isinstance(result, dict):
        head = f"error ({result.get('error_kind')})" if result.get("is_error") else "ok"
        parts.append(f"{head}: {_clip(str(result.get('preview', '')))}")
    reply = data.pop("reply", None)
    if isinstance(reply, dict):
        calls = reply.get("tool_calls") or []
        parts.append(f"calls {', '.join(map(str, calls))}" if calls else
                     f"text ({reply.get('text_chars')} chars)")
    if "arguments_preview" in data:
        parts.append(f"args {_clip(canonical_json(data.pop('arguments_preview')), 100)}")
    for key in ("status", "detail", "effect_key"):
        if key in data:
            parts.append(f"{key}: {_clip(str(data.pop(key)), 80)}")
    data.pop("principal", None)
    data.pop("approval_request", None)
    for key in [k for k in data if k.endswith(("_sha256", "_chars"))]:
        data.pop(key)
    if data:
        parts.append(_clip(canonical_json(data), 120))
    return "  ".join(parts)


def _line(record: AuditRecord) -> str:
    """One record on one line, as a person reads it (``--json``: every field)."""
    data = dict(record.data)
    when = datetime.fromtimestamp(record.at, UTC).strftime("%Y-%m-%d %H:%M:%S")
    head = f"{record.seq:>5} {when} {shown(record.session_id)[:12]:<12} {record.type:<19}"
    tool = data.pop("tool", None)
    data.pop("call_id", None)
    data.pop("turn", None)
    tool_text = f" {shown(str(tool))}" if tool is not None else ""
    return f"{head}{tool_text}  {shown(_summary(data))}".rstrip()


def _selected(records: Sequence[AuditRecord], tool: str | None,
              tail: int | None) -> Sequence[AuditRecord]:
    """``--tool`` and ``--tail`` of ``audit show``."""
    if tool is not None:
        records = [r for r in records if r.data.get("tool") == tool]
    if tail is not None:
        records = records[-tail:] if tail else []
    return records


@command.command("show")
@store_option
@click.option("--session", "session_id", default=None, metavar="ID",
              help="Only this session's records: its id, or a unique prefix of at least 6 "
                   "characters (as the listing shows it).")
@click.option("--tool", default=None, help="Only the records of calls of this tool.")
@click.option("--tail", type=click.IntRange(min=0), default=None, metavar="N",
              help="Only the last N records (after --session and --tool).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one array, every field).")
def show(store_url: str | None, session_id: str | None, tool: str | None, tail: int | None,
         as_json: bool) -> None:
    """Show the audit records, one readable line each (redacted previews and digests, never
    raw values); --json prints every field."""
    records = _selected(_records(store_url, session_id), tool, tail)
    if as_json:
        click.echo(json.dumps([record_to_dict(r) for r in records], indent=2,
                              ensure_ascii=True))
        return
    if not records:
        click.echo("no audit record")
    for record in records:
        click.echo(_line(record))


@command.command("export")
@store_option
@click.option("--session", "session_id", default=None, metavar="ID",
              help="Only this session's records (its id or a unique prefix).")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8"), default="-",
              help="Write to this file (default: standard output).")
@click.option("--bundle", default=None, type=click.Path(dir_okay=False), metavar="OUT.tar",
              help="Write a signed bundle instead (the whole log, its checkpoints, the public "
                   "key, the policy hashes, a signed manifest): `audit verify-bundle` checks it.")
@click.option("--key-file", default=None, type=click.Path(dir_okay=False),
              help="The signing key for --bundle (default $ANFITRION_AUDIT_KEY_FILE).")
def export(store_url: str | None, session_id: str | None, output: IO[str],
           bundle: str | None, key_file: str | None) -> None:
    """Export the records as JSONL (every hashed field: `audit verify --file` checks it)."""
    if bundle is not None:
        if session_id is not None:
            raise click.ClickException("a bundle holds the whole log: drop --session")
        bundle_export(store_url, bundle, key_file)
        return
    for line in export_jsonl(_records(store_url, session_id)):
        output.write(line)


# the signed trail's commands (issue 37) live in their own module
for _added in (_trail.keygen, _trail.checkpoint, _trail.prune_command,
               _trail.verify_bundle_command):
    command.add_command(_added)
