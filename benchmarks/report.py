"""Render benchmark results as a table (text for the terminal, Markdown for the docs)."""

from __future__ import annotations

from typing import Any

SCENARIO_TITLES = {"200": "200 calls, 1 conversation", "1000": "1,000 calls, 1 conversation",
                   "200x1": "200 one-call conversations"}
PEER_NAMES = {"langgraph": "LangGraph `create_agent`", "openai_agents": "OpenAI Agents SDK",
              "pydantic_ai": "Pydantic AI"}


def _f(value: Any, digits: int = 1) -> str:
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return "n/a" if value is None else str(value)


def _per_call(row: dict[str, Any], scenario: str) -> float | None:
    value = row.get(scenario, {}).get("per_call_us")
    return value if isinstance(value, (int, float)) else None


def _scenarios(r: dict[str, Any]) -> list[str]:
    table = r.get("scenarios", {})
    present = {sc for row in table.values() for sc in row}
    return [sc for sc in SCENARIO_TITLES if sc in present]


def table(r: dict[str, Any]) -> str:
    lines: list[str] = []
    rows: dict[str, dict[str, Any]] = r.get("scenarios", {})
    scenarios = _scenarios(r)
    if rows and scenarios:
        floor = rows.get("floor", {})
        lines += ["## 1. CPU µs per tool round trip (median of processes; × floor)", "",
                  "| configuration | " + " | ".join(SCENARIO_TITLES[sc] for sc in scenarios)
                  + " |", "|---|" + "---:|" * len(scenarios)]
        for name, row in rows.items():
            cells = []
            for sc in scenarios:
                v, base = _per_call(row, sc), _per_call(floor, sc)
                error = row.get(sc, {}).get("error")
                cells.append(f"error: {error}" if error else
                             f"{_f(v)} ({_f(v / base if v and base else None)}×)")
            label = PEER_NAMES.get(name, "floor" if name == "floor" else f"anfitrion {name}")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
        peers = [n for n in PEER_NAMES if n in rows]
        if peers:
            lines += ["## 2. The goals: fastest peer ÷ anfitrion, anfitrion ÷ floor", "",
                      "| measure | " + " | ".join(SCENARIO_TITLES[sc] for sc in scenarios)
                      + " |", "|---|" + "---:|" * len(scenarios)]
            for config in ("memory", "sqlite", "sqlite_synchronous_normal", "postgres"):
                if config not in rows:
                    continue
                cells = []
                for sc in scenarios:
                    fastest = min((v for n in peers if (v := _per_call(rows[n], sc))),
                                  default=None)
                    mine = _per_call(rows[config], sc)
                    cells.append(_f(fastest / mine if fastest and mine else None))
                lines.append(f"| fastest peer ÷ anfitrion {config} (goal ≥ 30) | "
                             + " | ".join(cells) + " |")
            for config, goal in (("memory", 10), ("sqlite", 30)):
                if config not in rows:
                    continue
                cells = []
                for sc in scenarios:
                    mine, base = _per_call(rows[config], sc), _per_call(floor, sc)
                    cells.append(_f(mine / base if mine and base else None))
                lines.append(f"| anfitrion {config} ÷ floor (goal ≤ {goal}) | "
                             + " | ".join(cells) + " |")
            lines.append("")
        along = {n: row["1000"] for n, row in rows.items()
                 if isinstance(row.get("1000"), dict) and "at_10" in row["1000"]}
        if along:
            lines += ["## 3. Cost per call along one session (CPU µs, median of the 10 calls "
                      "before)", "", "| configuration | call 10 | call 100 | call 1,000 | "
                      "1,000 / 10 |", "|---|---:|---:|---:|---:|"]
            for name, s in along.items():
                a, b, c = s.get("at_10"), s.get("at_100"), s.get("at_1000")
                lines.append(f"| {PEER_NAMES.get(name, name)} | {_f(a)} | {_f(b)} | {_f(c)} | "
                             f"{_f(c / a if a and c else None, 2)} |")
            lines.append("")
    conc = r.get("concurrency")
    if conc:
        lines += ["## 4. Concurrency: sessions × 10 tool calls in one event loop", "",
                  "| store | sessions | calls/s | p50 latency µs | p99 latency µs |",
                  "|---|---:|---:|---:|---:|"]
        for name, c in conc.items():
            lines.append(f"| {name.rsplit('_', 1)[0]} | {_f(c.get('sessions'), 0)} | "
                         f"{_f(c.get('calls_per_s'), 0)} | {_f(c.get('p50_latency_us'))} | "
                         f"{_f(c.get('p99_latency_us'))} |"
                         if "error" not in c else f"| {name} | error: {c['error']} | | | |")
        lines.append("")
    store = r.get("store")
    if store:
        lines += ["## 5. Store", "", "| store | audit events/s (hash chain) | "
                  "approval suspend → resume (ms) |", "|---|---:|---:|"]
        for name, s in store.items():
            lines.append(f"| {name} | {_f(s.get('audit_events_per_s'), 0)} | "
                         f"{_f(s.get('approval_round_trip_ms'), 2)} |"
                         if "error" not in s else f"| {name} | error: {s['error']} | |")
        lines.append("")
    mem = r.get("memory")
    if mem:
        lines += ["## 6. Memory", "", "| measure | bytes |", "|---|---:|"]
        lines += [f"| {k} | {_f(v, 0)} |" for k, v in mem.items()]
        lines.append("")
    machine = r.get("machine")
    if machine:
        lines.append(f"Machine: {machine.get('platform')}, Python {machine.get('python')}, "
                     f"{machine.get('cpus')} CPUs; load average at start "
                     f"{machine.get('load_average_at_start')}, at end "
                     f"{machine.get('load_average_at_end')}; {r.get('repeat')} processes "
                     f"per figure; {r.get('seconds')} s.")
    return "\n".join(lines)
