"""Shared helpers for policy tests: an injected clock and a small mail/drafts toolbox."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from anfitrion import Effect, Toolbox


class FakeClock:
    """A clock that moves only when told to (no sleeps in tests)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def office_tools(sent: list[dict[str, str]] | None = None) -> Toolbox:
    """read_file (read), write_draft and send_email (write); sends are recorded in *sent*."""
    tools = Toolbox()
    outbox = sent if sent is not None else []

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def write_draft(path: str, text: str) -> str:
        """Write a draft."""
        return f"wrote {path}"

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def send_email(to: str, subject: str, body: str) -> str:
        """Send an e-mail."""
        outbox.append({"to": to, "subject": subject, "body": body})
        return f"sent to {to}"

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    return tools
