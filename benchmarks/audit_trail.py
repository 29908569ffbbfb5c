"""The cost of the signed audit trail (issue 37): checkpoints per call, and verify throughput.

1. **Checkpoint cost per call.** A SQLite store round trip is one commit of a call's audit
   records (``append_audit_many``, ``synchronous=full``). A checkpoint is one signature and one
   more commit, every ``--every`` records. Both are timed directly; the cost per call is the
   checkpoint's time times the share of a checkpoint one call carries (its records over
   ``--every``), plus the recorder's check after each write (timed too). Target: < 5 % of a
   SQLite round trip.
2. **Gated calls end to end.** CPU time per read call through a :class:`~anfitrion.Runtime`
   on SQLite, checkpoints off and on (the difference is in the noise at ``--every 1000``; this
   is the check that nothing else got slower).
3. **Verify throughput.** Records per CPU-second: the chain alone (``verify_chain``), the
   chain with every checkpoint's signature checked (``verify_trail``), and the same read from
   a SQLite file first (what ``audit verify --key`` does), over ``--records`` records with a
   checkpoint every ``--every``.

Run: ``PYTHONPATH=src python benchmarks/audit_trail.py [--every 1000] [--records 100000]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _harness import RESULT, Timings

from anfitrion import Effect, Runtime, Toolbox
from anfitrion._audit import verify_chain
from anfitrion._audit_keys import Keyring, generate_key
from anfitrion._audit_trail import Checkpointer, verify_trail
from anfitrion.store import AuditTrailStore, MemoryStore, open_store

CALL_RECORDS = 9
"""Audit records of one read call (proposed, validated, decided, claimed … returned)."""


def batch(n: int) -> list[tuple[str, str, float, dict[str, Any]]]:
    return [("call.proposed", "s", 1000.0 + i, {"tool": "get_weather", "call_id": f"c{n}",
                                                 "arguments_sha256": "ab" * 32})
            for i in range(CALL_RECORDS)]


async def store_costs(url: str, key_path: Path, rounds: int, every: int) -> dict[str, float]:
    from anfitrion._audit_keys import load_signing_key

    key = load_signing_key(key_path)
    assert key is not None
    store = open_store(url)
    assert isinstance(store, AuditTrailStore)
    signer = Checkpointer(store, key, every=every)
    trips, checkpoints, checks = Timings(), Timings(), []
    try:
        for n in range(rounds):
            with trips.step():
                await store.append_audit_many(batch(n))
            with checkpoints.step():
                await signer.checkpoint()
        start = time.perf_counter()
        for _ in range(10_000):
            signer.written(CALL_RECORDS)
            signer.due()
            signer._count = 0
        checks.append((time.perf_counter() - start) / 10_000)
    finally:
        await store.close()
    return {"round trip": trips.median(), "checkpoint": checkpoints.median(),
            "check": checks[0]}


def toolbox() -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def get_weather(location: str) -> dict[str, object]:
        """The weather."""
        return {**RESULT, "location": location}

    return tools


async def gated_calls(url: str, calls: int) -> float:
    runtime = Runtime(toolbox(), store=url)
    session = await runtime.open("alice")
    start = time.process_time()
    for i in range(calls):
        await session.submit("get_weather", '{"location": "Lisboa, PT"}', call_id=f"c{i}")
    elapsed = time.process_time() - start
    await session.close()
    await runtime.store.close()
    return elapsed / calls


async def verify_rates(records: int, every: int, key_path: Path,
                       public: Path) -> dict[str, float]:
    from anfitrion._audit_keys import load_public_key, load_signing_key

    key = load_signing_key(key_path)
    assert key is not None
    store = MemoryStore()
    signer = Checkpointer(store, key, every=every)
    for n in range(0, records, every):
        await store.append_audit_many([("call.proposed", "s", 1000.0 + n + i,
                                        {"tool": "get_weather", "call_id": f"c{n + i}",
                                         "arguments_sha256": "ab" * 32})
                                       for i in range(min(every, records - n))])
        await signer.checkpoint()
    log = list(await store.audit_records())
    ring = Keyring.of([load_public_key(public)])
    sqlite = open_store(f"sqlite:///{key_path.parent / 'verify.db'}")
    try:
        for start_at in range(0, len(log), 5000):  # the same records, in a SQLite file
            await sqlite.append_audit_many([(r.type, r.session_id, r.at, r.data)
                                            for r in log[start_at:start_at + 5000]])
        start = time.process_time()
        stored = await sqlite.audit_records()
        assert verify_trail(stored, ring).ok
        from_store = time.process_time() - start
    finally:
        await sqlite.close()
    start = time.process_time()
    assert verify_chain(log).ok
    chain = time.process_time() - start
    start = time.process_time()
    assert verify_trail(log, ring).ok
    trail = time.process_time() - start
    return {"records": len(log), "chain": len(log) / chain, "trail": len(log) / trail,
            "store": len(log) / from_store}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--records", type=int, default=100_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        key_path = Path(folder) / "audit.key"
        _, public = generate_key(key_path)
        costs = anyio.run(store_costs, f"sqlite:///{Path(folder) / 'costs.db'}", key_path,
                          options.rounds, options.every)
        share = CALL_RECORDS / options.every
        per_call = costs["checkpoint"] * share + costs["check"]
        print(f"load average {os.getloadavg()[0]:.2f}; SQLite synchronous=full; "
              f"a call = {CALL_RECORDS} records; a checkpoint every {options.every} records")
        print(f"  SQLite round trip (one call's records, one commit): "
              f"{costs['round trip'] * 1e6:9.1f} µs (median of {options.rounds})")
        print(f"  one checkpoint (sign + commit):                      "
              f"{costs['checkpoint'] * 1e6:9.1f} µs (median of {options.rounds})")
        print(f"  the recorder's check after a write:                  "
              f"{costs['check'] * 1e6:9.3f} µs")
        print(f"  checkpoint cost per call: {per_call * 1e6:.2f} µs = "
              f"{100 * per_call / costs['round trip']:.2f} % of a SQLite round trip "
              "(target < 5 %)")
        walls: dict[str, list[float]] = {"off": [], "on": []}
        os.environ["ANFITRION_AUDIT_CHECKPOINT_EVERY"] = str(options.every)
        for r in range(7):  # interleaved: a machine's load drifts
            for label in ("off", "on"):
                if label == "off":
                    os.environ.pop("ANFITRION_AUDIT_KEY_FILE", None)
                else:
                    os.environ["ANFITRION_AUDIT_KEY_FILE"] = str(key_path)
                walls[label].append(anyio.run(
                    gated_calls, f"sqlite:///{Path(folder) / f'{label}{r}.db'}", options.calls))
        os.environ.pop("ANFITRION_AUDIT_KEY_FILE", None)
        off, on = statistics.median(walls["off"]), statistics.median(walls["on"])
        print(f"  gated read call on SQLite, CPU: checkpoints off {off * 1e6:.0f} µs, "
              f"on {on * 1e6:.0f} µs ({100 * (on / off - 1):+.1f} %; median of 7 x "
              f"{options.calls} calls, interleaved)")
        rates = anyio.run(verify_rates, options.records, options.every, key_path, public)
        print(f"  verify, {rates['records']:.0f} records: chain {rates['chain']:,.0f} records "
              f"per CPU-second; chain + signatures {rates['trail']:,.0f}; read from SQLite "
              f"+ chain + signatures {rates['store']:,.0f}")


if __name__ == "__main__":
    main()
