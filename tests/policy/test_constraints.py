"""Each argument constraint, with the bypass attempts it must stop."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion.policy import (
    EmailDomain,
    LengthRange,
    Matches,
    NumberRange,
    OneOf,
    PathInside,
    UrlAllowed,
    canonical_host,
)

# -- paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["drafts/a.md", "drafts/sub/b.md", "./drafts/a.md",
                                  "drafts//a.md", "drafts/x/../a.md", "drafts"])
def test_relative_paths_inside_the_root_pass(path: str) -> None:
    assert PathInside("drafts").check(path) is None


@pytest.mark.parametrize("path", [
    "../etc/passwd", "drafts/../secrets.txt", "drafts/../../etc/passwd",
    "drafts/./../x", "drafts2/a.md", "draftsX", "/drafts/a.md", "/etc/passwd",
    "secrets/drafts/a.md", "drafts\\..\\secrets", "~/drafts/a.md", "drafts/a\x00.md",
    "drafts/\u202egpj.exe", "", "Drafts/a.md",
])
def test_relative_root_refuses_traversal_prefix_confusion_and_odd_characters(path: str) -> None:
    assert PathInside("drafts").check(path) is not None


def test_absolute_root_is_compared_component_by_component() -> None:
    rule = PathInside("/w/proj")
    assert rule.check("/w/proj/src/main.py") is None
    assert rule.check("/w/proj") is None
    assert rule.check("/w/proj2/evil") is not None
    assert rule.check("/w/proj/../proj2/evil") is not None
    assert rule.check("/w/projects") is not None
    assert rule.check("w/proj/x") is not None
    assert rule.check("//w/proj/x") is None  # POSIX: a doubled slash is the same directory


def test_non_strings_are_not_paths() -> None:
    assert PathInside("drafts").check(["drafts/a"]) is not None
    assert PathInside("drafts").check(None) is not None


def test_a_base_directory_anchors_relative_roots_and_arguments(tmp_path: Path) -> None:
    rule = PathInside("drafts", base=str(tmp_path))
    assert rule.check("drafts/a.md") is None
    assert rule.check(str(tmp_path / "drafts" / "a.md")) is None
    assert rule.check(str(tmp_path / "other" / "a.md")) is not None
    assert rule.check("drafts/../other") is not None


def test_a_symlink_out_of_the_root_is_caught_when_symlinks_are_resolved(tmp_path: Path) -> None:
    root = tmp_path / "drafts"
    root.mkdir()
    outside = tmp_path / "secrets"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    lexical = PathInside(str(root))
    resolved = PathInside(str(root), resolve_symlinks=True)
    escaping = str(root / "link" / "key.pem")
    assert lexical.check(escaping) is None  # lexically inside: this is why the option exists
    assert resolved.check(escaping) is not None
    assert resolved.check(str(root / "ok.md")) is None
    # a root that is itself reached through a symlink still works
    (tmp_path / "alias").symlink_to(root)
    assert PathInside(str(tmp_path / "alias"), resolve_symlinks=True).check(
        str(root / "ok.md")) is None


def test_symlinked_dotdot_is_resolved_physically_not_lexically(tmp_path: Path) -> None:
    """drafts/link/.. is the link target's parent on disk, not drafts/."""
    root = tmp_path / "drafts"
    (tmp_path / "deep" / "er").mkdir(parents=True)
    root.mkdir()
    (root / "link").symlink_to(tmp_path / "deep" / "er")
    path = os.path.join(str(root), "link", "..", "x")
    assert PathInside(str(root), resolve_symlinks=True).check(path) is not None


def test_path_inside_rejects_unusable_configuration() -> None:
    with pytest.raises(ValueError):
        PathInside("")
    with pytest.raises(ValueError):
        PathInside("drafts", resolve_symlinks=True)
    with pytest.raises(ValueError):
        PathInside("drafts", base="relative/base")


# -- plain values ------------------------------------------------------------------------------


def test_one_of_does_not_confuse_booleans_and_numbers() -> None:
    assert OneOf([1, "a"]).check(True) is not None
    assert OneOf([True]).check(1) is not None
    assert OneOf([1]).check(1.0) is None
    assert OneOf(["low", "high"]).check("low") is None
    assert OneOf(["low", "high"]).check("LOW") is not None
    assert OneOf(["low"]).check(["low"]) is not None
    with pytest.raises(ValueError):
        OneOf([])
    with pytest.raises(ValueError):
        OneOf([{"a": 1}])


def test_number_range_is_inclusive_and_strict_about_types() -> None:
    rule = NumberRange(0, 100)
    assert rule.check(0) is None
    assert rule.check(100) is None
    assert rule.check(99.5) is None
    assert rule.check(100.0001) is not None
    assert rule.check(-1) is not None
    assert rule.check("50") is not None
    assert rule.check(True) is not None
    assert rule.check(10**400) is not None
    assert NumberRange(maximum=5).check(-(10**400)) is None
    with pytest.raises(ValueError):
        NumberRange(5, 1)
    with pytest.raises(ValueError):
        NumberRange()


def test_length_range_counts_characters_and_wants_strings() -> None:
    rule = LengthRange(1, 5)
    assert rule.check("héllo") is None
    assert rule.check("") is not None
    assert rule.check("toolong") is not None
    assert rule.check(12345) is not None
    with pytest.raises(ValueError):
        LengthRange(-1)
    with pytest.raises(ValueError):
        LengthRange(5, 1)


# -- regular expressions -----------------------------------------------------------------------


def test_matches_is_a_full_match_not_a_search() -> None:
    rule = Matches(r"[A-Z]{3}-\d{4}")
    assert rule.check("ABC-1234") is None
    assert rule.check("ABC-1234; DROP TABLE") is not None
    assert rule.check("xABC-1234") is not None
    assert rule.check("ABC-1234\n") is not None
    assert rule.check(1234) is not None


@pytest.mark.parametrize("pattern", [
    r"(a+)+$", r"(a*)*", r"(\w+\s?)*$", r"(a|aa)+", r"(foo|bar)*", r"(a)\1",
    r"(?=a)a", r"(?!a)b", r"(?<=a)b", r"(a)?(?(1)b|c)", r"((ab)*c)*",
])
def test_backtracking_prone_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="exponential"):
        Matches(pattern)


def test_an_invalid_pattern_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid regular expression"):
        Matches("([a-z")


def test_several_adjacent_repeats_lower_the_input_cap() -> None:
    assert Matches(r"[a-z]+").input_cap == 1024
    assert Matches(r"\w+@\w+").input_cap == 1024
    assert Matches(r".*.*.*=").input_cap == 215
    slow = Matches(r"[a-z]*[a-z]*[a-z]*[a-z]*=")
    assert slow.input_cap == 56
    assert slow.check("a" * 57) == "is longer than 56 characters"
    assert slow.check("a" * 56) is not None  # matched, and fails: there is no "="
    assert Matches(r"[a-z]+", max_input_length=10).check("a" * 11) is not None


# -- hosts, URLs, e-mail -----------------------------------------------------------------------


@pytest.mark.parametrize(("host", "expected"), [
    ("Example.COM", "example.com"), ("example.com.", "example.com"),
    ("bücher.de", "xn--bcher-kva.de"), ("xn--bcher-kva.de", "xn--bcher-kva.de"),
    ("exаmple.com", "xn--exmple-4nf.com"),  # Cyrillic а: a different name
    ("127.0.0.1", "127.0.0.1"), ("[::1]", "::1"),
    ("faß.de", None),  # IDNA 2003 maps to fass.de, IDNA 2008 keeps ß: ambiguous
    ("ｅｘａｍｐｌｅ.com", None),  # full-width letters: mapped, ambiguous
    ("example。com", None),  # ideographic full stop
    ("exa\u200bmple.com", None), ("exa\u200dmple.com", None), ("example.com\u202e", None),
    ("ex%61mple.com", None), ("exa mple.com", None), ("a..b", None), ("-a.com", None),
    ("xn--zz.com", None), ("", None), ("a" * 64 + ".com", None), ("under_score.com", None),
])
def test_canonical_host(host: str, expected: str | None) -> None:
    assert canonical_host(host) == expected


URLS = UrlAllowed(["example.com", "*.docs.example.com"], schemes=["https"])


@pytest.mark.parametrize("url", [
    "https://example.com/", "https://example.com", "https://EXAMPLE.com/a?b=c#d",
    "https://example.com.:443/x", "https://api.docs.example.com/v1",
])
def test_allowed_urls_pass(url: str) -> None:
    assert URLS.check(url) is None


@pytest.mark.parametrize("url", [
    "https://good.com@evil.com/", "https://example.com@evil.com/",
    "https://evil.com#@example.com", "https://evil.com?@example.com",
    "https://example.com:pass@evil.com/", "https://user@example.com/",
    "https://evil.com\\@example.com", "https://evil.com\\.example.com",
    "http://example.com/", "javascript:alert(1)//example.com", "file:///etc/passwd",
    "https://exаmple.com/", "https://ｅｘａｍｐｌｅ.com/", "https://exa\u200bmple.com/",
    "https://example.com.evil.com/", "https://evilexample.com/", "https://docs.example.com/",
    "https://example.com:99999/", "https://ex%61mple.com/", "//example.com/x",
    "https://example.com /", " https://example.com/", "https://example.com\n.evil.com",
    "https:///example.com", "example.com", 42,
])
def test_url_bypass_attempts_are_refused(url: object) -> None:
    assert URLS.check(url) is not None


def test_url_allow_list_entries_are_validated_and_idna_normalised() -> None:
    assert UrlAllowed(["Bücher.de"]).check("https://xn--bcher-kva.de/") is None
    assert UrlAllowed(["bücher.de"]).check("https://bücher.de/") is None
    with pytest.raises(ValueError):
        UrlAllowed(["faß.de"])
    with pytest.raises(ValueError):
        UrlAllowed("example.com")
    with pytest.raises(ValueError):
        UrlAllowed(["example.com"], schemes=["ht tp"])


MAIL = EmailDomain(["example.com"])


@pytest.mark.parametrize("address", ["ana@example.com", "ana.b+tag@EXAMPLE.com",
                                     "ana@example.com."])
def test_plain_addresses_at_the_domain_pass(address: str) -> None:
    assert MAIL.check(address) is None


@pytest.mark.parametrize("address", [
    "eve@evil.com", "eve@example.com.evil.com", "eve@evilexample.com", "eve@sub.example.com",
    "Ana <eve@evil.com>", "ana@example.com <eve@evil.com>", "eve@evil.com, ana@example.com",
    "ana@example.com,eve@evil.com", "eve@evil.com@example.com", '"eve@evil.com"@example.com',
    "ana@example.com(comment)", "eve@[192.0.2.1]", "ana@exаmple.com", "ana@ｅｘａｍｐｌｅ.com",
    "ana@exa\u200bmple.com", "ana@example.com\n", "ana\n@example.com", " ana@example.com",
    "@example.com", "ana@", "example.com", ".ana@example.com", "a..b@example.com",
    "ana@example.com\u202e", "a" * 65 + "@example.com", ["ana@example.com"], None,
])
def test_email_bypass_attempts_are_refused(address: object) -> None:
    assert MAIL.check(address) is not None


def test_email_subdomains_need_a_wildcard_entry() -> None:
    rule = EmailDomain(["*.example.com"])
    assert rule.check("ana@mail.example.com") is None
    assert rule.check("ana@example.com") is not None


@given(st.text(max_size=60))
def test_an_accepted_address_really_ends_at_the_allowed_domain(text: str) -> None:
    if MAIL.check(text) is None:
        assert text.lower().rstrip(".").endswith("@example.com")
        assert text.count("@") == 1


@given(st.text(max_size=40), st.sampled_from(["https://", "https://example.com", ""]))
def test_an_accepted_url_really_has_the_allowed_host(text: str, prefix: str) -> None:
    url = prefix + text
    if URLS.check(url) is None:
        host = urllib.parse.urlsplit(url).hostname or ""
        assert host.rstrip(".") in ("example.com",) or host.endswith(".docs.example.com")


@given(st.text(max_size=30))
def test_canonical_hosts_are_ascii_or_none(text: str) -> None:
    found = canonical_host(text)
    assert found is None or (found.isascii() and found == found.lower())
