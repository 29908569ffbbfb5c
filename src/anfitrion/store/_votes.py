"""Counting the votes on a request that needs a quorum: one rule, shared by every backend.

The backends record a vote and apply :func:`tally` in the same transaction (compare-and-set
on the request's answer), so concurrent votes never record two answers or lose a vote.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._approvals import ApprovalAnswer, ApprovalVote
from ._rows import load_json, row_of

__all__ = ["tally", "vote_of"]


def vote_of(text: str) -> ApprovalVote:
    """One stored vote (``anfitrion_approval_votes.data``)."""
    with row_of("anfitrion_approval_votes", "data"):
        return ApprovalVote.from_dict(load_json(text))


def tally(votes: Sequence[ApprovalVote], required: int) -> ApprovalAnswer | None:
    """The answer *votes* (in the order they were cast) add up to, or ``None`` yet.

    A rejection decides at once (one qualified person's no is enough); *required* distinct
    approvals approve. The answer names every approver, in order.
    """
    for vote in votes:
        if not vote.approved:
            return ApprovalAnswer(vote.request_id, vote.digest, False, vote.voter,
                                  vote.note, vote.at)
    approving = [v for v in votes if v.approved]
    if len(approving) < required or not approving:
        return None
    last = approving[-1]
    notes = "; ".join(f"{v.voter}: {v.note}" for v in approving if v.note)
    return ApprovalAnswer(last.request_id, last.digest, True,
                          ", ".join(v.voter for v in approving), notes, last.at)
