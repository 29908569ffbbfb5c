"""Slack: channels, direct messages, invitations, and a browser for the web."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._base import SuiteOperator, only_hosts

OPERATOR = SuiteOperator(
    write_tools=frozenset({
        "add_user_to_channel", "send_direct_message", "send_channel_message",
        "invite_user_to_slack", "remove_user_from_slack", "post_webpage",
    }),
    # nothing: messages and pages are written by anyone, and so are channel names (an external
    # partner names a shared channel) and user names (people choose their own)
    trusted_tools=frozenset(),
    rules=(
        # reading the web is the job; publishing is only for the company's own site
        only_hosts("post_webpage", ["our-company.com"]),
    ),
)


DATAFLOW: dict[str, dict[str, Any]] = {
    # the words that ask for each action: a member the user named for one (adding them to
    # a channel) is not theirs for another (a direct message); a reply goes where the
    # message was, a channel, so it asks for no direct message
    "add_user_to_channel": {"sinks": {"user": "recipient", "channel": "channel"},
                            "verbs": ["add", "invite", "include"]},
    "send_direct_message": {"sinks": {"recipient": "recipient"}, "outward": ["body"],
                            "verbs": ["send", "message", "dm", "tell", "write", "ask",
                                      "notify", "inform"]},
    "send_channel_message": {"sinks": {"channel": "channel"}, "outward": ["body"],
                             "verbs": ["send", "post", "message", "reply", "write", "tell",
                                       "ask", "announce", "share"]},
    "invite_user_to_slack": {"sinks": {"user": "recipient", "user_email": "recipient"},
                             "verbs": ["invite", "add"]},
    "remove_user_from_slack": {"destructive": ["user"]},
    "post_webpage": {"sinks": {"url": "url"}, "outward": ["content"],
                     "verbs": ["post", "publish", "upload"]},
    # Slack itself lists channels and members, and says who sent each message
    "get_channels": {"service_ids": ["*"]},
    # the workspace's member list is a directory: its names prove a recipient
    "get_users_in_channel": {"service_ids": ["*"], "directory": True},
    # a channel message's "recipient" is its channel (an object); its sender is a party
    "read_channel_messages": {"service_ids": ["sender", "recipient"], "parties": ["sender"]},
    "read_inbox": {"service_ids": ["sender", "recipient"]},
}
OPERATOR = dataclasses.replace(OPERATOR, dataflow=DATAFLOW)
