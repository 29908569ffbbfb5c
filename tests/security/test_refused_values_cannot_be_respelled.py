"""A denylist (``none_of``, ``not_matches``) is only as good as its comparison: an attacker who
has read the docs respells the refused value — case, surrounding white space, full-width or
other compatibility forms, invisible characters (zero-width, soft hyphen, bidi controls) inside
it — and the rule must still refuse it, while other values pass."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from anfitrion._constraints import NoneOf, NotMatches
from anfitrion.policy import ArgumentRule

REFUSED = "ceo@example.com"
FULL_WIDTH = {chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)}


INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\u2066"]


def respell(text: str, flips: list[bool], wide: list[bool], pad: str,
            hidden: list[tuple[int, str]]) -> str:
    out = []
    for i, ch in enumerate(text):
        ch = ch.upper() if flips[i % len(flips)] else ch
        out.append(FULL_WIDTH.get(ch, ch) if wide[i % len(wide)] else ch)
    for position, mark in hidden:
        out.insert(position % (len(out) + 1), mark)
    return pad + "".join(out) + pad


variants = st.builds(respell, st.just(REFUSED), st.lists(st.booleans(), min_size=1),
                     st.lists(st.booleans(), min_size=1),
                     st.sampled_from(["", " ", "\t", "\u3000"]),
                     st.lists(st.tuples(st.integers(0, 64), st.sampled_from(INVISIBLE)),
                              max_size=4))


@given(variants)
def test_none_of_refuses_every_respelling(value: str) -> None:
    assert NoneOf([REFUSED]).check(value) is not None


@given(variants)
def test_not_matches_refuses_full_width_forms_of_a_case_blind_pattern(value: str) -> None:
    assert NotMatches(r"(?i)\s*ceo@example\.com\s*").check(value) is not None


@given(st.emails())
def test_other_addresses_pass(value: str) -> None:
    folded = unicodedata.normalize("NFKC", value).casefold().strip()
    assert (NoneOf([REFUSED]).check(value) is None) == (folded != REFUSED)


def test_invisible_characters_do_not_make_another_value_refused() -> None:
    assert NoneOf([REFUSED]).check("cfo\u200b@example.com") is None
    assert NotMatches(r"(?i)ceo@example\.com").check("cfo\u200b@example.com") is None


def test_what_not_matches_cannot_judge_is_refused() -> None:
    rule = NotMatches(r".*transfer.*", max_input_length=16)
    assert rule.check(["wire transfer"]) == "must be a string"
    assert rule.check("x" * 17) == "is longer than 16 characters"
    assert NoneOf([1]).check(True) is None  # types still count: true is not 1


def test_a_rule_denies_the_respelled_recipient_in_a_list_too() -> None:
    rule = ArgumentRule("send_email", {"to": NoneOf([REFUSED])}, "allow")
    problem = rule.violation({"to": ["bob@example.com", "CEO@example.com "]})
    assert problem == "argument 'to' is one of the refused values ('ceo@example.com')"
    assert rule.violation({"to": ["bob@example.com"]}) is None
