"""Argument constraints: small checks on one argument value.

A constraint has ``check(value) -> str | None``: ``None`` when the value is acceptable, else a
short problem ("is not inside drafts"). Constraints are strict about types (a number given as a
string, or ``true`` given as a number, fails) and refuse what they cannot judge rather than
guessing: an ambiguous host name or path is a violation, not a pass.

Hosts and e-mail domains are compared in their IDNA (punycode) form. Python's ``idna`` codec
implements IDNA 2003, whose mapping differs from IDNA 2008 for a few characters (``ß`` → ``ss``,
full-width letters, ideographic full stops, zero-width joiners). A name that the mapping changes
is therefore *ambiguous* — another resolver may send it elsewhere — and is refused; only names
that round-trip unchanged are compared, so ``exаmple.com`` (Cyrillic ``а``) becomes
``xn--exmple-4nf.com`` and never equals ``example.com``.

Regular expressions: Python's ``re`` backtracks, so a pattern like ``(a+)+$`` can take
exponential time. Instead of adding a native dependency (RE2), :class:`Matches` accepts only
patterns without the constructs that cause super-linear backtracking — backreferences,
lookaround, conditionals, a repeat inside a repeat, alternation inside a repeat — and caps the
input length. What remains can still backtrack polynomially: *k* repeats in a row take up to
about n^k steps (``[a-z]*[a-z]*[a-z]*[a-z]*=`` needs 90 s on 1,024 characters), so the cap is
lowered to keep n^k under 10^7 steps: 1,024 characters for one or two repeats, 215 for three,
56 for four. A longer value fails without being matched.
"""

from __future__ import annotations

import importlib
import ipaddress
import math
import os
import posixpath
import re
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from .exceptions import UserError

__all__ = [
    "Constraint",
    "EmailDomain",
    "LengthRange",
    "Matches",
    "NoneOf",
    "NotMatches",
    "NumberRange",
    "OneOf",
    "PathInside",
    "UrlAllowed",
    "ambiguous_path",
    "canonical_host",
    "clearly_refuses",
]


@runtime_checkable
class Constraint(Protocol):
    """A check on one argument value."""

    def check(self, value: Any) -> str | None:
        """``None`` if *value* is acceptable, else what is wrong with it."""
        ...


# -- paths -------------------------------------------------------------------------------------


def _separator_like(ch: str) -> bool:
    """A character that is not ``/`` but that some program may read as ``/`` or ``\\``: its
    NFKC form holds one (``／`` U+FF0F, ``＼`` U+FF3C, ``﹨``, ``℅`` → ``c/o``), or its Unicode
    name says it is a slash (``∕`` DIVISION SLASH, ``⁄`` FRACTION SLASH, combining overlays),
    which Windows "best fit" code-page conversions map to ``/``."""
    if ch == "\\":
        return True
    if ch.isascii():
        return False
    if "/" in (folded := unicodedata.normalize("NFKC", ch)) or "\\" in folded:
        return True
    name = unicodedata.name(ch, "")
    return "SOLIDUS" in name or "SLASH" in name


def _dot_like(part: str) -> str | None:
    """What a component that is not ``.`` or ``..`` but reads as one reads as: after NFKC
    (``．．``, ``․``, ``‥``), without invisible format characters (``..\u200b``), or without
    trailing spaces, which Windows drops (``.. ``)."""
    if part in (".", "..") or not part:
        return None
    visible = "".join(c for c in part if unicodedata.category(c) != "Cf")
    reads = unicodedata.normalize("NFKC", visible).rstrip(" ")
    return reads if reads in (".", "..") else None


def ambiguous_path(path: str) -> str | None:
    """Why *path* may name something else to another program, or ``None``.

    Ambiguous are characters that read as a path separator and components that read as ``.``
    or ``..``. This file system takes them literally, but a person reading an approval, a
    normalising tool, a Windows share or a later NFKC pass may not: ``drafts／．．／secrets`` is
    one name here and a traversal there.

    Example:
        >>> ambiguous_path("drafts/\uff0e\uff0e/x")
        "has a component '．．' that reads as '..' (full-width or look-alike dots)"
    """
    for ch in path:
        if _separator_like(ch):
            return (f"contains {ch!r} (U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')}), "
                    "which reads as a path separator")
    for part in path.split("/"):
        if (reads := _dot_like(part)) is not None:
            return (f"has a component {part!r} that reads as {reads!r} (full-width or "
                    "look-alike dots)")
    return None


class PathInside:
    """The value is a path inside *root*, compared component by component after normalisation.

    ``/w/proj2`` is not inside ``/w/proj``; ``drafts/../secrets`` normalises to ``secrets``.
    A relative *root* without *base* is compared with relative argument paths as written (an
    absolute argument is then outside). With *base*, relative roots and arguments are taken
    relative to it. With *resolve_symlinks* (needs an absolute root or a *base*), both are
    resolved on the real file system first, so a symlink inside the root pointing out of it is
    caught; without it, ``..`` is collapsed lexically.

    Refused outright: empty paths, control and format characters (NUL, zero-width, bidi),
    backslashes (a separator on Windows), a leading ``~`` (home-directory expansion by some
    tools), and names another program may read differently (:func:`ambiguous_path`: full-width
    and look-alike dots and slashes, ``．．``, ``∕``).
    """

    def __init__(self, root: str, *, base: str | None = None,
                 resolve_symlinks: bool = False) -> None:
        if not isinstance(root, str) or not root or "\x00" in root:
            raise UserError("path_inside needs a non-empty root path")
        if (why := ambiguous_path(root)) is not None:
            raise UserError(f"path_inside root {root!r} {why}")
        if base is not None and (not isinstance(base, str) or not posixpath.isabs(base)
                                 or "\x00" in base):
            raise UserError("base must be an absolute path")
        if base is not None and (why := ambiguous_path(base)) is not None:
            raise UserError(f"base {base!r} {why}")
        if resolve_symlinks and base is None and not posixpath.isabs(root):
            raise UserError("resolve_symlinks needs an absolute root or a base directory")
        self.root = root
        self.base = base
        self.resolve_symlinks = resolve_symlinks
        self._root = self._normalise(root)

    def _normalise(self, path: str) -> str:
        if self.base is not None and not posixpath.isabs(path):
            path = posixpath.join(self.base, path)
        if self.resolve_symlinks:
            return os.path.realpath(path)
        return posixpath.normpath(path)

    def check(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a path (a string)"
        if not value or "\\" in value or value.startswith("~") \
                or any(unicodedata.category(c)[0] == "C" for c in value):
            return f"is not a plain path inside {self.root}"
        if (why := ambiguous_path(value)) is not None:
            return f"is not a plain path inside {self.root}: it {why}"
        path = self._normalise(value)
        if posixpath.isabs(path) != posixpath.isabs(self._root):
            return f"is not inside {self.root}"
        parts = [p for p in path.split("/") if p not in ("", ".")]
        root_parts = [p for p in self._root.split("/") if p not in ("", ".")]
        if ".." in parts or parts[:len(root_parts)] != root_parts:
            return f"is not inside {self.root}"
        return None

    def __repr__(self) -> str:
        extra = f", base={self.base!r}" if self.base else ""
        extra += ", resolve_symlinks=True" if self.resolve_symlinks else ""
        return f"PathInside({self.root!r}{extra})"


# -- plain values ------------------------------------------------------------------------------


def _same_value(a: Any, b: Any) -> bool:
    # true == 1 and 1 == 1.0 in Python; a policy must not confuse a boolean with a number
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _listed(values: Iterable[Any], show: Any = str, most: int = 8) -> str:
    """What a violation message names as allowed: the first *most* values."""
    items = list(values)
    shown = ", ".join(show(v) for v in items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


class OneOf:
    """The value is one of a fixed set (exact match, types included: ``1`` is not ``true``)."""

    def __init__(self, values: Iterable[Any]) -> None:
        self.values = tuple(values)
        if not self.values:
            raise UserError("one_of needs at least one value")
        for v in self.values:
            if not isinstance(v, (str, int, float, bool)) and v is not None:
                raise UserError(f"one_of values must be strings, numbers or booleans: {v!r}")

    def check(self, value: Any) -> str | None:
        if any(_same_value(value, v) for v in self.values):
            return None
        return f"is not one of the allowed values ({_listed(self.values, repr)})"

    def __repr__(self) -> str:
        return f"OneOf({list(self.values)!r})"


def _visible(text: str) -> str:
    """*text* without invisible format characters (zero-width spaces and joiners, soft hyphens,
    bidi controls: Unicode category Cf)."""
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


def _folded(value: Any) -> Any:
    """A string as a denylist compares it: NFKC, case-folded, invisible format characters
    and outer white space removed."""
    if isinstance(value, str):
        return _visible(unicodedata.normalize("NFKC", value).casefold()).strip()
    return value


class NoneOf:
    """The value is none of a fixed set of refused values: the negative of :class:`OneOf`.

    A denylist is easy to slip past with a variant spelling, so strings are compared after
    Unicode NFKC normalisation, case folding, removing invisible format characters and trimming
    (``" CEO@Example.com"`` and ``"ceo\u200b@example.com"`` are refused when
    ``"ceo@example.com"`` is); numbers and booleans compare exactly, types included. An
    allowlist (:class:`OneOf`, :class:`EmailDomain`) is still the stronger rule.
    """

    def __init__(self, values: Iterable[Any]) -> None:
        self.values = tuple(values)
        if not self.values:
            raise UserError("none_of needs at least one value")
        for v in self.values:
            if not isinstance(v, (str, int, float, bool)) and v is not None:
                raise UserError(f"none_of values must be strings, numbers or booleans: {v!r}")
        self._folded = tuple(_folded(v) for v in self.values)

    def check(self, value: Any) -> str | None:
        folded = _folded(value)
        if any(_same_value(folded, v) for v in self._folded):
            return f"is one of the refused values ({_listed(self.values, repr)})"
        return None

    def __repr__(self) -> str:
        return f"NoneOf({list(self.values)!r})"


class NumberRange:
    """The value is a number (not a boolean) within inclusive bounds."""

    def __init__(self, minimum: float | None = None, maximum: float | None = None) -> None:
        for bound in (minimum, maximum):
            if bound is not None and (isinstance(bound, bool)
                                      or not isinstance(bound, (int, float))):
                raise UserError("min and max must be numbers")
        if minimum is None and maximum is None:
            raise UserError("a number range needs min or max")
        if minimum is not None and maximum is not None and minimum > maximum:
            raise UserError("min is greater than max")
        self.minimum = minimum
        self.maximum = maximum

    def check(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number"
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {self.minimum}"
        if self.maximum is not None and value > self.maximum:
            return f"must be at most {self.maximum}"
        return None

    def __repr__(self) -> str:
        return f"NumberRange(min={self.minimum!r}, max={self.maximum!r})"


class LengthRange:
    """The value is a string whose length (in code points) is within inclusive bounds."""

    def __init__(self, min_length: int | None = None, max_length: int | None = None) -> None:
        for bound in (min_length, max_length):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)
                                      or bound < 0):
                raise UserError("min_length and max_length must be non-negative integers")
        if min_length is None and max_length is None:
            raise UserError("a length range needs min_length or max_length")
        if min_length is not None and max_length is not None and min_length > max_length:
            raise UserError("min_length is greater than max_length")
        self.min_length = min_length
        self.max_length = max_length

    def check(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        if self.min_length is not None and len(value) < self.min_length:
            return f"must be at least {self.min_length} characters"
        if self.max_length is not None and len(value) > self.max_length:
            return f"must be at most {self.max_length} characters"
        return None

    def __repr__(self) -> str:
        return f"LengthRange({self.min_length!r}, {self.max_length!r})"


# -- regular expressions -----------------------------------------------------------------------

# re._parser is the parser `re` itself uses (``sre_parse`` before 3.11, now deprecated).
_sre: Any = importlib.import_module("re._parser")
_consts: Any = importlib.import_module("re._constants")

_REPEATS = {_consts.MAX_REPEAT, _consts.MIN_REPEAT, getattr(_consts, "POSSESSIVE_REPEAT", None)}
_FORBIDDEN = {_consts.GROUPREF: "backreferences", _consts.GROUPREF_EXISTS: "conditionals",
              _consts.ASSERT: "lookaround", _consts.ASSERT_NOT: "lookaround"}


_STEP_BUDGET = 10**7


def _unsafe_construct(items: Any, in_repeat: bool, repeats: list[int]) -> str | None:
    for op, arg in items:
        if op in _FORBIDDEN:
            return _FORBIDDEN[op]
        if op in _REPEATS:
            if in_repeat:
                return "a repeat inside a repeat"
            if arg[1] > 1:
                repeats.append(1)
            found = _unsafe_construct(arg[2], True, repeats)
        elif op is _consts.SUBPATTERN:
            found = _unsafe_construct(arg[-1], in_repeat, repeats)
        elif op is _consts.ATOMIC_GROUP:
            found = _unsafe_construct(arg, in_repeat, repeats)
        elif op is _consts.BRANCH:
            if in_repeat:
                return "alternation inside a repeat"
            found = next((f for b in arg[1] if (f := _unsafe_construct(b, in_repeat, repeats))),
                         None)
        else:
            found = None
        if found:
            return found
    return None


class Matches:
    """The value is a string that the regular expression matches *in full*.

    Only patterns without backtracking-prone constructs are accepted (see the module
    docstring); values longer than :attr:`input_cap` — *max_input_length*, lowered for
    patterns with several repeats — fail without being matched.

    Raises:
        ValueError: the pattern does not compile or uses a backtracking-prone construct.
    """

    def __init__(self, pattern: str, *, max_input_length: int = 1024) -> None:
        if not isinstance(pattern, str):
            raise UserError("the pattern must be a string")
        try:
            compiled = re.compile(pattern)
            parsed = _sre.parse(pattern)
        except re.error as exc:
            raise UserError(f"invalid regular expression: {exc}") from None
        repeats: list[int] = []
        problem = _unsafe_construct(parsed, False, repeats)
        if problem:
            raise UserError(f"the regular expression uses {problem}, which can take "
                             "exponential time; rewrite it without")
        if isinstance(max_input_length, bool) or not isinstance(max_input_length, int) \
                or max_input_length < 1:
            raise UserError("max_input_length must be a positive integer")
        self.pattern = pattern
        self.max_input_length = max_input_length
        k = max(1, len(repeats))
        self.input_cap = min(max_input_length, int(_STEP_BUDGET ** (1 / k) + 1e-9))
        self._compiled = compiled

    def check(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        if len(value) > self.input_cap:
            return f"is longer than {self.input_cap} characters"
        if self._compiled.fullmatch(value) is None:
            return f"does not match the required pattern {self.pattern}"
        return None

    def __repr__(self) -> str:
        return f"Matches({self.pattern!r})"


class NotMatches:
    """The value is a string that the regular expression does *not* match in full: the
    negative of :class:`Matches`, with its pattern checks and input cap.

    What it cannot judge fails: a value that is not a string, or one longer than the cap. The
    pattern is tried on the value, on its NFKC form and on that form without invisible format
    characters, so full-width or compatibility look-alikes of a refused value, and the value with
    zero-width characters inside, are refused too; add ``(?i)`` to the pattern to ignore case.

    Raises:
        ValueError: the pattern does not compile or uses a backtracking-prone construct.
    """

    def __init__(self, pattern: str, *, max_input_length: int = 1024) -> None:
        self._matches = Matches(pattern, max_input_length=max_input_length)
        self.pattern = pattern
        self.input_cap = self._matches.input_cap

    def check(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        if len(value) > self.input_cap:
            return f"is longer than {self.input_cap} characters"
        wide = unicodedata.normalize("NFKC", value)
        for form in dict.fromkeys((value, wide, _visible(wide))):
            if self._matches.check(form) is None:
                return f"matches the refused pattern {self.pattern}"
        return None

    def __repr__(self) -> str:
        return f"NotMatches({self.pattern!r})"


# -- hosts, URLs, e-mail -----------------------------------------------------------------------

_LDH = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]{0,61}"
                  r"[a-z0-9])?)*")


def canonical_host(host: str) -> str | None:
    """The lower-case ASCII (punycode) form of a host name or IP address, or ``None``.

    ``None`` means the name cannot be judged safely: empty, too long, control or format
    characters (zero-width, bidi), invalid labels, percent signs, or a non-ASCII name that the
    IDNA mapping would change (ambiguous between resolvers). One trailing dot is dropped.

    Example:
        >>> canonical_host("Bücher.de"), canonical_host("exаmple.com")
        ('xn--bcher-kva.de', 'xn--exmple-4nf.com')
    """
    if not isinstance(host, str) or not host or len(host) > 253:
        return None
    name = unicodedata.normalize("NFC", host).lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    if name.endswith("."):
        name = name[:-1]
    if any(unicodedata.category(c)[0] in "CZ" for c in name):
        return None
    if name.isascii():
        if not _LDH.fullmatch(name):
            return None
        if any(label.startswith("xn--") for label in name.split(".")):
            try:  # punycode labels must decode and re-encode to themselves
                if name.encode("ascii").decode("idna").encode("idna").decode("ascii") != name:
                    return None
            except UnicodeError:
                return None
        return name
    try:
        ascii_name = name.encode("idna").decode("ascii").lower()
        if ascii_name.encode("ascii").decode("idna") != name:
            return None
    except UnicodeError:
        return None
    return ascii_name if _LDH.fullmatch(ascii_name) else None


class _HostList:
    """Allowed hosts: exact names, or ``*.example.com`` for subdomains (not the apex)."""

    def __init__(self, entries: Iterable[str], what: str) -> None:
        self.entries = tuple(entries)
        if not self.entries or isinstance(entries, str):
            raise UserError(f"{what} needs a list of at least one name")
        self._exact: set[str] = set()
        self._suffixes: list[str] = []
        for entry in self.entries:
            wildcard = isinstance(entry, str) and entry.startswith("*.")
            name = canonical_host(entry[2:] if wildcard else entry) \
                if isinstance(entry, str) else None
            if name is None:
                raise UserError(f"{what}: {entry!r} is not a valid host name")
            if wildcard:
                self._suffixes.append("." + name)
            else:
                self._exact.add(name)

    def allows(self, host: str) -> bool:
        return host in self._exact or any(host.endswith(s) for s in self._suffixes)


def _has_hidden(text: str) -> bool:
    """Whitespace, control, format (zero-width, bidi) or separator characters."""
    return any(c.isspace() or unicodedata.category(c)[0] in "CZ" for c in text)


class UrlAllowed:
    """The value is an absolute URL whose scheme and host are in allow-lists.

    Refused: user info (``https://good.com@evil.com``), backslashes (browsers read them as
    ``/``), whitespace and control characters, percent signs in the host, invalid ports, and
    ambiguous non-ASCII hosts (see :func:`canonical_host`). Hosts compare in punycode form.
    """

    def __init__(self, hosts: Iterable[str], *, schemes: Iterable[str] = ("https",)) -> None:
        self.hosts = _HostList(hosts, "url_hosts")
        self.schemes = tuple(s.lower() for s in schemes)
        if not self.schemes or any(not re.fullmatch(r"[a-z][a-z0-9+.-]*", s)
                                   for s in self.schemes):
            raise UserError("url_schemes must be a list of scheme names like 'https'")

    def check(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a URL (a string)"
        if len(value) > 8192 or "\\" in value or _has_hidden(value):
            return "is not a plain URL"
        try:
            parts = urllib.parse.urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError on an invalid port
        except ValueError:
            return "is not a valid URL"
        if parts.scheme.lower() not in self.schemes:
            return f"uses a scheme that is not allowed (allowed: {_listed(self.schemes)})"
        netloc = parts.netloc
        if not netloc or "@" in netloc or "%" in netloc:
            return "has no plain host (user info and escapes are not allowed)"
        host = canonical_host(parts.hostname or "")
        if host is None or not self.hosts.allows(host):
            return f"points to a host that is not allowed (allowed: {_listed(self.hosts.entries)})"
        return None

    def __repr__(self) -> str:
        return f"UrlAllowed({list(self.hosts.entries)!r}, schemes={list(self.schemes)!r})"


_LOCAL_PART = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")


class EmailDomain:
    """The value is one bare address ``local@domain`` whose domain is in an allow-list.

    Only a plain address is accepted: no display name (``Bob <bob@x>``), no lists, comments,
    quoted local parts, IP-literal domains or a second ``@`` — the forms where two parsers
    disagree about the real recipient. Domains compare in punycode form; ``*.example.com``
    allows subdomains.
    """

    def __init__(self, domains: Iterable[str]) -> None:
        self.domains = _HostList(domains, "email_domains")

    def check(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be an e-mail address (a string)"
        if len(value) > 320 or _has_hidden(value) or value.count("@") != 1:
            return "is not a single plain e-mail address"
        local, domain = value.split("@")
        if len(local) > 64 or not _LOCAL_PART.fullmatch(local) or domain.startswith("["):
            return "is not a single plain e-mail address"
        host = canonical_host(domain)
        if host is None or not self.domains.allows(host):
            return f"is not at an allowed domain (allowed: {_listed(self.domains.entries)})"
        return None

    def __repr__(self) -> str:
        return f"EmailDomain({list(self.domains.entries)!r})"


# -- what a constraint can judge -----------------------------------------------------------

_EXACT = 2**53
"""Integers beyond this are not exact as doubles (JSON's interoperable range, RFC 8259)."""


def _plain_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and abs(value) <= _EXACT)


def _kind(value: Any) -> str | None:
    """A JSON scalar's kind, ``None`` for anything else or a number not judged exactly."""
    if value is None or isinstance(value, (bool, str)):
        return type(value).__name__
    return "number" if _plain_number(value) else None


def _judges_one_of(constraint: Any, value: Any) -> bool:
    # only a value of an allowed kind; a string only when no spelling of it is allowed
    kind = _kind(value)
    if kind is None or kind not in {_kind(v) for v in constraint.values}:
        return False
    return not isinstance(value, str) or _folded(value) not in {
        _folded(v) for v in constraint.values if isinstance(v, str)}


def _judges_none_of(constraint: Any, value: Any) -> bool:
    # it refuses spellings of a value too; only the value itself is clearly one of them
    return _kind(value) is not None and OneOf(constraint.values).check(value) is None


def _judges_text(constraint: Any, value: Any) -> bool:
    return isinstance(value, str) and unicodedata.normalize("NFKC", value) == value


def _judges_matches(constraint: Any, value: Any) -> bool:
    # its look-alikes too are outside (a tool may read "ＥＸＴ-1" as "EXT-1")
    if not isinstance(value, str):
        return False
    folded = unicodedata.normalize("NFKC", value)
    return (max(len(value), len(folded)) <= constraint.input_cap
            and constraint.check(folded) is not None)


def _judges_not_matches(constraint: Any, value: Any) -> bool:
    # the pattern itself matches (a look-alike only matching after NFKC is not judged)
    return (isinstance(value, str) and len(value) <= constraint.input_cap
            and re.fullmatch(constraint.pattern, value) is not None)


def _judges_path(constraint: Any, value: Any) -> bool:
    # a plain path, comparable with the root: one any root of the same kind would accept
    absolute = constraint.base is not None or posixpath.isabs(constraint.root)
    anywhere = PathInside("/" if absolute else ".", base=constraint.base,
                          resolve_symlinks=constraint.resolve_symlinks)
    return anywhere.check(value) is None


def _judges_url(constraint: Any, value: Any) -> bool:
    # a plain URL: one the constraint would accept if its own scheme and host were allowed
    if not isinstance(value, str):
        return False
    try:
        parts = urllib.parse.urlsplit(value)
        host = canonical_host(parts.hostname or "")
        return host is not None and UrlAllowed(
            [host], schemes=[parts.scheme.lower()]).check(value) is None
    except (ValueError, UserError):
        return False


def _judges_email(constraint: Any, value: Any) -> bool:
    # a plain address: one the constraint would accept if its own domain were allowed
    if not isinstance(value, str):
        return False
    host = canonical_host(value.rpartition("@")[2])
    try:
        return host is not None and EmailDomain([host]).check(value) is None
    except UserError:
        return False


_JUDGES: Mapping[type, Callable[[Any, Any], bool]] = {
    NumberRange: lambda constraint, value: _plain_number(value),
    LengthRange: _judges_text,
    OneOf: _judges_one_of,
    NoneOf: _judges_none_of,
    Matches: _judges_matches,
    NotMatches: _judges_not_matches,
    PathInside: _judges_path,
    UrlAllowed: _judges_url,
    EmailDomain: _judges_email,
}
"""What each built-in constraint can judge (its refusal of anything else keeps the quorum)."""


def clearly_refuses(constraint: Constraint, value: Any) -> bool:
    """Whether *constraint* refuses *value* and *value* is one it can judge: a plain value of
    the kind it checks (a finite, exactly representable number for a range; a string no
    spelling of which it allows; a plain URL, address or path). A refusal of anything else
    (``"5000"`` for a number, a look-alike, an operator's own constraint) is not clear: a
    rule that relaxes on a refusal (a quorum's ``arguments``) must not relax on it."""
    if constraint.check(value) is None:
        return False
    judges = _JUDGES.get(type(constraint))
    return judges is not None and judges(constraint, value)
