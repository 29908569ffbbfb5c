"""What a reviewer sees: invisible characters, look-alike domains, diffs, the message as sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion.web._render import argument_views, email_preview, file_diff, findings, punycode


def test_findings_name_bidi_zero_width_and_control_characters() -> None:
    found = findings({"to": "bob\u202e@x.com", "name": "ad\u200bmin", "cmd": "ls\x1b[2J",
                      "nested": {"list": ["ok", "a\u2066b"]}})
    assert "to contains a bidi control character (U+202E RLO): text may display reordered" \
        in found
    assert "name contains an invisible character (U+200B ZWSP)" in found
    assert "cmd contains a control character (U+001B)" in found
    assert any(f.startswith("nested.list[1] contains a bidi control") for f in found)


def test_plain_arguments_have_no_findings() -> None:
    assert findings({"to": "bob@example.com", "body": "Hello,\n\tBob", "n": 3}) == []


def test_non_ascii_domains_are_shown_in_punycode() -> None:
    assert punycode("bücher.example") == "xn--bcher-kva.example"
    assert punycode("example.com") is None
    found = findings({"url": "https://pаypal.com/login", "to": "ceo@bücher.example"})
    assert "url names a non-ASCII domain pаypal.com = xn--pypal-4ve.com" in found
    assert "to names a non-ASCII domain bücher.example = xn--bcher-kva.example" in found


def test_a_domain_that_is_not_valid_idna_still_gets_an_ascii_form() -> None:
    assert punycode("evil\u202e.com") is not None


def test_argument_views_show_every_value_in_full_sorted_by_name() -> None:
    views = argument_views({"b": "x" * 5000, "a": {"k": [1, 2]}})
    assert [v.name for v in views] == ["a", "b"]
    assert views[1].length == 5000
    assert views[1].text == "x" * 5000
    assert "⏎" not in views[0].text  # JSON layout newlines are not content


@given(st.text())
def test_argument_views_never_show_a_bidi_or_zero_width_character(text: str) -> None:
    shown = argument_views({"v": text})[0].text
    assert not any(c in shown for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068"
                   "\u2069\u200b\u200c\u200d\u2060\ufeff")


def test_file_diff_refuses_a_path_outside_the_root(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "secret.txt").write_text("top secret", encoding="utf-8")
    shown = file_diff({"path": "../secret.txt", "content": "x"}, tmp_path / "root")
    assert shown is not None
    assert "outside the files root" in shown
    assert "top secret" not in shown


def test_file_diff_of_a_new_file_and_of_an_unchanged_one(tmp_path: Path) -> None:
    created = file_diff({"path": "new.md", "content": "hello\n"}, tmp_path)
    assert created is not None
    assert "+hello" in created
    assert "new file" in created
    (tmp_path / "same.md").write_text("x\n", encoding="utf-8")
    assert file_diff({"path": "same.md", "content": "x\n"}, tmp_path) == \
        "No change: the content equals the current file."
    assert file_diff({"path": "a", "content": "b"}, None) is None
    assert file_diff({"path": "a"}, tmp_path) is None


def test_email_preview_is_the_message_as_sent() -> None:
    text = email_preview({"to": ["a@example.com", "b@example.com"], "subject": "Hi",
                          "body": "Hello"})
    assert text is not None
    assert "To: a@example.com, b@example.com\n" in text
    assert "Subject: Hi\n" in text
    assert text.rstrip().endswith("Hello")
    assert email_preview({"path": "x", "content": "y"}) is None


def test_email_preview_reports_header_injection_instead_of_hiding_it() -> None:
    text = email_preview({"to": "a@example.com\nBcc: everyone@example.com", "subject": "s",
                          "body": "b"})
    assert text is not None
    assert text.startswith("This message cannot be sent as it is")


@pytest.mark.parametrize("body", [
    "Grüße aus Zürich — 4 999 €",
    "ß" * 3000,  # one line far past the 998-octet limit: base64 on the wire
    "A" * 5000 + "\nend",  # an ASCII line too long for 7bit: encoded on the wire too
    "--b\nContent-Type: text/html\nContent-Transfer-Encoding: base64\n\nPHNjcmlwdD4=\n--b--",
    "=?utf-8?b?ZXZpbA==?= and =C3=A9 stay as written in a body",
])
def test_email_preview_shows_any_body_decoded_exactly(body: str) -> None:
    text = email_preview({"to": "a@example.com", "subject": "s", "body": body})
    assert text is not None and not text.startswith("This message cannot be sent")
    assert text.split("\n\n", 1)[1].rstrip("\n") == body
    assert "Content-Transfer-Encoding" not in text.split("\n\n", 1)[0]


def test_email_preview_refuses_text_no_mail_can_carry() -> None:
    text = email_preview({"to": "a@example.com", "subject": "s", "body": "lone \ud800"})
    assert text is not None and text.startswith("This message cannot be sent as it is")


def test_a_sentences_full_stop_or_a_mention_is_no_non_ascii_domain() -> None:
    from anfitrion._approvals import show_value
    body = "Danke @José. Liebe Grüße. Café? Mail bob@exаmple.com."
    assert findings({"body": body}) == [
        "body names a non-ASCII domain exаmple.com = xn--exmple-4nf.com"]
    assert show_value(body) == ("Danke @José. Liebe Grüße. Café? Mail bob@xn--exmple-4nf.com "
                                "⟨non-ASCII domain; as written: exаmple.com⟩.")
