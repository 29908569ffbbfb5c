"""Slack: channels, direct messages, invitations, and a browser for the web."""

from __future__ import annotations

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
