"""``anfitrion audit keygen | checkpoint | prune | verify-bundle``, and what ``audit verify
--key/--anchor`` and ``audit export --bundle`` add: the signed, anchored trail (issue 37).

The commands are added to the ``audit`` group by :mod:`anfitrion._cli.audit`.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from .._audit import ChainReport
from .._audit_anchor import anchors_from
from .._audit_bundle import build_bundle, verify_bundle
from .._audit_keys import (
    KEY_ENV,
    KEY_FILE_ENV,
    Keyring,
    SigningKey,
    format_time,
    generate_key,
    load_public_key,
    load_signing_key,
    parse_time,
)
from .._audit_trail import (
    Checkpointer,
    Finding,
    TrailReport,
    compare_anchor,
    prune,
    prune_sessions,
    verify_trail,
)
from .._home import environment
from ..exceptions import AnfitrionError
from ..store import AuditRecord, AuditStore, AuditTrailStore, Store
from ._common import run_with_store, shown, store_option

__all__ = ["bundle_export", "checkpoint", "keygen", "prune_command", "trail_options",
           "trail_verdict", "verify_bundle_command"]

_KEY_HELP = ("The signing key (PEM); default $ANFITRION_AUDIT_KEY_FILE, else the PEM in "
             "$ANFITRION_AUDIT_KEY.")


def _signing_key(path: str | None) -> SigningKey:
    try:
        key = load_signing_key(path)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from None
    if key is None:
        raise click.ClickException(f"no audit signing key: pass --key-file, or set "
                                   f"${KEY_FILE_ENV} (or ${KEY_ENV}); make one with "
                                   "`anfitrion audit keygen`")
    return key


def _keyring(keys: Sequence[str], revoked: Sequence[str]) -> Keyring:
    try:
        return Keyring.of([load_public_key(k) for k in keys], revoked)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from None


def _trail_store(store: Store) -> AuditTrailStore:
    if not isinstance(store, AuditTrailStore):
        raise click.ClickException(f"{type(store).__name__} keeps no signed trail")
    return store


def _by() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name (a container): the uid says who
        return f"cli:uid={os.getuid()}"


# -- verify --key/--revoked/--anchor -----------------------------------------------------------

def trail_options(function: Any) -> Any:
    """``--key PUB.pem`` (repeat), ``--revoked KEY_ID[@DATE]`` (repeat), ``--anchor URL``."""
    for option in reversed((
            click.option("--key", "keys", multiple=True, metavar="PUB.pem",
                         help="A public key the checkpoints may be signed with (repeat for a "
                              "rotation): their signatures are checked."),
            click.option("--revoked", multiple=True, metavar="KEY_ID[@DATE]",
                         help="A key no longer trusted (from DATE on, else at all)."),
            click.option("--anchor", "anchors", multiple=True, metavar="URL",
                         help="Compare the log with the checkpoints this anchor holds "
                              "(file:///… or https://…): detects a rewritten, truncated or "
                              "forked log."))):
        function = option(function)
    return function


def trail_verdict(records: Sequence[AuditRecord], *, keys: Sequence[str],
                  revoked: Sequence[str], anchors: Sequence[str],
                  chain: ChainReport) -> tuple[TrailReport, list[Finding], list[str]]:
    """The trail's report (*chain*: the chain's), the anchors' findings, and lines to print."""
    keyring = _keyring(keys, revoked)
    report = verify_trail(records, keyring, chain=chain)
    found: list[Finding] = []
    lines: list[str] = []
    try:
        opened = anchors_from(list(anchors))
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from None
    for anchor in opened:
        try:
            entries = anchor.read()
        except AnfitrionError as exc:
            found.append(Finding("anchor", None, str(exc)))
            continue
        differs = compare_anchor(records, entries, keyring, where=f"the anchor {anchor.url}")
        found += differs
        if not differs:
            lines.append(f"anchor {anchor.url}: agrees ({len(entries)} checkpoints)")
    if report.checkpoints or keyring:
        how = f"signatures checked with {len(keyring.keys)} key(s)" if keyring else \
            "signatures NOT checked: pass --key"
        lines.append(f"checkpoints: {report.checkpoints} ({how}); {report.unsigned_tail} "
                     "record(s) after the last one")
    for finding in report.findings + found:
        where = f" at record {finding.seq}" if finding.seq is not None else ""
        lines.append(f"BROKEN ({finding.kind}){where}: {shown(finding.message)}")
    return report, found, lines


# -- keygen, checkpoint, prune -----------------------------------------------------------------

@click.command("keygen")
@click.option("-o", "--output", default="anfitrion-audit.key", show_default=True,
              type=click.Path(dir_okay=False), help="Where to write the private key (mode 600; "
              "never over an existing file); the public key goes to OUTPUT.pub.")
def keygen(output: str) -> None:
    """Make an Ed25519 key for signing audit checkpoints, prunes and bundles."""
    try:
        key, public = generate_key(output)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"key {key.key_id}\nprivate key: {output} (keep it secret)\n"
               f"public key:  {public} (give it to whoever verifies)\n"
               f"sign with it: export {KEY_FILE_ENV}={Path(output).resolve()}")


@click.command("checkpoint")
@store_option
@click.option("--key-file", default=None, type=click.Path(dir_okay=False), help=_KEY_HELP)
@click.option("--anchor", "anchors", multiple=True, metavar="URL",
              help="Also write the checkpoint to this anchor (default $ANFITRION_AUDIT_ANCHORS).")
def checkpoint(store_url: str | None, key_file: str | None, anchors: Sequence[str]) -> None:
    """Sign the chain's head now (for a cron job: the tail of an idle host gets signed) and
    write it to the anchors. Exit status 1 if an anchor did not take it (audited)."""
    key = _signing_key(key_file)
    try:
        targets = anchors_from(list(anchors) or environment().get("ANFITRION_AUDIT_ANCHORS"))
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from None

    async def work(store: Store) -> tuple[AuditRecord, list[str]]:
        signer = Checkpointer(_trail_store(store), key, anchors=targets, retry_delays=(0.5,))
        record = await signer.checkpoint()
        signer.queue.drain(30.0)
        failed = await signer.audit_failures()
        return record, [f"anchor {f.url} did not take it: {f.error}" for f in failed]

    record, problems = run_with_store(store_url, work)
    click.echo(f"checkpoint {record.seq}: signs record {record.seq - 1} "
               f"({record.prev_hash[:16]}…) with {key.key_id}")
    for problem in problems:
        click.echo(shown(problem), err=True)
    if problems:
        sys.exit(1)


@click.command("prune")
@store_option
@click.option("--before", "before_text", required=True, metavar="DATE",
              help="Remove records older than this (ISO 8601; UTC unless a zone is given).")
@click.option("--key-file", default=None, type=click.Path(dir_okay=False), help=_KEY_HELP)
@click.option("--sessions", is_flag=True,
              help="Also remove the transcripts of sessions that ended before DATE (never a "
                   "suspended or running one, nor one with a call not settled).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def prune_command(store_url: str | None, before_text: str, key_file: str | None,
                  sessions: bool, as_json: bool) -> None:
    """Remove the records before the last checkpoint written before DATE, keeping that
    checkpoint (the chain stays checkable) and every record of a call not yet settled; the
    prune is itself a signed record. With --sessions, transcripts follow the same date."""
    key = _signing_key(key_file)
    try:
        before = parse_time(before_text)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from None

    async def work(store: Store) -> tuple[Any, list[str]]:
        try:
            trail = _trail_store(store)
            plan = await prune(trail, key, before, by=_by())
            gone = await prune_sessions(trail, before, by=_by()) if sessions else []
        except AnfitrionError as exc:
            raise click.ClickException(str(exc)) from None
        return plan, gone

    plan, gone = run_with_store(store_url, work)
    if as_json:
        click.echo(json.dumps({"audit": None if plan is None else {
            "first_kept": plan.first_kept, "removed": plan.removed,
            "base_hash": plan.base_hash, "held_by": plan.held_by}, "sessions": gone}))
        return
    if sessions:
        click.echo(f"removed {len(gone)} ended session(s) and their transcripts")
    if plan is None:
        click.echo(f"nothing to prune: no signed checkpoint before {format_time(before)} "
                   "after the first record (run `anfitrion audit checkpoint`)")
        return
    click.echo(f"pruned {plan.removed} record(s); the log now starts at checkpoint "
               f"{plan.first_kept} (written {format_time(plan.checkpoint_at)})")
    if plan.held_by is not None:
        seq, session, call = plan.held_by
        click.echo(shown(f"kept from record {seq} on: call {call} of session {session} is "
                         "not settled (resolve it with `anfitrion effects`)"))


# -- bundles -----------------------------------------------------------------------------------

def bundle_export(store_url: str | None, path: str, key_file: str | None) -> None:
    """``audit export --bundle PATH``."""
    key = _signing_key(key_file)

    async def work(store: AuditStore) -> Sequence[AuditRecord]:
        return await store.audit_records(None)

    records = run_with_store(store_url, work)
    data = build_bundle(records, key, at=time.time())
    target = Path(path)
    tmp = target.with_name(target.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(target)
    click.echo(f"bundle {path}: {len(records)} records, signed with {key.key_id}", err=True)


@click.command("verify-bundle")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--key", "keys", multiple=True, required=True, metavar="PUB.pem",
              help="The public key to trust (repeat for a rotation).")
@click.option("--revoked", multiple=True, metavar="KEY_ID[@DATE]",
              help="A key no longer trusted (from DATE on, else at all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def verify_bundle_command(path: str, keys: Sequence[str], revoked: Sequence[str],
                          as_json: bool) -> None:
    """Check an export bundle offline with the public key alone. Exit status 1 if anything
    in it was changed, swapped, added or removed, or a signature does not verify."""
    report = verify_bundle(Path(path).read_bytes(), _keyring(keys, revoked))
    findings = report.findings + (report.trail.findings if report.trail else [])
    chain = report.trail.chain if report.trail else None
    if as_json:
        click.echo(json.dumps({"ok": report.ok, "chain": chain.to_dict() if chain else None,
                               "findings": [f.to_dict() for f in findings]}))
    else:
        if chain is not None and chain.ok and not findings:
            click.echo(f"bundle intact: {chain.records} records, "
                       f"{report.trail.checkpoints if report.trail else 0} signed "
                       f"checkpoints, head {chain.head}")
        elif chain is not None and not chain.ok:
            at = f" at record {chain.broken_at}" if chain.broken_at is not None else ""
            click.echo(f"bundle BROKEN{at} ({chain.kind}): {shown(chain.problem)}")
        for finding in findings:
            where = f" at record {finding.seq}" if finding.seq is not None else ""
            click.echo(f"bundle BROKEN ({finding.kind}){where}: {shown(finding.message)}")
    if not report.ok:
        sys.exit(1)
