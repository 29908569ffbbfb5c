"""``Policy.with_rules`` and ``Policy.with_clock``: a copy keeps every setting of the policy it
copies, ``[media]`` included (a copy that sent images again undid ``send = false``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from anfitrion._media import MediaSettings
from anfitrion.policy import Policy, ToolRule, load_policy

from .conftest import FakeClock

POLICY = """
[media]
send = false
max_per_result = 1

[defaults]
read = "ask"

[budgets]
tool_calls = 40

[approvals]
ttl = "5m"
max_edits = 1

[principals.ana]
roles = ["editor"]

[tools."mail.send"]
effect = "write"

[shadow]
policy = "candidate.toml"

[[lint.silence]]
finding = "*"
tool = "x"
reason = "ours"
"""

COPIES: dict[str, tuple[str, Callable[[Policy], Policy]]] = {
    "with_rules": ("rules", lambda p: p.with_rules(ToolRule("deploy", "deny"))),
    "with_clock": ("clock", lambda p: p.with_clock(FakeClock())),
}
"""Each copying method of Policy: the setting it changes, and a call of it."""


def _settings(policy: Policy) -> dict[str, Any]:
    """Every setting of *policy*: its public attributes (private ones are derived or caches)."""
    return {name: value for name, value in vars(policy).items() if not name.startswith("_")}


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    (tmp_path / "candidate.toml").write_text('[defaults]\nwrite = "deny"\n')
    (tmp_path / "anfitrion.toml").write_text(POLICY)
    loaded = load_policy(tmp_path / "anfitrion.toml")
    loaded.clock = FakeClock()  # set, not copied: the copies are what is under test
    return loaded


def test_every_copying_method_of_a_policy_is_covered_here() -> None:
    """A new ``with_…`` method must be added to COPIES, so it is checked below."""
    assert {name for name in dir(Policy) if name.startswith("with_")} == set(COPIES)


def test_the_policy_under_test_sets_every_setting_to_something_other_than_its_default(
        policy: Policy) -> None:
    """Otherwise a copy that dropped a setting would still look equal."""
    fresh = _settings(Policy())
    assert set(_settings(policy)) == set(fresh)
    assert [name for name, value in _settings(policy).items() if value == fresh[name]] == []


@pytest.mark.parametrize("method", sorted(COPIES))
def test_a_copy_keeps_the_media_settings(policy: Policy, method: str) -> None:
    copy = COPIES[method][1](policy)
    assert copy.media == policy.media == MediaSettings(send=False, max_per_result=1)
    assert not copy.media.send  # images stay summarised: none reach the model


@pytest.mark.parametrize("method", sorted(COPIES))
def test_a_copy_keeps_every_setting_but_the_one_it_changes(policy: Policy, method: str) -> None:
    changed, make = COPIES[method]
    copy = make(policy)
    before, after = _settings(policy), _settings(copy)
    assert after[changed] != before[changed]
    assert {k: v for k, v in after.items() if k != changed} == \
        {k: v for k, v in before.items() if k != changed}


def test_a_new_clock_leaves_the_hash_and_every_decision_input_alone(policy: Policy) -> None:
    copy = policy.with_clock(FakeClock())
    assert copy.sha256 == policy.sha256 and copy.describe() == policy.describe()


def test_added_rules_come_after_the_policy_s_own_and_are_in_its_hash(policy: Policy) -> None:
    rule = ToolRule("deploy", "deny")
    copy = policy.with_rules(rule)
    assert copy.rules == (*policy.rules, rule) and copy.sha256 != policy.sha256


@pytest.mark.parametrize("media", [MediaSettings(send=False), MediaSettings(max_per_result=1),
                                   MediaSettings(types=frozenset({"image/png"})),
                                   MediaSettings(max_bytes=1024)])
def test_the_hash_covers_the_media_settings(media: MediaSettings) -> None:
    """A policy built in code that sends no images must not hash like one that does: the
    audit log's policy_sha256 tells an auditor which policy decided."""
    rules = [ToolRule("search", "allow")]
    assert Policy(rules, media=media).sha256 != Policy(rules).sha256
    assert Policy(rules, media=media).sha256 == Policy(rules, media=media).sha256
    assert Policy(rules, media=MediaSettings()).sha256 == Policy(rules).sha256
