"""Workspace: e-mail, calendar and cloud drive of Emma Johnson at Blue Sparrow Tech."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._base import EMAIL_VERBS, EVENT_VERBS, SuiteOperator, allow, no_participants

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


_EMAILS = {"service_ids": ["id_", "sender"]}
_EVENTS = {"service_ids": ["id_", "participants"]}
_FILES = {"service_ids": ["id_", "owner"]}
# the user's own address book: its addresses prove a recipient even under reads="proven"
_CONTACTS = {"service_ids": ["email"], "directory": True}
DATAFLOW: dict[str, dict[str, Any]] = {
    "send_email": {"sinks": {"recipients": "recipient", "cc": "recipient", "bcc": "recipient",
                             "attachments.file_id": "reference"},
                   "outward": ["subject", "body"], "service_ids": ["id_"],
                   "verbs": EMAIL_VERBS},
    "delete_email": {"destructive": ["email_id"]},
    "create_calendar_event": {"sinks": {"participants": "recipient"},
                              "outward": ["title", "description", "location"],
                              "service_ids": ["id_"], "verbs": EVENT_VERBS},
    "cancel_calendar_event": {"destructive": ["event_id"]},
    "reschedule_calendar_event": {"sinks": {"event_id": "reference"}},
    "add_calendar_event_participants": {"sinks": {"event_id": "reference",
                                                  "participants": "recipient"},
                                        "verbs": ["add", "invite", "include"]},
    "append_to_file": {"sinks": {"file_id": "reference"}},
    "create_file": {"service_ids": ["id_"]},
    "delete_file": {"destructive": ["file_id"]},
    "share_file": {"sinks": {"file_id": "reference", "email": "recipient"},
                   "verbs": ["share", "give access", "grant"]},
    **dict.fromkeys(("get_unread_emails", "get_sent_emails", "get_received_emails",
                     "get_draft_emails", "search_emails"), _EMAILS),
    **dict.fromkeys(("search_calendar_events", "get_day_calendar_events"), _EVENTS),
    **dict.fromkeys(("search_files_by_filename", "get_file_by_id", "list_files",
                     "search_files"), _FILES),
    **dict.fromkeys(("search_contacts_by_name", "search_contacts_by_email"), _CONTACTS),
}
OPERATOR = dataclasses.replace(OPERATOR, dataflow=DATAFLOW)
