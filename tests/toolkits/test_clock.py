from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from anfitrion import Principal, Provenance, ToolContext
from anfitrion.exceptions import ArgumentError
from anfitrion.toolkits import clock

NOON = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


async def now_in(zone: str) -> Any:
    t = clock(now=lambda: NOON)
    return await t.handler(t.validate({"zone": zone}), ToolContext(Principal("a"), "s", "c",
                                                                    t.name))


@pytest.mark.anyio
async def test_time_in_a_named_zone_uses_its_offset() -> None:
    result = await now_in("Europe/Lisbon")
    assert result["iso"] == "2026-07-01T13:00:00+01:00"
    assert result["utc_offset_minutes"] == 60
    assert result["weekday"] == "Wednesday"


@pytest.mark.anyio
async def test_the_default_zone_is_utc() -> None:
    t = clock(now=lambda: NOON)
    result = await t.handler(t.validate({}), ToolContext(Principal("a"), "s", "c", t.name))
    assert result["iso"] == "2026-07-01T12:00:00+00:00"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "CEST", "+01:00", "../../etc/passwd",
                                  "/usr/share/zoneinfo/UTC", "europe/lisbon", ""])
def test_an_unknown_zone_is_refused_at_validation_saying_how_to_name_one(zone: str) -> None:
    with pytest.raises(ArgumentError, match=r"unknown time zone .*Area/Location.*Europe/Lisbon"):
        clock().validate({"zone": zone})


def test_the_clock_is_a_trusted_read() -> None:
    t = clock()
    assert t.effect.value == "read"
    assert t.provenance is Provenance.TRUSTED
