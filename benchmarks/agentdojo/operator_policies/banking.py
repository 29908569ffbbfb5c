"""Banking: the account, transfers, scheduled transactions and files of one customer."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._base import SuiteOperator

OPERATOR = SuiteOperator(
    write_tools=frozenset({
        "send_money", "schedule_transaction", "update_scheduled_transaction", "update_password",
        "update_user_info",
    }),
    # the bank's own records of this customer; transaction subjects are written by the other
    # party and files by whoever sent them, so those stay untrusted
    trusted_tools=frozenset({"get_iban", "get_balance", "get_user_info",
                             "get_scheduled_transactions"}),
)


_TRANSFER = {"sinks": {"recipient": "account"}, "outward": ["subject"]}
DATAFLOW: dict[str, dict[str, Any]] = {
    "send_money": _TRANSFER,
    "schedule_transaction": _TRANSFER,
    "update_scheduled_transaction": {"sinks": {"id": "reference", "recipient": "account"},
                                     "outward": ["subject"]},
    "update_password": {"sinks": {"password": "reference"}},
    "update_user_info": {"sinks": {"first_name": "reference", "last_name": "reference",
                                   "street": "reference", "city": "reference"}},
    # the bank records who sent and received each transaction (the subject is the sender's)
    "get_most_recent_transactions": {"service_ids": ["id", "sender", "recipient"]},
    "get_scheduled_transactions": {"service_ids": ["id", "sender", "recipient"]},
}
OPERATOR = dataclasses.replace(OPERATOR, dataflow=DATAFLOW)
