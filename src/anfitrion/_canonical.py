"""Canonical JSON and digests: the one place where "the same value" is defined."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# One encoder for every call: ``json.dumps`` with these options builds an identical one each
# time (the encoder keeps no state between calls).
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                            allow_nan=False)


def canonical_json(value: Any) -> str:
    """Serialise *value* deterministically: sorted keys, no spaces, UTF-8 characters kept."""
    return _ENCODER.encode(value)


def digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of *value*."""
    return hashlib.sha256(_ENCODER.encode(value).encode("utf-8")).hexdigest()
