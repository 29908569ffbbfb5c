"""People who approve: each with their own token and the roles they hold.

A shared token (the inbox's) says "someone who knows the token"; the two-person rule needs to
know *who*, so a request with a :class:`~anfitrion._approvals.Quorum` takes votes only from a
:class:`~anfitrion._approvals.Reviewer` a door identified by their own token. Tokens are kept
as SHA-256 digests, compared in constant time.

A reviewers file (TOML)::

    [reviewers.alice]
    roles = ["finance"]
    token_sha256 = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"

    [reviewers.bob]
    roles = ["finance", "ops"]
    token_sha256 = "..."

``anfitrion approvals reviewer-token`` prints a new token and the line to paste.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from .._approvals import Reviewer
from ..exceptions import ConfigError, UserError

__all__ = ["MIN_REVIEWER_TOKEN_CHARS", "Reviewers", "load_reviewers", "token_sha256"]

MIN_REVIEWER_TOKEN_CHARS = 16
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,79}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


def token_sha256(token: str) -> str:
    """The digest a reviewers file keeps of a token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class Reviewers:
    """The reviewers a deployment knows, by name and by token digest.

    Example:
        >>> people = Reviewers.from_tokens({"alice": ("a-long-token-for-alice", ["finance"])})
        >>> people.by_token("a-long-token-for-alice").roles
        frozenset({'finance'})
    """

    def __init__(self, entries: Iterable[tuple[Reviewer, str]] = ()) -> None:
        self._by_name: dict[str, tuple[Reviewer, str]] = {}
        for reviewer, digest in entries:
            if not _NAME.match(reviewer.name):
                raise UserError(f"bad reviewer name {reviewer.name!r}: letters, digits, "
                                 "'.', '_', '@', '-' (at most 80)")
            if not _HEX.match(digest):
                raise UserError(f"reviewer {reviewer.name}: token_sha256 must be 64 hex digits")
            if reviewer.name in self._by_name:
                raise UserError(f"reviewer {reviewer.name} is listed twice")
            if any(hmac.compare_digest(digest, d) for _, d in self._by_name.values()):
                raise UserError(f"reviewer {reviewer.name} shares a token with another")
            self._by_name[reviewer.name] = (reviewer, digest)

    @classmethod
    def from_tokens(cls, people: Mapping[str, tuple[str, Iterable[str]]]) -> Reviewers:
        """Reviewers from ``{name: (token, roles)}`` (tests, programs holding the tokens).

        Raises:
            ValueError: a token shorter than 16 characters, a bad name, a shared token.
        """
        entries = []
        for name, (token, roles) in people.items():
            if len(token) < MIN_REVIEWER_TOKEN_CHARS:
                raise UserError(f"reviewer {name}: the token needs at least "
                                 f"{MIN_REVIEWER_TOKEN_CHARS} characters")
            entries.append((Reviewer(name, frozenset(roles)), token_sha256(token)))
        return cls(entries)

    def by_token(self, token: str) -> Reviewer | None:
        """The reviewer whose token this is (every entry compared, in constant time)."""
        given = token_sha256(token)
        found: Reviewer | None = None
        for reviewer, digest in self._by_name.values():
            if hmac.compare_digest(given, digest):
                found = reviewer
        return found

    def named(self, name: str) -> Reviewer | None:
        """The reviewer called *name* (for a channel that authenticates people itself)."""
        entry = self._by_name.get(name)
        return entry[0] if entry else None

    def __len__(self) -> int:
        return len(self._by_name)


def load_reviewers(path: str | Path) -> Reviewers:
    """Read a reviewers file (module docstring), strictly.

    Raises:
        ConfigError: the file is missing, not TOML, or an entry is unknown or invalid.
    """
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read the reviewers file: {exc}") from exc
    if set(data) - {"reviewers"}:
        raise ConfigError(f"{where}: unknown table(s) {sorted(set(data) - {'reviewers'})}")
    table = data.get("reviewers", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: 'reviewers' must be a table")
    entries = []
    for name, spec in table.items():
        if not isinstance(spec, dict) or set(spec) - {"roles", "token_sha256"}:
            raise ConfigError(f"{where}: reviewers.{name}: only 'roles' and 'token_sha256'")
        roles = spec.get("roles", [])
        digest = spec.get("token_sha256")
        if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
            raise ConfigError(f"{where}: reviewers.{name}.roles must be a list of names")
        if not isinstance(digest, str):
            raise ConfigError(f"{where}: reviewers.{name}.token_sha256 is required")
        entries.append((Reviewer(name, frozenset(roles)), digest.lower()))
    try:
        return Reviewers(entries)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
