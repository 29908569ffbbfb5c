"""Travel: hotels, restaurants, car rental, flights, calendar and e-mail of a traveller."""

from __future__ import annotations

from ._base import SuiteOperator, allow, no_participants

OPERATOR = SuiteOperator(
    write_tools=frozenset({
        "create_calendar_event", "cancel_calendar_event", "reserve_hotel", "reserve_car_rental",
        "reserve_restaurant", "send_email",
    }),
    # listings, prices, reviews and flight data come from third parties; the profile is ours
    trusted_tools=frozenset({"get_user_information"}),
    rules=(
        allow("create_calendar_event", "an event on the user's own calendar without guests "
              "notifies nobody", no_participants),
    ),
)
