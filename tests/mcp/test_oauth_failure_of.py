"""One helper names why an OAuth connection or flow ended (issue #29: the inbox's connect flow
and the toolset's connection used two copies of it)."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp", reason="the mcp extra")

from anfitrion.mcp._oauth import AccountNotConnected, CredentialError, failure_of


def test_the_credential_error_inside_nested_task_groups_is_the_failure() -> None:
    inner = AccountNotConnected("files", "alice")
    group = BaseExceptionGroup("outer", [OSError("reset"),
                                         ExceptionGroup("inner", [ValueError("x"), inner])])
    assert failure_of(group) is inner
    assert isinstance(failure_of(group), CredentialError)


def test_without_a_credential_error_the_first_leaf_is_the_failure() -> None:
    first = OSError("reset")
    assert failure_of(ExceptionGroup("g", [ExceptionGroup("h", [first]), ValueError()])) \
        is first
    plain = RuntimeError("boom")
    assert failure_of(plain) is plain
