"""Render benchmark results as a table (text for the terminal, Markdown for the docs)."""

from __future__ import annotations

from typing import Any


def _f(value: Any, digits: int = 1) -> str:
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return "n/a" if value is None else str(value)


def table(r: dict[str, Any]) -> str:
    lines: list[str] = []
    floor = r.get("floor", {}).get("per_call_us")
    if floor:
        lines += ["## 1. Host overhead per tool round trip (CPU µs, median of processes)",
                  "", "| configuration | µs per call | × floor |", "|---|---:|---:|",
                  f"| floor (json + compiled schema + dispatch) | {_f(floor)} | 1.0 |"]
        for name, m in r.get("host", {}).items():
            v = m.get("per_call_us")
            lines.append(f"| anfitrion, {name} | {_f(v)} | "
                         f"{_f(v / floor if v else None)} |")
        lines.append("")
    peers = r.get("peers")
    if peers:
        best = min(p["200"].get("per_call_us", float("inf")) for p in peers.values())
        host = r.get("host", {}).get("memory", {}).get("per_call_us")
        lines += ["## 2. Peers, same workload (CPU µs per call)", "",
                  "| framework | 1-call conversation | 200-call conversation | "
                  "peer / anfitrion (200) |", "|---|---:|---:|---:|"]
        for name, p in peers.items():
            v = p["200"].get("per_call_us")
            lines.append(f"| {name} | {_f(p['1'].get('per_call_us'))} | {_f(v)} | "
                         f"{_f(v / host if v and host else None)} |")
        if host:
            lines.append(f"| **anfitrion (memory)** | | {_f(host)} | fastest peer / anfitrion "
                         f"= {_f(best / host)} |")
        lines.append("")
    scaling = r.get("scaling")
    if scaling:
        lines += ["## 3. Cost per call along one session (CPU µs, median of the 10 calls before)",
                  "", "| framework | call 10 | call 100 | call 1,000 | 1,000 / 10 |",
                  "|---|---:|---:|---:|---:|"]
        for name, s in scaling.items():
            a, b, c = s.get("at_10"), s.get("at_100"), s.get("at_1000")
            lines.append(f"| {name} | {_f(a)} | {_f(b)} | {_f(c)} | "
                         f"{_f(c / a if a and c else None, 2)} |")
        lines.append("")
    conc = r.get("concurrency")
    if conc:
        lines += ["## 4. Concurrency: sessions × 10 tool calls in one event loop", "",
                  "| store | sessions | calls/s | p50 latency µs | p99 latency µs |",
                  "|---|---:|---:|---:|---:|"]
        for name, c in conc.items():
            lines.append(f"| {name} | {_f(c.get('sessions'), 0)} | {_f(c.get('calls_per_s'), 0)}"
                         f" | {_f(c.get('p50_latency_us'))} | {_f(c.get('p99_latency_us'))} |"
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
    return "\n".join(lines)
