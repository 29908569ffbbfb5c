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
from ..store import AuditRecord, Store
from ..store._rows import CorruptRowError, skipped_rows
from ._common import run_with_store, shown, store_option


@click.group("audit")
def command() -> None:
    """The audit log: verify its hash chain, show it, export it."""


def _records(store_url: str | None, session_id: str | None) -> Sequence[AuditRecord]:
    async def work(store: Store) -> Sequence[AuditRecord]:
        return await store.audit_records(session_id)
    return run_with_store(store_url, work)


@command.command("verify")
@store_option
@click.option("--file", "path", type=click.File("r", encoding="utf-8"), default=None,
              help="Verify an exported JSONL file instead of the store.")
@click.option("--expect-head", default=None, metavar="HASH",
              help="The head hash noted earlier: detects a rewritten or shortened log.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def verify(store_url: str | None, path: IO[str] | None, expect_head: str | None,
           as_json: bool) -> None:
    """Re-derive the hash chain; name the first broken link and any corrupt row of the store.
    Exit status 1 if broken or corrupt."""
    corrupt: list[str] = []
    if path is not None:
        report = verify_chain(records_from_jsonl(path), expect_head=expect_head)
    else:
        report, corrupt = run_with_store(store_url, lambda s: _check_store(s, expect_head))
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "corrupt_rows": corrupt}))
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
    if not report.ok or corrupt:
        sys.exit(1)


async def _check_store(store: Store, expect_head: str | None) -> tuple[ChainReport, list[str]]:
    """The chain's report, and every corrupt session or approval row."""
    try:
        report = verify_chain(await store.audit_records(None), expect_head=expect_head)
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
    return report, corrupt


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
@click.option("--session", "session_id", default=None, help="Only this session's records.")
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
@click.option("--session", "session_id", default=None, help="Only this session's records.")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8"), default="-",
              help="Write to this file (default: standard output).")
def export(store_url: str | None, session_id: str | None, output: IO[str]) -> None:
    """Export the records as JSONL (every hashed field: `audit verify --file` checks it)."""
    for line in export_jsonl(_records(store_url, session_id)):
        output.write(line)
