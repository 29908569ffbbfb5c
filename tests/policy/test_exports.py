"""anfitrion.policy's public names: sorted, complete, and the old ones still there."""

from __future__ import annotations

import anfitrion.policy as policy


def test_policy_all_is_sorted_and_complete() -> None:
    assert policy.__all__ == sorted(policy.__all__, key=lambda n: (not n.isupper(), n))
    public = {n for n in vars(policy) if not n.startswith("_") and n != "annotations"}
    modules = {n for n in public if type(getattr(policy, n)).__name__ == "module"}
    assert public - modules == set(policy.__all__)


def test_the_foundation_names_are_still_exported() -> None:
    for name in ("Decision", "Policy", "PolicyContext", "Rule", "Verdict"):
        assert name in policy.__all__
