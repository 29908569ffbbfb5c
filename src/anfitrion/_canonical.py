"""Canonical JSON and digests: the one place where "the same value" is defined."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Serialise *value* deterministically: sorted keys, no spaces, UTF-8 characters kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of *value*."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
