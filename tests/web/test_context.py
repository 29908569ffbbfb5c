"""What the inbox shows around the call: the tool's description, the request, the warnings."""

from __future__ import annotations

from anfitrion.approvals import ApprovalRequest


def _request(**extra: object) -> ApprovalRequest:
    return ApprovalRequest.for_call(
        session_id="s1", principal_id="alice", call_id="c1", tool_name="send_email",
        tool_definition_hash="h", arguments={"to": "bob@example.com"}, effect="write",
        reason="r", rule_id="default.write", **extra)  # type: ignore[arg-type]


def test_the_tool_description_is_kept_for_display_and_is_not_part_of_the_digest() -> None:
    described = _request(tool_description="Send an e-mail.")
    assert described.digest == _request().digest
    assert ApprovalRequest.from_dict(described.to_dict()) == described


def test_a_request_stored_before_descriptions_were_recorded_still_loads() -> None:
    old_row = _request().to_dict()
    del old_row["tool_description"]
    assert ApprovalRequest.from_dict(old_row).tool_description is None
