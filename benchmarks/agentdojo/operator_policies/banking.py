"""Banking: the account, transfers, scheduled transactions and files of one customer."""

from __future__ import annotations

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
