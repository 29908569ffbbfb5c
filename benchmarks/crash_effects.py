"""Crash benchmark for issue 16: intended vs actual side effects over killed runs.

Each run uses a fresh store. A host process approves a send and is SIGKILLed at one point of
the ledger (cycling through: approved, claimed, executed, settled); then the model proposes
the same send again in a new session (a new call id, the same effect key — the person there
declines any request saying it already ran), the killed session is resumed as
``resume --ready`` would, and the model proposes the send once more. The side effect is a line
in a file (the "outside system"); one send was intended per run.

``--hook on``: the send declares a ``reconcile`` hook that asks that file whether the send
happened, so an unknown outcome is settled by the host itself on resume (done: not sent
again; failed: the next proposal sends it). ``--hook off``: no hook; unknown outcomes wait for
a person. ``both`` (the default) runs each.

    python benchmarks/crash_effects.py [--runs 100] [--stores sqlite,postgres] [--hook both]

Reports, per store, hook and kill point: runs, intended sends, actual sends, duplicates (runs
that sent more than once), runs left for a person (an effect still unsettled at the end) and
effects settled by the hook.
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


def _env(hook: bool) -> dict[str, str]:
    env = os.environ.copy()
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["CRASH_RECONCILE"] = "1" if hook else "0"
    return env


def _worker(url: str, effects: Path, hook: bool, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), url, str(effects), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=_env(hook))


def _effects_left(url: str) -> tuple[int, int]:
    """(effects still unsettled, effects settled by a reconcile hook) in the store at *url*."""
    sys.path.insert(0, str(ROOT / "src"))
    import anyio

    from anfitrion.store import open_store

    async def count() -> tuple[int, int]:
        store = open_store(url)
        try:
            unsettled = await store.list_effects(unsettled_only=True)
            # the gate audits each settlement by a hook (a later call may hold the key since)
            settled = [r for r in await store.audit_records() if r.type == "execution.settled"
                       and r.data.get("status") in ("resolved_done", "resolved_failed")]
            return len(unsettled), len(settled)
        finally:
            await store.close()

    return anyio.run(count)


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed ({proc.returncode}): {out[-500:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def one_run(url: str, effects: Path, kill_at: str, hook: bool) -> tuple[int, int, int]:
    """(sends, effects left unsettled, effects the hook settled) after a kill at *kill_at*
    and three more tries: the send proposed again, the killed session resumed, the send
    proposed once more."""
    doomed = _worker(url, effects, hook, "run-approving", "-", kill_at)
    assert doomed.stdout is not None
    doomed.stdout.readline()  # SESSION …
    line = doomed.stdout.readline().strip()
    if line != f"AT {kill_at}":
        raise RuntimeError(f"worker did not stop at {kill_at}: {line!r}")
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)
    _finish(_worker(url, effects, hook, "again", f"again-{uuid.uuid4().hex[:8]}"))
    _finish(_worker(url, effects, hook, "ready", "-", "none"))
    _finish(_worker(url, effects, hook, "again", f"again-{uuid.uuid4().hex[:8]}"))
    sends = effects.read_text().count("sent to") if effects.exists() else 0
    unsettled, reconciled = _effects_left(url)
    return sends, unsettled, reconciled


def bench(store: str, runs: int, folder: Path, hook: bool) -> dict[str, Any]:
    by_point: dict[str, Counter[str]] = {k: Counter() for k in KILL_AT}
    admin = None
    if store == "postgres":
        import psycopg

        admin = psycopg.connect(PG_ADMIN, autocommit=True)
    started = time.monotonic()
    for i in range(runs):
        kill_at = KILL_AT[i % len(KILL_AT)]
        effects = folder / f"{store}-{hook}-{i}.log"
        schema = None
        if admin is not None:
            schema = f"anfitrion_bench_{uuid.uuid4().hex[:12]}"
            admin.execute(f'CREATE SCHEMA "{schema}"')
            url = f"{PG_ADMIN}?options=-csearch_path%3D{schema}"
        else:
            url = f"sqlite:///{folder / f'{store}-{hook}-{i}.db'}"
        try:
            sends, unknown, reconciled = one_run(url, effects, kill_at, hook)
        finally:
            if admin is not None and schema is not None:
                admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        counts = by_point[kill_at]
        counts["runs"] += 1
        counts["intended"] += 1
        counts["actual"] += sends
        counts["duplicates"] += sends > 1
        counts["left_unknown"] += unknown
        counts["reconciled"] += reconciled
    if admin is not None:
        admin.close()
    total: Counter[str] = Counter()
    for counts in by_point.values():
        total.update(counts)
    return {"store": store, "hook": hook, "seconds": round(time.monotonic() - started, 1),
            "by_kill_point": {k: dict(v) for k, v in by_point.items()}, "total": dict(total)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--hook", choices=["on", "off", "both"], default="both",
                        help="whether the send declares a reconcile hook")
    args = parser.parse_args()
    hooks = {"on": [True], "off": [False], "both": [False, True]}[args.hook]
    with tempfile.TemporaryDirectory() as folder:
        for store in args.stores.split(","):
            for hook in hooks:
                report = bench(store, args.runs, Path(folder), hook)
                total = report["total"]
                print(json.dumps(report), flush=True)
                print(f"{store}, hook {'on' if hook else 'off'}: {total['runs']} killed runs, "
                      f"intended {total['intended']} sends, actual {total['actual']}, "
                      f"duplicates {total['duplicates']}, left for a person "
                      f"{total['left_unknown']}, settled by the hook {total['reconciled']}",
                      flush=True)


if __name__ == "__main__":
    main()
