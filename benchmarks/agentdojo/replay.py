"""`policy replay` on AgentDojo's recorded sessions: the default policy against a stricter one.

Runs the suites as ``run.py`` does (benign runs, and attacked runs answered by the
``reject_flagged`` approver) with each session and its audit log kept in a SQLite file, one per
suite, under the suite operator's policy. Then replays every recorded call, offline, through

* **default** — anfitrion's built-in ``Policy.default()`` (no operator rules), and
* **stricter** — the operator's rules with the taint rule at ``reads="all"`` and
  ``deny_flagged=True`` (every read after untrusted content asks; an argument that came only
  from untrusted content is denied),

and prints what each would change, by transition, rule and tool. The same replays run from
the command line: ``anfitrion policy replay --store sqlite:///…/banking.db --policy …``.

Run (from the repository root, ``pip install -e '.[agentdojo]'``)::

    python benchmarks/agentdojo/replay.py [--suite banking] [--out /tmp/agentdojo-replay]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import anyio
import harness

from anfitrion import Policy
from anfitrion._rollout import ReplayReport, replay
from anfitrion.policy._taint import taint_rule
from anfitrion.store import open_store

SUITES = ("workspace", "travel", "banking", "slack")


def stricter(operator: Any) -> Policy:
    return Policy([*operator.rules, taint_rule(allowed_hosts=operator.allowed_hosts,
                                               reads="all", deny_flagged=True,
                                               free_reads=operator.free_reads)])


async def one_suite(name: str, folder: Path) -> dict[str, Any]:
    url = f"sqlite:///{folder / f'{name}.db'}"
    store = open_store(url)
    try:
        started = time.perf_counter()
        runs = await harness.run_suite(name, approvers=("reject_flagged",), store=store)
        recorded = time.perf_counter() - started
        suite = harness.get_suites(harness.latest_version())[name]
        operator = harness.operator_for(name)
        tools = {t.name: t for t in harness._suite_tools(suite, operator)}
        out: dict[str, Any] = {"suite": name, "store": url, "runs": len(runs),
                               "record_seconds": round(recorded, 1)}
        for label, policy in (("recorded", operator.policy()), ("default", Policy.default()),
                              ("stricter", stricter(operator))):
            started = time.perf_counter()
            report = await replay(store, policy, tools=tools)
            out[label] = summary(report) | {"seconds": round(time.perf_counter() - started, 2)}
        return out
    finally:
        await store.close()


def summary(report: ReplayReport) -> dict[str, Any]:
    transitions: dict[str, int] = {}
    for change in report.changes:
        key = f"{change.before.value}→{change.after.value}"
        transitions[key] = transitions.get(key, 0) + change.count
    return {"policy_sha256": report.policy_sha256, "chain_ok": report.chain.ok,
            "calls": report.calls, "replayed": report.replayed, "unchanged": report.unchanged,
            "newly_allowed": report.newly_allowed, "transitions": transitions,
            "skipped": dict(report.skipped),
            "top_changes": [{"from": c.before.value, "to": c.after.value, "rule_id": c.rule_id,
                             "tool": c.tool, "count": c.count} for c in report.changes[:6]]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", action="append", choices=SUITES)
    parser.add_argument("--out", help="Folder for the SQLite stores (default: a temporary one).")
    parser.add_argument("--json", help="Write the figures here.")
    options = parser.parse_args()
    folder = Path(options.out or tempfile.mkdtemp(prefix="agentdojo-replay-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    for name in options.suite or SUITES:
        result = anyio.run(one_suite, name, folder)
        results.append(result)
        print(f"{name}: {result['runs']} runs recorded in {result['record_seconds']} s "
              f"({result['store']})")
        for label in ("recorded", "default", "stricter"):
            r = result[label]
            moves = ", ".join(f"{k} {v}" for k, v in sorted(r["transitions"].items())) or "none"
            print(f"  {label:9} {r['replayed']}/{r['calls']} calls replayed in {r['seconds']} s: "
                  f"{r['unchanged']} unchanged; {moves}; newly allowed {r['newly_allowed']}")
            for change in r["top_changes"][:3]:
                print(f"      {change['from']}→{change['to']} {change['tool']} by "
                      f"{change['rule_id']}: {change['count']}")
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
