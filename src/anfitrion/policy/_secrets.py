"""Credentials leaving in arguments: a person looks before a key, token or password goes out.

A compromised model can pass a credential it saw (an ``sk-…`` key in a trusted config file, a
private key block, a database URL with its password) out in the arguments of any call — a
read included, which the default policy lets run. :class:`SecretArguments` scans every string
of the outgoing arguments (keys too, nested lists and objects entered) for credential shapes,
in the value as written and in the forms it may be hidden in: percent-encoding (twice),
form encoding (``+``), HTML entities, and base64 (standard and URL-safe, with or without
padding), base32 or hex tokens inside it (:func:`encoded_forms`). A match asks a person, naming the
argument and the kind; the operator may make it deny. The rule never allows anything: like the
taint rule it escalates an allow to an ask and leaves a deny a deny.

Arguments a tool declares ``sensitive`` are where a secret is *meant* to go (a ``password``
parameter of a login tool) and are not scanned; tools the operator names in *exempt_tools*
(a vault) neither.

Example:
    >>> find_credentials("use sk-proj-4fG7hJ2kL9mN3pQ8rS1tV6wX")
    [('an API secret key', 'sk-pro…')]
"""

from __future__ import annotations

import fnmatch
import html
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import partial
from typing import Any
from urllib.parse import unquote, unquote_plus

from .._encodings import SCAN_CHARS, TRUNCATED, encoded_forms
from .._json import json_strings
from .._redaction import PROSE_SECRET
from .._tools import BoundCall
from ..exceptions import UserError
from ._contract import BaseRule, RuleRole
from ._decision import Decision, PolicyContext, Verdict

__all__ = ["SECRETS_RULE_ID", "SecretArguments", "find_credentials"]

SECRETS_RULE_ID = "secrets"
MAX_STRINGS = 2048
"""At most this many argument strings (of eight or more characters) are scanned per call."""


def _random_looking(token: str) -> bool:
    """A segment of 16+ letters and digits with a digit, or with both cases: a key, not a
    slug like ``sk-my-annual-report``."""
    for segment in re.split(r"[-_.~+/]", token):
        if len(segment) >= 16 and (any(c.isdigit() for c in segment)
                                   or (segment.lower() != segment != segment.upper())):
            return True
    return False


# (kind, anchors, pattern, check the match's last group looks random). A pattern runs only
# when one of its anchors is in the text (lower-cased for the case-insensitive ones); each is
# linear-time: anchored on a literal, bounded or possessive repetition.
_KINDS: tuple[tuple[str, tuple[str, ...], re.Pattern[str], bool], ...] = (
    ("a private key", ("-----BEGIN",),
     re.compile(r"-----BEGIN (?:[A-Z0-9]+ ){0,4}PRIVATE KEY(?: BLOCK)?-----"), False),
    ("an Anthropic API key", ("sk-ant-",),
     re.compile(r"(?<![A-Za-z0-9])sk-ant-[A-Za-z0-9_-]{20,}"), False),
    ("an API secret key", ("sk-", "sk_", "rk-", "rk_"), re.compile(
        r"(?<![A-Za-z0-9_-])(?:sk|rk)[-_](?!ant-)(?:live_|test_|proj-|svcacct-|admin-)?"
        r"([A-Za-z0-9_-]{20,})"), True),
    ("a GitHub token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), re.compile(
        r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"), False),
    ("a GitLab token", ("glpat-",), re.compile(r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}"),
     False),
    ("a Slack token", ("xox",), re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}"),
     False),
    ("a Hugging Face token", ("hf_",), re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"),
     False),
    ("an AWS access key id", ("AKIA", "ASIA"),
     re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z2-7]{16}(?![A-Z0-9])"), False),
    ("a Google API key", ("AIza",), re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"), False),
    ("a JSON Web Token", ("eyJ",), re.compile(
        r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
     False),
    ("a bearer token", ("bearer",), re.compile(r"(?i)\bbearer\s++([A-Za-z0-9._~+/-]{16,}=*)"),
     True),
    ("a password in a URL", ("://",), re.compile(
        r"(?i)(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*+://[^/\s:@]++:[^@\s/]++@"), False),
    ("a password or key", ("pass", "secret", "key", "token"), re.compile(
        r"(?i)(?:password|passwd|passphrase|passcode|secret|api[_-]?key|apikey|access[_-]?key"
        r"|secret[_-]?key|private[_-]?key|(?:access|refresh|auth|session|id)[_-]?token)"
        r"[\"']?[^\S\r\n]*+[:=][^\S\r\n]*+[\"']?[^\s\"'&,;}]{4,}"), False),
)
_PROSE_ANCHORS = ("pass", "pin", "pwd", "contrase", "clave", "senha", "kennwort", "wachtwoord",
                  "hasło", "haslo", "parola")
# whether a kind's anchors are looked for in the lower-cased text (enum flag tests are slow)
_FOLDED = tuple(bool(pattern.flags & re.IGNORECASE) for _, _, pattern, _ in _KINDS)
# every anchor at once: most strings hold none, and then no kind needs a look (one scan of
# the text as written and one of the lower-cased text, instead of one per anchor)
_EXACT_ANCHORS = re.compile("|".join(re.escape(anchor) for (_, anchors, _, _), folded
                                     in zip(_KINDS, _FOLDED, strict=True) if not folded
                                     for anchor in anchors))
_FOLDED_ANCHORS = re.compile("|".join(re.escape(anchor) for (_, anchors, _, _), folded
                                      in zip(_KINDS, _FOLDED, strict=True) if folded
                                      for anchor in anchors) + "|"
                             + "|".join(re.escape(anchor) for anchor in _PROSE_ANCHORS))


def _hint(text: str) -> str:
    return text[:6] + "…"


def _prose_password() -> re.Pattern[str]:
    return PROSE_SECRET  # the audit log's own pattern, from the redaction leaf


def _holds(text: str, anchors: tuple[str, ...]) -> bool:
    for anchor in anchors:  # noqa: SIM110 - a loop, not any(): runs a dozen times per string
        if anchor in text:
            return True
    return False


def find_credentials(text: str) -> list[tuple[str, str]]:
    """``(kind, hint)`` for each credential shape in *text* as written (no decoding); the
    hint is the first six characters, never the secret."""
    text = text[:SCAN_CHARS]
    lower = text.lower()
    if _EXACT_ANCHORS.search(text) is None and _FOLDED_ANCHORS.search(lower) is None:
        return []
    found: list[tuple[str, str]] = []
    for (kind, anchors, pattern, check), folded in zip(_KINDS, _FOLDED, strict=True):
        if not _holds(lower if folded else text, anchors):
            continue
        for match in pattern.finditer(text):
            if check and not _random_looking(match.group(match.lastindex or 0)):
                continue
            found.append((kind, _hint(match.group())))
            break
    if _holds(lower, _PROSE_ANCHORS) and not any(k == "a password or key" for k, _ in found):
        prose = _prose_password().search(text)
        if prose is not None:
            found.append(("a password", _hint(prose.group())))
    return found


def _forms(value: str) -> Iterator[tuple[str, str]]:
    """The value as written, percent-, form- and entity-decoded, and its decoded tokens."""
    seen = {value}
    yield "", value
    current = value
    for _ in range(2):
        if "%" not in current:
            break
        current = unquote(current)
        if current not in seen:
            seen.add(current)
            yield "URL-encoded", current
    for how, form in (("form-encoded", unquote_plus(current) if "+" in current else current),
                      ("HTML-encoded", html.unescape(current) if "&" in current else current)):
        if form not in seen:
            seen.add(form)
            yield how, form
    for encoding, decoded in encoded_forms(current):
        yield (TRUNCATED, "") if encoding == TRUNCATED else (f"{encoding}-encoded", decoded)


_strings = partial(json_strings, keys=" (its name)", root="(value)")


def credential_warnings(arguments: Mapping[str, Any], sensitive: Iterable[str] = ()) -> list[str]:
    """One warning per argument string carrying a credential shape (in any form); arguments
    holding more than :data:`MAX_STRINGS` strings worth scanning get one warning saying so
    (fail closed: bounded work, never a pass)."""
    warnings: list[str] = []
    scanned = 0
    for path, value in _strings(arguments, "", frozenset(sensitive)):
        if len(value) < 8:
            continue
        scanned += 1
        if scanned > MAX_STRINGS:
            warnings.append(f"the arguments hold more than {MAX_STRINGS} strings, too many to "
                            "scan for credentials")
            break
        for how, form in _forms(value):
            if how == TRUNCATED:  # fail closed: what was not decoded may hide one
                warnings.append(f"argument {path}: holds more encoded text than can be decoded "
                                "and scanned for credentials")
                break
            found = find_credentials(form)
            if found:
                kind, hint = found[0]
                encoded = f" ({how})" if how else ""
                warnings.append(f"argument {path}: looks like {kind}{encoded}: `{hint}`")
                break
    return warnings


class SecretArguments(BaseRule):
    """Asks (or denies) when an outgoing argument looks like a credential.

    Args:
        verdict: ``ask`` (the default) or ``deny``.
        exempt_tools: tool-name globs whose arguments are not scanned (a secrets vault).
        rule_id: for the audit log and explanations.

    Raises:
        ValueError: *verdict* is not ``ask`` or ``deny``.
    """

    role = RuleRole.ESCALATION  # it asks or denies, never allows

    def __init__(self, verdict: Verdict | str = Verdict.ASK, *,
                 exempt_tools: Iterable[str] = (), rule_id: str = SECRETS_RULE_ID) -> None:
        self.verdict = Verdict(verdict)
        if self.verdict is Verdict.ALLOW:
            raise UserError("the secrets rule asks or denies; 'allow' is not a verdict for it")
        self.exempt_tools = tuple(exempt_tools)
        if not all(isinstance(t, str) and t for t in self.exempt_tools):
            raise UserError("exempt_tools takes tool-name globs (non-empty strings)")
        self.rule_id = rule_id
        # what `anfitrion policy validate` shows of this rule
        self.settings = {"verdict": self.verdict.value, "exempt_tools": list(self.exempt_tools)}

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        if any(fnmatch.fnmatchcase(call.name, glob) for glob in self.exempt_tools):
            return None
        warnings = credential_warnings(call.arguments, call.tool.sensitive)
        if not warnings:
            return None
        if self.verdict is Verdict.DENY:
            return Decision(Verdict.DENY, "an argument looks like a credential (a key, token, "
                            "password or private key), and this policy does not let one leave",
                            self.rule_id, tuple(warnings))
        return Decision.ask("an argument looks like a credential (a key, token, password or "
                            "private key); a person must check where it goes", self.rule_id,
                            warnings)
