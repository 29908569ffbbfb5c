"""Reviewer entitlements: who may answer which calls, checked at answer time (issue 37).

With no entitlement recorded, whoever a door lets in may answer, as before. Once one reviewer
holds an entitlement, every answer and every vote, through every door (they all go through
:func:`anfitrion._answers.answer`), must come from a reviewer holding a grant that covers the
call:

- ``tools``: tool-name globs (default: every tool);
- ``principals``: globs of the principal the call was proposed for (default: everyone);
- ``max_amount`` of one numeric ``amount_argument``: the call's value must be present, a
  number, and at most that (a call without it is not covered).

An approval with edits ("approve with edits") must be covered for the call as edited too,
and again when the edited call is approved on resume: an edit cannot carry a call past the
editor's limit. An approver in the host's process (a terminal, a callback) is held to the same
grants: its approval of a call it is not entitled to is not recorded, and the request waits for
a reviewer who is. The grant that covered an answer is named in its audit record; a refusal is
audited (``approval.refused``). Revoking a reviewer (``anfitrion reviewers revoke``) stops
their answers and votes at once — the check reads the store on every answer — and is audited.

Entitlements live in the store (``RecordStore`` namespace ``reviewer_entitlements``), so every
door and every process sees the same ones. The name checked is the identity the door
established: a reviewer's own token, the inbox sign-in, the MCP queue's reviewer, the webhook
bridge's reviewer; for a door without one (``approvals approve --as``, a shared API token),
the name given — give reviewers their own tokens where it matters.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._approvals import ApprovalRequest
from ._redaction import redact
from .exceptions import UserError
from .store import AuditedRecordStore, RecordStore

__all__ = ["NAMESPACE", "Grant", "audit_refusal", "check", "grant", "identity_of", "revoke"]

NAMESPACE = "reviewer_entitlements"
DOORS = ("web", "api", "mcp", "webhook", "cli", "inbox")


@dataclass(frozen=True, slots=True)
class Grant:
    """One entitlement: which calls a reviewer may answer."""

    tools: tuple[str, ...] = ("*",)
    principals: tuple[str, ...] = ("*",)
    amount_argument: str | None = None
    max_amount: float | None = None

    def __post_init__(self) -> None:
        if (self.amount_argument is None) != (self.max_amount is None):
            raise UserError("an amount limit needs both the argument and the maximum")
        if self.max_amount is not None and not math.isfinite(self.max_amount):
            raise UserError("the maximum amount must be a finite number")
        if not self.tools or not self.principals:
            raise UserError("a grant names at least one tool and one principal glob")

    def gap(self, request: ApprovalRequest) -> str | None:
        """Why this grant does not cover *request* (``None``: it does)."""
        if not any(fnmatch.fnmatchcase(request.tool_name, g) for g in self.tools):
            return f"tool {request.tool_name!r} is not in {list(self.tools)}"
        if not any(fnmatch.fnmatchcase(request.principal_id, g) for g in self.principals):
            return f"principal {request.principal_id!r} is not in {list(self.principals)}"
        if self.amount_argument is not None and self.max_amount is not None:
            value = request.arguments.get(self.amount_argument)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"{self.amount_argument} is not a number"
            if value > self.max_amount:
                return f"{self.amount_argument} {value} is above {self.max_amount:g}"
        return None

    def describe(self) -> str:
        text = f"tools {','.join(self.tools)}; principals {','.join(self.principals)}"
        if self.amount_argument is not None and self.max_amount is not None:
            text += f"; {self.amount_argument} <= {self.max_amount:g}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"tools": list(self.tools), "principals": list(self.principals),
                "amount_argument": self.amount_argument, "max_amount": self.max_amount}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Grant:
        return cls(tuple(d.get("tools") or ("*",)), tuple(d.get("principals") or ("*",)),
                   d.get("amount_argument"), d.get("max_amount"))


def identity_of(approver: str) -> str:
    """The person in an approver string (``web:alice`` → ``alice``)."""
    door, sep, name = approver.partition(":")
    return name if sep and door in DOORS and name else approver


async def check(store: RecordStore, request: ApprovalRequest, who: str) -> tuple[bool, str]:
    """Whether *who* may answer *request*, and the grant that covers it or why not."""
    entries = dict(await store.list_records(NAMESPACE))
    if not entries:
        return True, ""
    name = identity_of(who)
    entry = entries.get(name)
    if entry is None:
        return False, f"{name} holds no reviewer entitlement"
    if entry.get("revoked"):
        revoked = entry["revoked"]
        return False, (f"{name}'s entitlements were revoked by {revoked.get('by', '?')}: "
                       f"{revoked.get('reason', '')}").rstrip(": ")
    gaps = []
    for grant_ in (Grant.from_dict(g) for g in entry.get("grants", ())):
        gap = grant_.gap(request)
        if gap is None:
            return True, f"entitled: {name} ({grant_.describe()})"
        gaps.append(gap)
    return False, f"{name} is not entitled to answer this call: {'; '.join(gaps) or 'no grant'}"


async def audit_refusal(store: AuditedRecordStore, request: ApprovalRequest, approver: str,
                        via: str, grounds: str) -> None:
    """The audit record of an answer refused for want of an entitlement
    (``approval.refused``)."""
    await store.append_audit("approval.refused", request.session_id, time.time(), {
        "call_id": redact(request.call_id, 80), "tool": redact(request.tool_name, 80),
        "approval_request": request.id, "approver": redact(approver, 80), "via": via,
        "detail": redact(grounds)})


async def grant(store: AuditedRecordStore, name: str, given: Grant, *, by: str) -> None:
    """Add *given* to *name*'s entitlements (lifting a revocation), audited."""
    entry = dict(await store.get_record(NAMESPACE, name) or {})
    grants: Sequence[Mapping[str, Any]] = entry.get("grants", [])
    await store.put_record(NAMESPACE, name, {"grants": [*grants, given.to_dict()],
                                              "revoked": None})
    await store.append_audit("reviewer.entitled", "", time.time(), {
        "reviewer": redact(name, 80), "grant": redact(given.describe()), "by": redact(by, 80)})


async def revoke(store: AuditedRecordStore, name: str, *, by: str, reason: str = "") -> bool:
    """Stop every answer and vote of *name* from now on, audited; False if they held none."""
    entry = await store.get_record(NAMESPACE, name)
    if entry is None:
        return False
    await store.put_record(NAMESPACE, name, {**entry, "revoked": {
        "by": by[:200], "reason": reason[:500], "at": time.time()}})
    await store.append_audit("reviewer.revoked", "", time.time(), {
        "reviewer": redact(name, 80), "by": redact(by, 80), "reason": redact(reason)})
    return True
