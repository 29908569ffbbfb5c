"""Rate limits over time windows, per principal and tool.

A :class:`RateLimit` is a rule that needs counts: it tells the policy which ones
(:meth:`RateLimit.rate_keys`), the gate fetches them from the store
(``Store.count_calls(principal, tool, since)``) into ``PolicyContext.rate_counts`` before
deciding, and records every executed call (``Store.record_call``) under each key a limit on
that tool reads: the tool's own name, or ``*`` / ``group:<globs>`` for a combined limit.
Calls made while no limit covered a tool are not counted. The rule itself only compares numbers.
Time comes from the policy's clock, so tests move time instead of sleeping.

Example:
    >>> limit = RateLimit("send_email", max_calls=5, per=parse_duration("1h"))
    >>> [k.id for k in limit.rate_keys("send_email")]
    ['send_email/3600s']
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from datetime import timedelta

from .._tools import BoundCall
from ..exceptions import UserError
from ._contract import BaseRule, RuleRole
from ._decision import Decision, PolicyContext, RateKey

__all__ = ["ALL_TOOLS", "MAX_DURATION", "RateLimit", "parse_duration"]

ALL_TOOLS = "*"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION = timedelta(days=366)
"""The longest duration accepted: a year and a day. Longer windows and approval lifetimes are
mistakes, and unbounded ones overflow ``timedelta`` and ``datetime`` arithmetic."""


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """``"90s"``, ``"15m"``, ``"1h"``, ``"2d"``, a number of seconds, or a timedelta; positive,
    finite and at most :data:`MAX_DURATION`.

    Raises:
        ValueError: not a positive duration in one of those forms, or longer than a year and
            a day (``inf``, ``1e308``, ``"99999999999999999999d"``).
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise UserError("a duration is a number of seconds or text like '15m'")
    elif isinstance(value, (int, float)):
        # float(int) itself overflows past 1e308; compare integers exactly instead
        seconds = value if isinstance(value, int) else float(value)
    elif isinstance(value, str) and (m := re.fullmatch(r" *([0-9]+) *([smhd]) *", value)):
        digits = m.group(1).lstrip("0") or "0"
        # past 12 digits it is too long whatever the unit; int() of thousands of digits is slow
        seconds = int(digits) * _UNITS[m.group(2)] if len(digits) <= 12 else 10 ** 12
    else:
        shown = repr(value) if not isinstance(value, str) or len(value) <= 40 \
            else repr(value[:40]) + "..."
        raise UserError(f"{shown} is not a duration: use e.g. '30s', '15m', '1h', '1d'")
    if not seconds > 0:  # NaN too
        raise UserError("a duration must be positive")
    if seconds > MAX_DURATION.total_seconds():
        raise UserError("a duration must be at most 366 days")
    duration = timedelta(seconds=seconds)
    if duration <= timedelta(0):  # 1e-7 s rounds to nothing at microsecond resolution
        raise UserError("a duration must be positive (at least a microsecond)")
    return duration


class RateLimit(BaseRule):
    """At most *max_calls* calls in any window of *per*, per principal.

    Args:
        tools: tool-name globs; each matching tool is counted on its own.
        max_calls: calls allowed in the window (the next one is denied).
        per: the window (a timedelta, seconds, or text like ``"1h"``).
        combined: count all of the principal's calls together (any tool), instead of per tool.
        reason: the operator's words for the denial.
    """

    role = RuleRole.DENY_ONLY  # it can deny a call, never allow one

    def __init__(self, tools: str | Iterable[str], *, max_calls: int,
                 per: timedelta | int | float | str, combined: bool = False,
                 reason: str | None = None, rule_id: str | None = None) -> None:
        self.tools = (tools,) if isinstance(tools, str) else tuple(tools)
        if not self.tools or not all(isinstance(t, str) and t for t in self.tools):
            raise UserError("tools must be non-empty name patterns")
        if isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0:
            raise UserError("max_calls must be a non-negative integer")
        self.max_calls = max_calls
        self.per = parse_duration(per)
        self.seconds = max(1, round(self.per.total_seconds()))
        self.combined = combined
        self.reason = reason
        self.rule_id = rule_id or f"rate:{'|'.join(self.tools)}"

    def _key(self, tool_name: str) -> RateKey | None:
        if not any(fnmatch.fnmatchcase(tool_name, t) for t in self.tools):
            return None
        if not self.combined:
            return RateKey(tool_name, self.seconds)
        # a combined limit counts under one name for its whole group of tools
        group = ALL_TOOLS if self.tools == (ALL_TOOLS,) else "group:" + "|".join(self.tools)
        return RateKey(group, self.seconds)

    def rate_keys(self, tool_name: str) -> tuple[RateKey, ...]:
        key = self._key(tool_name)
        return () if key is None else (key,)

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        key = self._key(call.name)
        if key is None:
            return None
        count = context.rate_counts.get(key.id)
        if count is None:  # nobody counted: refuse rather than guess (fail closed)
            return Decision.deny("the rate limit could not be checked", self.rule_id)
        if count >= self.max_calls:
            what = "tool calls" if self.combined else f"{call.name} calls"
            return Decision.deny(self.reason or f"at most {self.max_calls} {what} per "
                                 f"{_window(self.seconds)}; try again later", self.rule_id)
        return None


def _window(seconds: int) -> str:
    for size, name in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds % size == 0:
            n = seconds // size
            return name if n == 1 else f"{n} {name}s"
    return f"{seconds} seconds"
