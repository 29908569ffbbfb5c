"""What a reviewer sees of one request, computed from the canonical arguments (no web framework).

Every function here takes the request's canonical arguments and returns plain data: the text
with invisible characters made visible, the findings a reviewer must notice (bidi overrides,
zero-width characters, non-ASCII domains shown in punycode), a unified diff for a file write and
the message as it will be sent for an e-mail draft. The HTML layer only escapes and lays it out.
"""

from __future__ import annotations

import difflib
import email.policy
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

from ..approvals import make_visible
from ..conversation import JsonValue

__all__ = ["ArgumentView", "argument_views", "email_preview", "file_diff", "findings",
           "punycode"]

MAX_DIFF_SOURCE_BYTES = 1_000_000

_BIDI = {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
         "\u2069", "\u200e", "\u200f", "\u061c"}
_ZERO_WIDTH = {"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"}
# a host name after "@" or "scheme://", up to a character that cannot be part of one
_DOMAIN = re.compile(r"(?:@|://)([^\s/:?#@<>\"'\[\](),;]+)")


@dataclass(frozen=True, slots=True)
class ArgumentView:
    """One argument as shown: its name and text made visible, and its length in characters."""

    name: str
    text: str
    length: int
    is_string: bool


def _as_text(value: JsonValue) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def argument_views(arguments: Mapping[str, JsonValue]) -> list[ArgumentView]:
    """Each argument, sorted by name, rendered in full with invisible characters shown."""
    views = []
    for name in sorted(arguments):
        value = arguments[name]
        text = _as_text(value)
        shown = make_visible(text)
        if not isinstance(value, str):  # JSON escapes newlines in strings: these are layout
            shown = shown.replace("⏎\n", "\n")
        views.append(ArgumentView(make_visible(name), shown, len(text), isinstance(value, str)))
    return views


def punycode(domain: str) -> str | None:
    """The ASCII (IDNA) form of a non-ASCII *domain*; None when it is ASCII or not encodable."""
    if domain.isascii():
        return None
    labels = []
    for label in domain.rstrip(".").split("."):
        if label.isascii():
            labels.append(label)
            continue
        try:
            labels.append(label.encode("idna").decode("ascii"))
        except UnicodeError:  # not a valid IDNA label (e.g. holds a bidi control): raw form
            labels.append("xn--" + label.encode("punycode").decode("ascii"))
    return ".".join(labels)


def _strings(value: JsonValue, path: str) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [s for k, v in sorted(value.items()) for s in _strings(v, f"{path}.{k}")]
    return []


def findings(arguments: Mapping[str, JsonValue]) -> list[str]:
    """What a reviewer must notice in the arguments, one sentence each.

    Example:
        >>> findings({"to": "bob\u202e@evil.com"})
        ['to contains a bidi control character (U+202E RLO): text may display reordered']
    """
    found: list[str] = []
    for key in sorted(arguments):
        for path, text in _strings(arguments[key], make_visible(key)):
            bidi = sorted({c for c in text if c in _BIDI})
            if bidi:
                names = ", ".join(make_visible(c).strip("⟨⟩") for c in bidi)
                found.append(f"{path} contains a bidi control character ({names}): "
                             "text may display reordered")
            zero = sorted({c for c in text if c in _ZERO_WIDTH})
            if zero:
                names = ", ".join(make_visible(c).strip("⟨⟩") for c in zero)
                found.append(f"{path} contains an invisible character ({names})")
            controls = sorted({c for c in text if unicodedata.category(c) == "Cc"
                               and c not in "\n\t"})
            if controls:
                names = ", ".join(f"U+{ord(c):04X}" for c in controls)
                found.append(f"{path} contains a control character ({names})")
            for match in _DOMAIN.finditer(text):
                domain = match.group(1)
                ascii_form = punycode(domain)
                if ascii_form is not None:
                    found.append(f"{path} names a non-ASCII domain {make_visible(domain)} "
                                 f"= {ascii_form}")
    return found


def _within(root: Path, relative: str) -> Path | None:
    candidate = (root / relative).resolve()
    try:
        candidate.relative_to(root.resolve())
    except ValueError:
        return None
    return candidate


def file_diff(arguments: Mapping[str, JsonValue], files_root: Path | None) -> str | None:
    """A unified diff of the file write the call proposes, against the current file.

    Applies when the arguments have string ``path`` and ``content`` and a files root is
    configured. Returns None when it does not apply; a sentence when the diff cannot be made.
    """
    path, content = arguments.get("path"), arguments.get("content")
    if files_root is None or not isinstance(path, str) or not isinstance(content, str):
        return None
    target = _within(files_root, path)
    if target is None:
        return f"The path {make_visible(path)!r} is outside the files root: no diff shown."
    if target.is_file():
        if target.stat().st_size > MAX_DIFF_SOURCE_BYTES:
            return f"The current file is over {MAX_DIFF_SOURCE_BYTES} bytes: no diff shown."
        current = target.read_text(encoding="utf-8", errors="replace")
        before = f"a/{path}"
    elif target.exists():
        return "The path exists and is not a regular file: no diff shown."
    else:
        current = ""
        before = "/dev/null (new file)"
    lines = difflib.unified_diff(current.splitlines(keepends=True),
                                 content.splitlines(keepends=True), before, f"b/{path}")
    diff = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)
    return diff or "No change: the content equals the current file."


def email_preview(arguments: Mapping[str, JsonValue]) -> str | None:
    """The e-mail the call would send, as the RFC 5322 text that goes on the wire (LF-ended).

    Applies when the arguments have ``to`` and a ``subject`` or ``body``; None otherwise.
    """
    if "to" not in arguments or not ({"subject", "body"} & set(arguments)):
        return None
    message = EmailMessage(policy=email.policy.SMTP)
    try:
        for header in ("from", "to", "cc", "bcc", "reply_to", "subject"):
            value = arguments.get(header)
            if value is None:
                continue
            text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            message[header.replace("_", "-").title()] = text
        message.set_content(str(arguments.get("body", "")))
        # the wire has CRLF line ends; shown with LF so that only unexpected characters stand out
        return message.as_string().replace("\r\n", "\n")
    except (ValueError, TypeError) as exc:  # header injection, undecodable text
        return f"This message cannot be sent as it is: {exc}"
