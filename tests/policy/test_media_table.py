"""The ``[media]`` table: what it sets, and one clear line for each thing wrong with it."""

from __future__ import annotations

import pytest

from anfitrion import ConfigError
from anfitrion._media import AUDIO_TYPES, IMAGE_TYPES, MediaSettings
from anfitrion.policy import Policy, parse_policy


def test_without_the_table_images_are_sent_and_audio_is_not() -> None:
    settings = parse_policy("").media
    assert settings == MediaSettings() == Policy.default().media
    assert settings.send and settings.types == IMAGE_TYPES
    assert not settings.types & AUDIO_TYPES


def test_the_table_sets_every_key() -> None:
    settings = parse_policy("""
[media]
send = false
types = ["image/PNG", "image/jpg", "audio/mp3"]
max_bytes = 100000
max_per_result = 1
""").media
    assert settings == MediaSettings(send=False, types=frozenset(
        {"image/png", "image/jpeg", "audio/mpeg"}), max_bytes=100000, max_per_result=1)


def test_the_table_is_part_of_the_policy_hash() -> None:
    assert parse_policy("[media]\nsend = false\n").sha256 != parse_policy("").sha256


@pytest.mark.parametrize(("text", "key", "line", "message"), [
    ("[media]\nsend = 'yes'\n", "media.send", 2, "true or false"),
    ("[media]\n\ntypes = ['text/html']\n", "media.types", 3, "cannot admit 'text/html'"),
    ("[media]\ntypes = 'image/png'\n", "media.types", 2, "a list of media types"),
    ("[media]\nmax_bytes = true\n", "media.max_bytes", 2, "an integer"),
    ("[media]\nmax_bytes = 999999999\n", "media", 1, "between 1 and 20 MiB"),
    ("[media]\nmax_per_result = -1\n", "media", 1, "between 0 and 20"),
    ("[media]\nsize = 3\n", "media.size", 2, "unknown key 'size'"),
    ("media = 3\n", "media", 1, "must be a table"),
])
def test_each_mistake_is_one_error_naming_key_and_line(text: str, key: str, line: int,
                                                       message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text)
    assert (info.value.key, info.value.line) == (key, line)
    assert message in str(info.value)
