"""Reviewers files are read strictly: each person their own token (kept as a digest) and roles."""

from __future__ import annotations

from pathlib import Path

import pytest

from anfitrion.channels import Reviewers, load_reviewers, token_sha256
from anfitrion.exceptions import ConfigError

DIGEST = token_sha256("alice-own-token-0123456789")


def test_a_reviewers_file_finds_each_person_by_their_token_only(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(f'[reviewers.alice]\nroles = ["finance"]\ntoken_sha256 = "{DIGEST}"\n')
    reviewers = load_reviewers(path)
    alice = reviewers.by_token("alice-own-token-0123456789")
    assert alice is not None and alice.name == "alice" and alice.roles == {"finance"}
    assert reviewers.by_token("alice-own-token-012345678") is None
    assert reviewers.by_token(DIGEST) is None  # the digest itself is not a token
    assert reviewers.named("alice") == alice and reviewers.named("bob") is None


@pytest.mark.parametrize("text", [
    "[reviewers.alice]\nroles = []\n",  # no token
    '[reviewers.alice]\ntoken_sha256 = "abc"\n',
    f'[reviewers.alice]\ntoken = "plain"\ntoken_sha256 = "{DIGEST}"\n',
    f'[reviewers.alice]\nroles = "finance"\ntoken_sha256 = "{DIGEST}"\n',
    f'[reviewers."bad name"]\ntoken_sha256 = "{DIGEST}"\n',
    f'[reviewers.a]\ntoken_sha256 = "{DIGEST}"\n[reviewers.b]\ntoken_sha256 = "{DIGEST}"\n',
    f'[people.a]\ntoken_sha256 = "{DIGEST}"\n',
    "not toml = = =",
])
def test_a_bad_reviewers_file_is_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "r.toml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        load_reviewers(path)


def test_a_short_token_is_refused() -> None:
    with pytest.raises(ValueError, match="16"):
        Reviewers.from_tokens({"alice": ("short", ["x"])})
