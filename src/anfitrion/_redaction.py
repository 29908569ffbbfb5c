"""Redaction: what the audit log and the logs mask in every value they keep.

Secrets (API keys, bearer tokens, private keys, passwords in URLs and in prose), card numbers
(Luhn-checked), IBANs (mod-97-checked), e-mail addresses and phone numbers are masked, control
characters escaped, values cut. A leaf module (it imports only :mod:`anfitrion._canonical`), so
the audit log (:mod:`anfitrion._audit`) and the log redaction (:mod:`anfitrion._logging`) both
use it without importing each other; :mod:`anfitrion._audit` re-exports its public names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._canonical import canonical_json

__all__ = ["ARGUMENT_PREVIEW_CHARS", "MAX_PREVIEW_ARGUMENTS", "PREVIEW_CHARS", "SCAN_MARGIN",
           "iban_valid", "luhn_valid", "redact", "redact_lines"]

PREVIEW_CHARS = 200
SCAN_MARGIN = 8192
ARGUMENT_PREVIEW_CHARS = 120
MAX_PREVIEW_ARGUMENTS = 20

_SECRET_NAME = (r"[\w-]*(?:password|passwd|passcode|passphrase|pwd|secret|api[_-]?key"
                r"|access[_-]?key|token|auth|credential|private[_-]?key|session[_-]?key|cookie)[\w-]*")
# "my password is hunter2", "the passcode: 1234", "mi contraseña es …", "mein Passwort lautet …":
# the word after a password word and a verb or colon. Every repetition is possessive or
# bounded, so a hostile run of "is is is …" costs one pass.
PROSE_SECRET = re.compile(
    r"(?i)(\b(?:password|passwd|passcode|passphrase|pass word|pin(?: code| number)?|pwd"
    r"|contraseña|contrasena|clave|senha|palavra-passe|mot de passe|passwort|kennwort"
    r"|wachtwoord|hasło|haslo|parola d'ordine)\b"
    r"(?: (?:for|of|to|für|de|do|da|del|della|du|van|voor|pour|para)(?: [\w.@-]{1,40}){1,2})?"
    r"[^\S\r\n]*+(?:(?:(?:is|was|es|era|é|est|était|ist|lautet|war|è)\b|:|=)[^\S\r\n]*+){1,3}"
    r"[\"'«“‘]?)[^\s\"'»”’,;]{2,}")
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)",
                re.S), "[private key]"),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{10,}"), "[secret]"),
    (re.compile(r"\b(?:sk|pk|rk)[-_][A-Za-z0-9_-]{16,}"), "[secret]"),
    (re.compile(r"\b(ghp|gho|ghu|ghs|ghr|github_pat|xox[abpr]|glpat|hf)[-_][A-Za-z0-9_-]{10,}"),
     "[secret]"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "[secret]"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "[secret]"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "[token]"),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 [secret]"),
    (re.compile(r"(?i)(\b" + _SECRET_NAME + r"[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;}]{3,}"),
     r"\1[secret]"),
    (PROSE_SECRET, r"\1[secret]"),
    # Each run of candidate characters is scanned once (lookbehind + possessive): linear time
    # on hostile input such as "a.a.a.…", where a plain pattern backtracks quadratically.
    (re.compile(r"(?i)((?<![a-z0-9+.-])[a-z][a-z0-9+.-]*+://[^/\s:@]*+:)[^@\s/]++@"),
     r"\1[secret]@"),
    (re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]++@[A-Za-z0-9-]+"
                r"(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
     "[email]"),
)
_SECRET_ARGUMENT = re.compile(r"(?i)^" + _SECRET_NAME + "$")
_PHONE = re.compile(r"(?<![\w.+-])\+?\(?\d[\d ().-]{6,}\d(?![\w-]|\.\d)")
# A date, a decimal, or a dotted IPv4 address (four parts of at most 255: an audited egress
# refusal keeps its destination; no phone number is written so with 9 to 12 digits)
_NOT_PHONE = re.compile(r"\d{4}-\d{2}-\d{2}|\d+\.\d+$|(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}"
                        r"(?:25[0-5]|2[0-4]\d|1?\d?\d)$")
_DIGIT_RUN = re.compile(r"\d+(?:[ -]\d+)*")
_DIGIT_GROUP = re.compile(r"\d+")
_IBAN = re.compile(r"(?i)(?<![a-z0-9])[a-z]{2}\d{2}(?: ?[a-z0-9]{4}){2,7}(?: ?[a-z0-9]{1,4})?"
                   r"(?![a-z0-9])")
CARD_FIRST_DIGITS = "23456"
"""Card numbers start with 2–6 (Mastercard, Amex/Diners/JCB, Visa, Mastercard/Maestro,
Discover/UnionPay); a 13-digit millisecond timestamp starts with 1 and is not masked."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0080-\u009f\u200b-\u200f\u2028\u2029\u202a-\u202e"
                      r"\u2060\u2066-\u2069\ufeff]")


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum every payment card number carries."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = ord(ch) - 48
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """ISO 13616 check: 15–34 characters whose mod-97 remainder, rearranged, is 1."""
    compact = text.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def _mask_iban(match: re.Match[str]) -> str:
    return "[iban]" if iban_valid(match.group()) else match.group()


def _mask_cards(text: str) -> str | None:
    """*text* with every Luhn-valid card number (13–19 digits in groups split by single
    spaces or dashes) masked, or ``None`` when it holds none. Work is bounded: a card is
    written in at most five groups (4-4-4-4-3), so at most eight are joined from each group."""
    pieces: list[str] = []
    last = 0
    for run in _DIGIT_RUN.finditer(text):
        groups = [(m.start() + run.start(), m.end() + run.start(), m.group())
                  for m in _DIGIT_GROUP.finditer(run.group())]
        i = 0
        while i < len(groups):
            best, digits = -1, ""
            if groups[i][2][0] not in CARD_FIRST_DIGITS:
                i += 1
                continue
            for j in range(i, min(len(groups), i + 8)):
                digits += groups[j][2]
                if len(digits) > 19:
                    break
                if len(digits) >= 13 and digits[0] in CARD_FIRST_DIGITS and luhn_valid(digits):
                    best = j
            if best < 0:
                i += 1
                continue
            pieces += [text[last:groups[i][0]], "[card]"]
            last = groups[best][1]
            i = best + 1
    if not pieces:
        return None
    return "".join(pieces) + text[last:]


def _mask_phone(match: re.Match[str]) -> str:
    text = match.group()
    carded = _mask_cards(text)
    if carded is not None:
        return carded
    digits = sum(ch.isdigit() for ch in text)
    if 9 <= digits <= 15 and not _NOT_PHONE.match(text):
        return "[phone]"
    return text


# A value matches no secret pattern unless it contains one of these: most values skip the
# thirteen patterns with a single scan.
_TRIGGER = re.compile(r"(?i)-----BEGIN|\b(?:sk|pk|rk|gh[pousr]|github_pat|xox[abpr]|glpat|hf)"
                      r"[-_]|AKIA|ASIA|AIza|eyJ|bearer|basic|token|pass|pwd|secret|key|auth"
                      r"|credential|cookie|://|@|\bpin\b|contrase|clave|senha|kennwort"
                      r"|wachtwoord|has[łl]o|parola")
_DIGITS = re.compile(r"\d[\d ().-]{6,}\d")


def redact(text: str, limit: int = PREVIEW_CHARS) -> str:
    """Mask secrets and personal data, escape control characters, cut to *limit*.

    Example:
        >>> redact("mail bob@example.com, key sk-abcdefghijklmnopqrstuv\\x1b[31m")
        'mail [email], key [secret]\\\\u001b[31m'
    """
    if len(text) <= 512:  # names, ids, reasons and short values repeat across a call's events
        return _redact_short(text, limit)
    return _redact(text, limit)


@functools.lru_cache(maxsize=4096)
def _redact_short(text: str, limit: int) -> str:
    return _redact(text, limit)


def _redact(text: str, limit: int) -> str:
    full = len(text)
    # Only a bounded prefix is scanned: a hostile 256 KiB value must not cost the event loop
    # seconds of regex work. The margin keeps any secret that starts inside the preview (a
    # PEM private key is under 4 KiB) whole while it is matched.
    text = text[:limit + SCAN_MARGIN]
    if _TRIGGER.search(text):
        for pattern, replacement in _SECRET_PATTERNS:
            text = pattern.sub(replacement, text)
    if _DIGITS.search(text):
        text = _IBAN.sub(_mask_iban, text)
        text = _PHONE.sub(_mask_phone, text)
    text = _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if len(text) <= limit and full <= limit + SCAN_MARGIN:
        return text
    return text[:limit] + f"… [{full} chars]"


def redact_lines(text: str, line_limit: int = 1000, max_lines: int = 200) -> str:
    """:func:`redact` for multi-line text (a traceback): newlines are kept, every line is
    redacted and cut to *line_limit*, a private-key block spanning lines is masked whole, and
    at most *max_lines* lines are kept (the last ones: a traceback ends with what happened).
    """
    lines = text.rstrip("\n").split("\n")
    if len(lines) > max_lines:
        lines = [f"… [{len(lines) - max_lines} lines]", *lines[-max_lines:]]
    joined = "\n".join(lines)
    if "-----BEGIN" in joined:
        joined = _SECRET_PATTERNS[0][0].sub(_SECRET_PATTERNS[0][1], joined)
    return "\n".join(redact(line, line_limit) for line in joined.split("\n"))


def _redact_arguments(arguments: Mapping[str, Any], sensitive: Iterable[str]) -> dict[str, Any]:
    """Previews of argument values: declared-sensitive and secret-named ones dropped."""
    hidden = sensitive if isinstance(sensitive, (set, frozenset)) else set(sensitive)
    preview: dict[str, Any] = {}
    for key in list(arguments)[:MAX_PREVIEW_ARGUMENTS]:
        value = arguments[key]
        if key in hidden or _secret_argument(key):
            preview[redact(key, 64)] = "[sensitive]"
        else:
            text = value if isinstance(value, str) else canonical_json(value)
            preview[redact(key, 64)] = redact(text, ARGUMENT_PREVIEW_CHARS)
    if len(arguments) > MAX_PREVIEW_ARGUMENTS:
        preview["…"] = f"{len(arguments) - MAX_PREVIEW_ARGUMENTS} more arguments"
    return preview


def _secret_argument(name: str) -> bool:
    """Whether an argument's name says it holds a secret (``api_key``, ``password``, …)."""
    if len(name) <= 64:  # tool schemas repeat the same few names
        return _secret_argument_short(name)
    return _SECRET_ARGUMENT.match(name) is not None


@functools.lru_cache(maxsize=1024)
def _secret_argument_short(name: str) -> bool:
    return _SECRET_ARGUMENT.match(name) is not None
