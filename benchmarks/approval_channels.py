"""Approval channels (issue 23): what a webhook costs the gate, and what a vote costs the store.

    python benchmarks/approval_channels.py [--runs 200] [--stores memory,sqlite,postgres]

1. **Gate time to suspend on an ask**, with no webhook and with a webhook whose receiver is
   unreachable (three attempts, 10 ms apart): the delivery runs in the background, so the
   two should match. Each run is timed alone (the previous run's delivery finished, untimed);
   median wall µs over *runs* suspended runs (in-memory store).
2. **Vote latency**: ``answers.answer`` on a request that needs 2 of 2 — the first vote (counted,
   audited) and the deciding one (also records and audits the answer). Median wall ms per vote
   over *runs* requests, per store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _harness import Timings  # noqa: E402

from anfitrion import DeferredApprover, Effect, Host, Toolbox  # noqa: E402
from anfitrion import _answers as answers  # noqa: E402
from anfitrion._approvals import ApprovalRequest, Quorum, Reviewer  # noqa: E402
from anfitrion.channels._webhooks import ApprovalWebhook  # noqa: E402
from anfitrion.policy import WebhookTarget  # noqa: E402
from anfitrion.store import MemoryStore, Store, open_store  # noqa: E402
from anfitrion.testing import ScriptedModel, call  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def _tools() -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def send_email(to: str) -> str:
        """Send an e-mail."""
        return "sent"

    return tools


async def gate_to_suspend(runs: int, with_webhook: bool) -> float:
    store = MemoryStore()
    tools = _tools()
    listeners: list[Any] = []
    hook = None
    if with_webhook:
        async def wait(seconds: float) -> None:
            await asyncio.sleep(0.01)

        hook = ApprovalWebhook(WebhookTarget(f"http://127.0.0.1:{_closed_port()}/h",
                                             secret="a-long-benchmark-secret", max_attempts=3),
                               store, sleep=wait)
        listeners.append(hook)
    times = Timings()
    for _ in range(runs):
        host = Host(model=ScriptedModel([call("send_email", {"to": "ana@example.com"}), "ok"]),
                    tools=tools, store=store, approver=DeferredApprover(), listeners=listeners)
        with times.step():
            run = await host.run("mail ana", principal="agent")
        assert run.status == "suspended"
        if hook is not None:  # its own delivery was still in flight while the run suspended
            assert not any(d.delivered for d in await hook.drain())
    if hook is not None:
        await hook.aclose()
    return times.median(1e6)


async def vote_latency(url: str, runs: int) -> tuple[float, float]:
    store: Store = open_store(url)
    alice = Reviewer("alice", frozenset({"ops"}))
    bob = Reviewer("bob", frozenset({"ops"}))
    first, second = Timings(), Timings()
    try:
        for i in range(runs):
            request = ApprovalRequest.for_call(
                session_id=f"s{i}", principal_id="agent", call_id="c", tool_name="deploy",
                tool_definition_hash="0" * 64, arguments={"service": "api"}, effect="write",
                reason="two people", rule_id="deploys", quorum=Quorum(2, ("ops",)))
            await store.create_approval(request)
            for who, into in ((alice, first), (bob, second)):
                with into.step():
                    outcome = await answers.answer(store, request.id, request.digest,
                                                   approved=True, approver=f"api:{who.name}",
                                                   reviewer=who, via="api")
                assert outcome.recorded
    finally:
        await store.close()
    return first.median(1e3), second.median(1e3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--stores", default="memory,sqlite,postgres")
    options = parser.parse_args()
    report: dict[str, Any] = {
        "gate_to_suspend_us": {
            "no_webhook": asyncio.run(gate_to_suspend(options.runs, False)),
            "unreachable_webhook": asyncio.run(gate_to_suspend(options.runs, True))}}
    votes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in options.stores.split(","):
            schema = None
            admin = None
            if name == "memory":
                url = "memory://"
            elif name == "sqlite":
                url = f"sqlite:///{Path(folder) / 'votes.db'}"
            else:
                import psycopg

                admin = psycopg.connect(PG_ADMIN, autocommit=True)
                schema = f"anfitrion_bench_{uuid.uuid4().hex[:12]}"
                admin.execute(f'CREATE SCHEMA "{schema}"')
                url = f"{PG_ADMIN}?options=-csearch_path%3D{schema}"
            try:
                one, deciding = asyncio.run(vote_latency(url, options.runs))
                votes[name] = {"first_vote_ms": round(one, 3), "deciding_vote_ms":
                               round(deciding, 3)}
            finally:
                if admin is not None:
                    admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
                    admin.close()
    report["vote_latency_median"] = votes
    report["gate_to_suspend_us"] = {k: round(v, 1)
                                    for k, v in report["gate_to_suspend_us"].items()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
