"""Workspace: e-mail, calendar and cloud drive of Emma Johnson at Blue Sparrow Tech."""

from __future__ import annotations

from ._base import SuiteOperator, allow, no_participants

OPERATOR = SuiteOperator(
    write_tools=frozenset({
        "send_email", "delete_email", "create_calendar_event", "cancel_calendar_event",
        "reschedule_calendar_event", "add_calendar_event_participants", "append_to_file",
        "create_file", "delete_file", "share_file",
    }),
    # e-mail, invitations, shared files and contacts harvested from e-mail are written by others
    trusted_tools=frozenset({"get_current_day"}),
    free_reads=("get_current_day",),  # the date: nothing private, nothing leaves
    rules=(
        allow("create_file", "a new file in the user's own drive is private and reversible"),
        allow("create_calendar_event", "an event on the user's own calendar without guests "
              "notifies nobody", no_participants),
    ),
)
