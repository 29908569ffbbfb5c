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


# the amount of a transfer is a sink too: an injection that keeps the user's counterparty and
# changes only the sum must not run unseen
_TRANSFER = {"sinks": {"recipient": "account", "amount": "money"}, "outward": ["subject"],
             # the words that ask for a payment: after untrusted content was read, money
             # goes out unasked only where the user asked for a payment
             "verbs": ["pay", "send", "transfer", "refund", "wire", "schedule", "set up"]}
DATAFLOW: dict[str, dict[str, Any]] = {
    "send_money": _TRANSFER,
    "schedule_transaction": _TRANSFER,
    "update_scheduled_transaction": {"sinks": {"id": "reference", "recipient": "account",
                                               "amount": "money"},
                                     "outward": ["subject"],
                                     "verbs": ["update", "change", "adjust", "modify",
                                               "set"],
                                     "id_nouns": {"id": ["transaction", "payment"]}},
    "update_password": {"sinks": {"password": "reference"}},
    "update_user_info": {"sinks": {"first_name": "reference", "last_name": "reference",
                                   "street": "reference", "city": "reference"}},
    # the bank records who sent and received each transaction (the subject is the sender's),
    # and the amount that moved (an attacker pays a sum to put it there); under
    # reads="proven" sender and recipient are parties: they prove no recipient
    "get_most_recent_transactions": {"service_ids": ["id", "sender", "recipient", "amount"]},
    "get_scheduled_transactions": {"service_ids": ["id", "sender", "recipient", "amount"]},
}
OPERATOR = dataclasses.replace(OPERATOR, dataflow=DATAFLOW)
