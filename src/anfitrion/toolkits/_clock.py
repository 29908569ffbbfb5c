"""The clock: the current date and time in a named IANA time zone (read, trusted).

A zone name is checked against the IANA database at validate: anything else — a path, an
abbreviation such as ``CEST``, a typo — is refused with a message telling how to name a zone.

Example:
    >>> from datetime import datetime, UTC
    >>> tool = clock(now=lambda: datetime(2026, 1, 2, 12, 0, tzinfo=UTC))
    >>> tool.validate({"zone": "Europe/Lisbon"})
    {'zone': 'Europe/Lisbon'}
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any

from .._conversation import Provenance
from .._tools import Effect, Tool
from ..exceptions import ArgumentError

__all__ = ["clock"]


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _check_zone(arguments: Mapping[str, Any]) -> None:
    zone = arguments.get("zone", "UTC")
    if zone not in _zones():
        raise ArgumentError(
            f"unknown time zone {str(zone)[:64]!r}: name an IANA zone as Area/Location, "
            "e.g. 'Europe/Lisbon', 'America/New_York', 'Asia/Tokyo', or 'UTC' "
            "(abbreviations such as 'CET' or 'PST' and UTC offsets are not zone names)",
            field="zone")


def clock(*, now: Callable[[], datetime] | None = None) -> Tool:
    """The ``current_time`` tool.

    Args:
        now: the time source (aware datetime); the system clock by default. For tests.
    """
    source = now or (lambda: datetime.now(UTC))

    def current_time(zone: str = "UTC") -> dict[str, Any]:
        """Get the current date and time in an IANA time zone.

        Use it whenever you need today's date or the time; do not guess them.

        Args:
            zone: IANA time zone name such as "Europe/Lisbon" or "America/New_York".
        """
        local = source().astimezone(zoneinfo.ZoneInfo(zone))
        offset = local.utcoffset()
        return {"zone": zone, "iso": local.isoformat(timespec="seconds"),
                "date": local.date().isoformat(), "time": local.strftime("%H:%M:%S"),
                "weekday": local.strftime("%A"), "abbreviation": local.tzname(),
                "utc_offset_minutes": int(offset.total_seconds() // 60) if offset else 0}

    return Tool.from_function(current_time, effect=Effect.READ, provenance=Provenance.TRUSTED,
                              validator=_check_zone, idempotent=True)
