"""The secrets rule's one-scan anchor check finds every credential the per-kind checks find.

Most argument strings hold no anchor of any credential kind, and the rule skips them after
one scan; this pins that the skip never drops a string one of the kinds would have matched.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion.policy import _secrets as secrets
from anfitrion.policy._secrets import _KINDS, _PROSE_ANCHORS, find_credentials

ANCHORS = sorted({a for _, anchors, _, _ in _KINDS for a in anchors} | set(_PROSE_ANCHORS))
pieces = st.sampled_from([*ANCHORS, *(a.upper() for a in ANCHORS), *(a.title() for a in ANCHORS),
                          "sk-proj-4fG7hJ2kL9mN3pQ8rS1tV6wX", "password: hunter22", "://u:p@h",
                          "AKIAABCDEFGHIJKLMNOP", "Bearer abcdefghijklmnop1234", " ", "=", ":",
                          "K", "İ", "ſ", "\u212a"])  # characters whose case maps oddly
texts = st.lists(pieces | st.text(max_size=8), max_size=8).map("".join)


def _without_the_anchor_scan(text: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    everything = re.compile("")
    with monkeypatch.context() as m:
        m.setattr(secrets, "_EXACT_ANCHORS", everything)
        m.setattr(secrets, "_FOLDED_ANCHORS", everything)
        return find_credentials(text)


@given(texts)
@settings(max_examples=1500)
def test_the_anchor_scan_never_skips_a_string_a_kind_would_match(text: str) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert find_credentials(text) == _without_the_anchor_scan(text, monkeypatch)


def test_a_string_without_any_anchor_is_skipped_and_one_with_a_key_is_not() -> None:
    assert find_credentials("Lisboa, PT") == []
    assert find_credentials("use SK-PROJ-x and sk-proj-4fG7hJ2kL9mN3pQ8rS1tV6wX") == [
        ("an API secret key", "sk-pro…")]
    assert find_credentials("MY PASSWORD IS hunter22") != []
