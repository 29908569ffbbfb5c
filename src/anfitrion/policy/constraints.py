"""Argument constraints for the policy's rules (:class:`~anfitrion.policy.ArgumentRule`).

They live in :mod:`anfitrion.constraints`, below both the tools (whose schemas' patterns are
checked with :class:`Matches`) and the policy; this module keeps their policy path.
"""

from __future__ import annotations

from ..constraints import (
    Constraint,
    EmailDomain,
    LengthRange,
    Matches,
    NumberRange,
    OneOf,
    PathInside,
    UrlAllowed,
    ambiguous_path,
    canonical_host,
)

__all__ = [
    "Constraint",
    "EmailDomain",
    "LengthRange",
    "Matches",
    "NumberRange",
    "OneOf",
    "PathInside",
    "UrlAllowed",
    "ambiguous_path",
    "canonical_host",
]
