"""Crash benchmark for issue 16: intended vs actual side effects over killed runs.

Each run uses a fresh store. A host process approves a send and is SIGKILLed at one point of
the ledger (cycling through: approved, claimed, executed, settled); then the model proposes
the same send again in a new session (a new call id, the same effect key — the person there
declines any request saying it already ran), and finally the killed session is resumed as
``resume --ready`` would. The side effect is a line in a file; one send was intended per run.

    python benchmarks/crash_effects.py [--runs 100] [--stores sqlite,postgres]

Reports, per store and kill point: runs, intended sends, actual sends, duplicates (runs that
sent more than once), and runs left for a person to resolve (outcome unknown, nothing re-run).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "store" / "crash_worker.py"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
KILL_AT = ("approved", "claimed", "executed", "settled")


def _env() -> dict[str, str]:
    env = os.environ.copy()
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def _worker(url: str, effects: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), url, str(effects), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=_env())


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed ({proc.returncode}): {out[-500:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def one_run(url: str, effects: Path, kill_at: str) -> tuple[int, bool]:
    """(sends, left unknown for a person) after a kill at *kill_at* and two more tries."""
    doomed = _worker(url, effects, "run-approving", "-", kill_at)
    assert doomed.stdout is not None
    doomed.stdout.readline()  # SESSION …
    line = doomed.stdout.readline().strip()
    if line != f"AT {kill_at}":
        raise RuntimeError(f"worker did not stop at {kill_at}: {line!r}")
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)
    again = _finish(_worker(url, effects, "again", f"again-{uuid.uuid4().hex[:8]}"))
    _finish(_worker(url, effects, "ready", "-", "none"))
    sends = effects.read_text().count("sent to") if effects.exists() else 0
    return sends, "a person must resolve it" in str(again.get("output"))


def bench(store: str, runs: int, folder: Path) -> dict[str, Any]:
    by_point: dict[str, Counter[str]] = {k: Counter() for k in KILL_AT}
    admin = None
    if store == "postgres":
        import psycopg

        admin = psycopg.connect(PG_ADMIN, autocommit=True)
    started = time.monotonic()
    for i in range(runs):
        kill_at = KILL_AT[i % len(KILL_AT)]
        effects = folder / f"{store}-{i}.log"
        schema = None
        if admin is not None:
            schema = f"anfitrion_bench_{uuid.uuid4().hex[:12]}"
            admin.execute(f'CREATE SCHEMA "{schema}"')
            url = f"{PG_ADMIN}?options=-csearch_path%3D{schema}"
        else:
            url = f"sqlite:///{folder / f'{store}-{i}.db'}"
        try:
            sends, unknown = one_run(url, effects, kill_at)
        finally:
            if admin is not None and schema is not None:
                admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        counts = by_point[kill_at]
        counts["runs"] += 1
        counts["intended"] += 1
        counts["actual"] += sends
        counts["duplicates"] += sends > 1
        counts["left_unknown"] += unknown
    if admin is not None:
        admin.close()
    total: Counter[str] = Counter()
    for counts in by_point.values():
        total.update(counts)
    return {"store": store, "seconds": round(time.monotonic() - started, 1),
            "by_kill_point": {k: dict(v) for k, v in by_point.items()}, "total": dict(total)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for store in args.stores.split(","):
            report = bench(store, args.runs, Path(folder))
            print(json.dumps(report), flush=True)
            print(f"{store}: {report['total']['runs']} killed runs, intended "
                  f"{report['total']['intended']} sends, actual {report['total']['actual']}, "
                  f"duplicates {report['total']['duplicates']}, left for a person "
                  f"{report['total']['left_unknown']}", flush=True)


if __name__ == "__main__":
    main()
