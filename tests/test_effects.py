"""Effect keys (anfitrion._effects): equal effects share a key, different ones never do."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from anfitrion._effects import effect_key

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
ARGS = st.dictionaries(st.text(max_size=8), JSON, max_size=4)


@given(ARGS, ARGS)
def test_two_argument_objects_share_a_default_key_only_when_equal(a: dict[str, Any],
                                                                 b: dict[str, Any]) -> None:
    ka = effect_key(tool="t", arguments=a, principal_id="p", session_id="s")
    kb = effect_key(tool="t", arguments=b, principal_id="p", session_id="s")
    assert (ka.key == kb.key) is (a == b and _same_types(a, b))


@given(JSON, JSON)
def test_a_template_field_shares_a_key_only_for_equal_values(x: Any, y: Any) -> None:
    kx = effect_key(tool="t", arguments={"id": x, "other": 1}, principal_id="p",
                    session_id="s", template="a:{id}")
    ky = effect_key(tool="t", arguments={"id": y, "other": 2}, principal_id="p",
                    session_id="s", template="a:{id}")
    assert (kx.key == ky.key) is (x == y and _same_types(x, y))
    assert len(kx.display) <= 201


def _same_types(a: Any, b: Any) -> bool:
    """JSON equality: Python says True == 1; canonical JSON does not."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    return True
