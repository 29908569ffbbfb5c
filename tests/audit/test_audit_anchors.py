"""Anchors outside the store: a file and a webhook (a real small HTTP server) receive every
signed checkpoint; `audit verify --anchor` finds a log rewritten from scratch, a cut tail and a
fork, naming the first record that differs; an anchor that is down never blocks a write."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from anfitrion._audit_anchor import FileAnchor, HttpAnchor, open_anchor
from anfitrion._audit_keys import Keyring, SigningKey, load_public_key
from anfitrion._audit_trail import ANCHOR_FAILED, Checkpointer, compare_anchor
from anfitrion.exceptions import ConfigError
from anfitrion.store import AuditTrailStore, open_store

from .trail_helpers import fill, invoke, records, wipe

Key = tuple[SigningKey, Path, Path]


class Receiver(BaseHTTPRequestHandler):
    """A webhook receiver: keeps what is POSTed, answers it all on GET."""

    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def do_GET(self) -> None:
        body = json.dumps(self.server.received).encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/checkpoints", \
            server.received  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def closed_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def anchored(trail_url: str, key: Key, anchor_url: str) -> None:
    """Records 1–4, checkpoint 5, 6–9, checkpoint 10, 11–12: both checkpoints anchored."""
    fill(trail_url, [4, "cp", 4, "cp", 2], key[0], anchors=[open_anchor(anchor_url)])


def verify(trail_url: str, anchor_url: str, key: Key) -> tuple[int, str]:
    result = invoke("audit", "verify", "--store", trail_url, "--anchor", anchor_url,
                    "--key", str(key[2]))
    return result.exit_code, result.output


def test_an_untouched_log_agrees_with_its_file_anchor(trail_url: str, signing: Key,
                                                      tmp_path: Path) -> None:
    anchor = f"file://{tmp_path / 'anchor.jsonl'}"
    anchored(trail_url, signing, anchor)
    lines = (tmp_path / "anchor.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [5, 10]
    code, output = verify(trail_url, anchor, signing)
    assert code == 0, output
    assert f"anchor {anchor}: agrees (2 checkpoints)" in output


def test_a_log_rewritten_from_scratch_with_a_valid_chain_is_found(
        trail_url: str, signing: Key, tmp_path: Path) -> None:
    anchor = f"file://{tmp_path / 'anchor.jsonl'}"
    anchored(trail_url, signing, anchor)
    wipe(trail_url)
    fill(trail_url, [12], start=100)  # a fresh, valid chain of as many records
    assert invoke("audit", "verify", "--store", trail_url).exit_code == 0  # the chain alone
    code, output = verify(trail_url, anchor, signing)
    assert code == 1
    assert "BROKEN (rewritten) at record 1: record 4 differs from the anchor" in output
    assert "the log was rewritten; the first record that differs is a record in 1–4" in output


def test_a_truncated_tail_is_found(trail_url: str, signing: Key, tmp_path: Path) -> None:
    anchor = f"file://{tmp_path / 'anchor.jsonl'}"
    anchored(trail_url, signing, anchor)
    wipe(trail_url, from_seq=6)  # at a batch's start: what is left is a valid chain
    assert invoke("audit", "verify", "--store", trail_url).exit_code == 0  # the chain alone
    code, output = verify(trail_url, anchor, signing)
    assert code == 1
    assert "BROKEN (truncated) at record 6: the log ends at record 5, but the anchor " in output
    assert "records 6–10 at least were removed from the end (truncated)" in output


def test_a_tail_cut_inside_a_batch_is_found_by_the_chain_alone(
        trail_url: str, signing: Key, tmp_path: Path) -> None:
    anchor = f"file://{tmp_path / 'anchor.jsonl'}"
    anchored(trail_url, signing, anchor)
    wipe(trail_url, from_seq=8)  # records 6–9 were appended together: 6 and 7 are left
    result = invoke("audit", "verify", "--store", trail_url)
    assert result.exit_code == 1
    assert "records 6–7 (one batch, one hash)" in result.output


def test_a_fork_names_the_first_record_that_differs(trail_url: str, signing: Key,
                                                    tmp_path: Path) -> None:
    anchor = f"file://{tmp_path / 'anchor.jsonl'}"
    anchored(trail_url, signing, anchor)
    wipe(trail_url, from_seq=6)  # keep 1–5 (checkpoint 5 agrees), write another history
    fill(trail_url, [7], start=500)
    code, output = verify(trail_url, anchor, signing)
    assert code == 1
    assert "BROKEN (forked) at record 6: the log agrees with the anchor" in output
    assert "up to record 5 and differs at record 9: the first record that differs is a " \
           "record in 6–9 (forked)" in output


def test_a_webhook_anchor_receives_every_checkpoint_and_finds_a_cut_tail(
        trail_url: str, signing: Key, webhook: tuple[str, list[dict[str, Any]]]) -> None:
    url, received = webhook
    anchored(trail_url, signing, url)
    assert [e["seq"] for e in received] == [5, 10]
    code, output = verify(trail_url, url, signing)
    assert code == 0, output
    wipe(trail_url, from_seq=10)
    code, output = verify(trail_url, url, signing)
    assert code == 1 and "BROKEN (truncated) at record 10" in output


def test_an_unreachable_anchor_never_blocks_a_write_and_its_failure_is_audited(
        signing: Key) -> None:
    store = open_store("memory://")
    assert isinstance(store, AuditTrailStore)
    down = HttpAnchor(f"http://127.0.0.1:{closed_port()}/x", timeout=1.0)
    signer = Checkpointer(store, signing[0], anchors=[down], retry_delays=(0.2, 0.2))

    async def work() -> None:
        await store.append_audit("x", "s", 1.0, {})
        with anyio.fail_after(0.2):  # three attempts take longer: the write did not wait
            await signer.checkpoint()
        assert signer.queue.drain(10.0)
        await store.append_audit("x", "s", 2.0, {})
        await signer.checkpoint()
    anyio.run(work)
    recs = anyio.run(store.audit_records)
    assert [r.type for r in recs] == ["x", "audit.checkpoint", "x", ANCHOR_FAILED,
                                      "audit.checkpoint"]
    failed = recs[3].data
    assert failed["anchor"] == down.url and failed["checkpoint"] == 2
    assert "Connection refused" in failed["error"] or "URLError" in failed["error"]


def test_verify_with_an_unreachable_anchor_fails_and_says_so(tmp_path: Path,
                                                             signing: Key) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    fill(url, [2, "cp"], signing[0])
    result = invoke("audit", "verify", "--store", url, "--anchor",
                    f"http://127.0.0.1:{closed_port()}/x")
    assert result.exit_code == 1 and "BROKEN (anchor): cannot read the anchor" in result.output


def test_two_anchors_holding_different_histories_are_a_fork(tmp_path: Path,
                                                            signing: Key) -> None:
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    one = [r for r in fill(a, [3, "cp"], signing[0]) if r.type == "audit.checkpoint"]
    two = [r for r in fill(b, [3, "cp"], signing[0], start=50) if r.type == "audit.checkpoint"]
    from anfitrion._audit import record_to_dict
    entries = [record_to_dict(one[0]), record_to_dict(two[0])]
    found = compare_anchor(records(a), entries, Keyring.of([load_public_key(signing[2])]))
    assert [(f.kind, f.seq) for f in found][:1] == [("forked", 4)]


def test_a_forged_anchor_entry_is_not_trusted(tmp_path: Path, signing: Key,
                                              other_signing: Key) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    anchor = FileAnchor(tmp_path / "anchor.jsonl")
    fill(url, [2, "cp"], other_signing[0], anchors=[anchor])  # signed by a key not trusted
    found = compare_anchor(records(url), anchor.read(),
                           Keyring.of([load_public_key(signing[2])]))
    assert [f.kind for f in found] == ["anchor"]
    assert "not one of the keys given" in found[0].message


def test_bad_anchor_urls_are_refused_and_s3_is_documented_only() -> None:
    for bad in ("file://relative/x", "ftp://h/x", "s3://bucket/key"):
        with pytest.raises(ConfigError):
            open_anchor(bad)
    with pytest.raises(ConfigError, match="S3 anchors are not built in"):
        open_anchor("s3://bucket/key")
