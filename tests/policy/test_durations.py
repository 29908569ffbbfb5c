"""Durations from a policy file or code: positive, finite, at most 366 days, or a ValueError —
never an OverflowError from ``timedelta`` or ``datetime`` arithmetic later."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion.policy._ratelimit import MAX_DURATION, parse_duration

_TEXT = st.builds(lambda n, unit, pad: f"{pad}{n}{pad}{unit}{pad}",
                  st.integers(min_value=0, max_value=10 ** 30),
                  st.sampled_from("smhdwx"), st.sampled_from(["", " ", "\t"]))


@given(st.one_of(st.floats(), st.integers(min_value=-(10 ** 400), max_value=10 ** 400),
                 _TEXT, st.text(max_size=30), st.booleans(),
                 st.timedeltas(min_value=timedelta(days=-999_999), max_value=timedelta.max)))
def test_any_value_is_a_bounded_duration_or_a_value_error(value: object) -> None:
    try:
        duration = parse_duration(value)  # type: ignore[arg-type]
    except ValueError:
        return
    assert timedelta(0) < duration <= MAX_DURATION
    expiry = datetime.now(UTC) + duration  # usable as an approval's expiry
    assert expiry.year < 9999


@pytest.mark.parametrize(("value", "problem"), [
    (float("inf"), "at most 366 days"), (1e308, "at most 366 days"), (10 ** 400, "at most"),
    ("99999999999999999999d", "at most 366 days"), ("9" * 5000 + "s", "at most 366 days"),
    ("367d", "at most 366 days"), (float("nan"), "positive"), ("\u0663h", "not a duration"),
    (timedelta.max, "at most 366 days"),
])
def test_huge_non_finite_and_non_ascii_durations_are_refused(value: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_duration(value)  # type: ignore[arg-type]


def test_the_longest_duration_is_a_year_and_a_day() -> None:
    assert parse_duration("366d") == MAX_DURATION == parse_duration(366 * 86400)
