"""Travel: hotels, restaurants, car rental, flights, calendar and e-mail of a traveller."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._base import EMAIL_VERBS, EVENT_VERBS, SuiteOperator, allow, no_participants

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


DATAFLOW: dict[str, dict[str, Any]] = {
    "send_email": {"sinks": {"recipients": "recipient", "cc": "recipient", "bcc": "recipient",
                             "attachments.file_id": "reference"},
                   "outward": ["subject", "body"], "service_ids": ["id_"],
                   "verbs": EMAIL_VERBS},
    "create_calendar_event": {"sinks": {"participants": "recipient"},
                              "outward": ["title", "description", "location"],
                              "service_ids": ["id_"], "verbs": EVENT_VERBS},
    "cancel_calendar_event": {"destructive": ["event_id"]},
    # a booking chooses a business: it must be one the user named (listings are third-party)
    "reserve_hotel": {"sinks": {"hotel": "reference"}},
    "reserve_car_rental": {"sinks": {"company": "reference"}},
    "reserve_restaurant": {"sinks": {"restaurant": "reference"}},
    **{tool: {"service_ids": ["id_", "participants"]}
       for tool in ("search_calendar_events", "get_day_calendar_events")},
}
OPERATOR = dataclasses.replace(OPERATOR, dataflow=DATAFLOW)
