"""Loading a policy from TOML (``anfitrion.toml``), strictly.

Every table and key is checked: an unknown key, a wrong type or an invalid constraint is a
:class:`~anfitrion.exceptions.ConfigError` naming the file, the line (when it can be found) and
the key — never silently ignored. Array tables are numbered from 1 in key paths
(``rules[2].arguments.to`` is the second ``[[rules]]``). The format is documented in
``docs/policy.md``; ``examples/anfitrion.toml`` is a complete example.

Example:
    >>> policy = parse_policy('''
    ... [defaults]
    ... write = "deny"
    ... [[rules]]
    ... tool = "send_email"
    ... verdict = "ask"
    ... ''')
    >>> len(policy.rules)  # the rule, and taint containment (on unless [taint] turns it off)
    2
"""

from __future__ import annotations

import functools
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

from .._approvals import PREVIEW_KINDS, Quorum
from .._canonical import canonical_json
from .._constraints import (
    Constraint,
    EmailDomain,
    LengthRange,
    Matches,
    NoneOf,
    NotMatches,
    NumberRange,
    OneOf,
    PathInside,
    UrlAllowed,
)
from .._dataflow import FIELDS as DATAFLOW_FIELDS
from .._dataflow import Dataflow
from .._effects import EffectScope
from .._home import read_settings_text
from .._media import MediaSettings
from .._principal import Principal
from .._tools import TOOL_NAME, Effect
from ..exceptions import ConfigError, UserError
from ._core import ApprovalLimits, Budgets, Policy
from ._decision import Rule, Verdict
from ._declarations import ToolDeclaration, check_template_syntax
from ._media import parse_media
from ._quorum import RequireQuorum
from ._ratelimit import RateLimit, parse_duration
from ._rules import ArgumentRule, RepeatGuard, ToolRule
from ._secrets import SecretArguments
from ._taint import PLAN_BEFORE_TAINT, READS_MODES, taint_rule

__all__ = ["DEFAULT_POLICY_FILE", "SECTIONS", "Section", "find_policy", "load_policy",
           "parse_policy"]

DEFAULT_POLICY_FILE = "anfitrion.toml"
T = TypeVar("T")

_NOT_HASHED = {"store", "shadow", "lint"}
"""Tables that cannot change a decision of this policy: not part of its hash."""
_RULE = {"id", "tool", "tools", "effect", "roles", "verdict", "reason", "violation",
         "arguments", "quorum"}
_RATE = {"id", "tool", "tools", "max_calls", "per", "combined", "reason"}
_CONSTRAINT = {"path_inside", "base", "resolve_symlinks", "one_of", "none_of", "matches",
               "not_matches",
               "max_input_length", "min", "max", "min_length", "max_length", "url_hosts",
               "url_schemes", "email_domains"}
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_KEY = re.compile(rf"^\s*({_PART}(?:\s*\.\s*{_PART})*)\s*=")


def _printable(text: str) -> str:
    """*text* on one visible line: line breaks of any kind (``\\n``, U+2028, U+0085), control
    and format characters become escapes, so a hostile key cannot forge a second message line
    or drive a terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" if ord(c) < 0x10000
                   else f"\\U{ord(c):08x}" for c in text)


def _key_part(part: str) -> str:
    if part.startswith('"'):  # a basic string: its escapes (\\u2028, \\n) name the real key
        try:
            return str(tomllib.loads(f"k = {part}")["k"])
        except tomllib.TOMLDecodeError:
            pass
    return part.strip("\"'")


def _split_key(text: str) -> list[str]:
    return [_key_part(p.strip()) for p in re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""",
                                                     text)]


class _Lines:
    """Maps dotted key paths (array tables numbered from 1) to the line that defines them."""

    def __init__(self, text: str) -> None:
        self.lines: dict[str, int] = {}
        arrays: dict[str, int] = {}
        table = ""
        # TOML ends lines at \n only; splitlines() would also split at U+2028, \f, \x1c ...
        for number, line in enumerate(text.split("\n"), 1):
            header = _HEADER.match(line)
            if header and not _KEY.match(line):
                parts = _split_key(header.group(2))
                path = ""
                for i, part in enumerate(parts):
                    path = f"{path}.{part}" if path else part
                    last = i == len(parts) - 1
                    if header.group(1) == "[[" and last:
                        arrays[path] = arrays.get(path, 0) + 1
                        path = f"{path}[{arrays[path]}]"
                    elif path in arrays:
                        path = f"{path}[{arrays[path]}]"
                table = path
                self.lines.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                full = ".".join([table, *_split_key(key.group(1))]) if table else \
                    ".".join(_split_key(key.group(1)))
                self.lines.setdefault(full, number)

    def find(self, key: str) -> int | None:
        while key:
            if key in self.lines:
                return self.lines[key]
            key = re.sub(r"(\.[^.]*|\[\d+\])$", "", key) if ("." in key or "[" in key) else ""
        return None


class _Reader:
    def __init__(self, text: str, path: str | None) -> None:
        self.path = path
        self.index = _Lines(text)

    def fail(self, message: str, key: str) -> NoReturn:
        raise ConfigError(_printable(message), path=self.path, key=_printable(key) or None,
                          line=self.index.find(key))

    def table(self, value: Any, key: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail("must be a table", key)
        for name in value:
            if name not in allowed:
                self.fail(f"unknown key {name!r} (allowed: {', '.join(sorted(allowed))})",
                          f"{key}.{name}" if key else name)
        return value

    def typed(self, table: Mapping[str, Any], name: str, key: str, kind: type | tuple[type, ...],
              what: str) -> Any:
        value = table.get(name)
        if value is None:
            return None
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            self.fail(f"must be {what}", f"{key}.{name}")
        if not isinstance(value, kind):
            self.fail(f"must be {what}", f"{key}.{name}")
        return value

    def strings(self, table: Mapping[str, Any], name: str, key: str) -> list[str] | None:
        value = table.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not value or \
                not all(isinstance(v, str) and v for v in value):
            self.fail("must be a non-empty list of strings", f"{key}.{name}")
        return value

    def built(self, key: str, make: Callable[[], T]) -> T:
        try:
            return make()
        except (ValueError, OverflowError) as exc:  # a number too large for its use is a value
            self.fail(str(exc), key)

    def verdict(self, table: Mapping[str, Any], name: str, key: str) -> Verdict | None:
        value = table.get(name)
        if value is None:
            return None
        if value not in ("allow", "ask", "deny"):
            self.fail("must be one of 'allow', 'ask', 'deny'", f"{key}.{name}")
        return Verdict(value)

    def duration(self, table: Mapping[str, Any], name: str, key: str) -> timedelta | None:
        if name not in table:
            return None
        return self.built(f"{key}.{name}", lambda: parse_duration(table[name]))

    def tools(self, table: Mapping[str, Any], key: str) -> list[str] | None:
        if "tool" in table and "tools" in table:
            self.fail("give 'tool' or 'tools', not both", f"{key}.tools")
        if "tool" in table:
            return [self.typed(table, "tool", key, str, "a tool name or glob")]
        return self.strings(table, "tools", key)


def _constraints(r: _Reader, spec: Any, key: str, base_dir: str | None) -> list[Constraint]:
    spec = r.table(spec, key, _CONSTRAINT)
    if not spec:
        r.fail("names no constraint", key)
    out: list[Constraint] = []
    pairs = {"base": "path_inside", "resolve_symlinks": "path_inside",
             "max_input_length": "matches", "url_schemes": "url_hosts"}
    for option, owner in pairs.items():
        if option == "max_input_length" and "not_matches" in spec:
            continue
        if option in spec and owner not in spec:
            r.fail(f"{option!r} only goes with {owner!r}", f"{key}.{option}")
    if "path_inside" in spec:
        root = r.typed(spec, "path_inside", key, str, "a path")
        base = r.typed(spec, "base", key, str, "a directory path")
        if base is not None and not os.path.isabs(base) and base_dir is not None:
            base = os.path.normpath(os.path.join(base_dir, base))
        resolve = r.typed(spec, "resolve_symlinks", key, bool, "true or false")
        out.append(r.built(f"{key}.path_inside", lambda: PathInside(
            root, base=base, resolve_symlinks=bool(resolve))))
    if "one_of" in spec:
        values = spec["one_of"]
        if not isinstance(values, list):
            r.fail("must be a list", f"{key}.one_of")
        out.append(r.built(f"{key}.one_of", lambda: OneOf(values)))
    if "none_of" in spec:
        refused = spec["none_of"]
        if not isinstance(refused, list):
            r.fail("must be a list", f"{key}.none_of")
        out.append(r.built(f"{key}.none_of", lambda: NoneOf(refused)))
    if "matches" in spec:
        pattern = r.typed(spec, "matches", key, str, "a regular expression")
        cap = r.typed(spec, "max_input_length", key, int, "an integer")
        cap = 1024 if cap is None else cap  # 0 is refused by Matches, not read as unset
        out.append(r.built(f"{key}.matches", lambda: Matches(pattern, max_input_length=cap)))
    if "not_matches" in spec:
        negative = r.typed(spec, "not_matches", key, str, "a regular expression")
        limit = r.typed(spec, "max_input_length", key, int, "an integer")
        limit = 1024 if limit is None else limit
        out.append(r.built(f"{key}.not_matches",
                           lambda: NotMatches(negative, max_input_length=limit)))
    if "min" in spec or "max" in spec:
        low = r.typed(spec, "min", key, (int, float), "a number")
        high = r.typed(spec, "max", key, (int, float), "a number")
        for name, bound in (("min", low), ("max", high)):
            # nan compares false with everything: a NaN bound would let every number through
            if isinstance(bound, float) and not math.isfinite(bound):
                r.fail("must be a finite number", f"{key}.{name}")
        out.append(r.built(f"{key}.{'min' if 'min' in spec else 'max'}",
                           lambda: NumberRange(low, high)))
    if "min_length" in spec or "max_length" in spec:
        short = r.typed(spec, "min_length", key, int, "an integer")
        long = r.typed(spec, "max_length", key, int, "an integer")
        out.append(r.built(f"{key}.{'min_length' if 'min_length' in spec else 'max_length'}",
                           lambda: LengthRange(short, long)))
    if "url_hosts" in spec:
        hosts = r.strings(spec, "url_hosts", key) or []
        schemes = r.strings(spec, "url_schemes", key) or ["https"]
        out.append(r.built(f"{key}.url_hosts", lambda: UrlAllowed(hosts, schemes=schemes)))
    if "email_domains" in spec:
        domains = r.strings(spec, "email_domains", key) or []
        out.append(r.built(f"{key}.email_domains", lambda: EmailDomain(domains)))
    return out


def _rule(r: _Reader, spec: Any, key: str, base_dir: str | None) -> Rule:
    spec = r.table(spec, key, _RULE)
    rule = _plain_rule(r, spec, key, base_dir)
    if "quorum" not in spec:
        return rule
    # the two-person rule: quorum = { approvals = 2, roles = ["finance"],
    #                                  arguments = { amount = { min = 1000 } } }
    where = f"{key}.quorum"
    table = r.table(spec["quorum"], where, {"approvals", "roles", "arguments"})
    if "approvals" not in table:
        r.fail("a quorum needs 'approvals' (how many distinct people)", where)
    count = r.typed(table, "approvals", where, int, "an integer")
    roles = r.strings(table, "roles", where) or []
    quorum = r.built(where, lambda: Quorum(count, tuple(roles)))
    when = _argument_constraints(r, table, where, base_dir) if "arguments" in table else None
    return RequireQuorum(rule, quorum, when=when)


def _argument_constraints(r: _Reader, spec: Mapping[str, Any], key: str,
                          base_dir: str | None) -> dict[str, list[Constraint]]:
    """A rule's (or a quorum's) ``arguments`` table: argument name → its constraints."""
    arguments = r.table(spec["arguments"], f"{key}.arguments",
                        set(spec["arguments"]) if isinstance(spec["arguments"], dict)
                        else set())
    if not arguments:
        r.fail("names no argument", f"{key}.arguments")
    return {name: _constraints(r, value, f"{key}.arguments.{name}", base_dir)
            for name, value in arguments.items()}


def _plain_rule(r: _Reader, spec: Mapping[str, Any], key: str, base_dir: str | None) -> Rule:
    tools = r.tools(spec, key)
    effect = spec.get("effect")
    if effect is not None and effect not in ("read", "write"):
        r.fail("must be 'read' or 'write'", f"{key}.effect")
    if tools is None and effect is None:
        r.fail("a rule needs 'tool', 'tools' or 'effect' to say which calls it is about", key)
    roles = r.strings(spec, "roles", key)
    verdict = r.verdict(spec, "verdict", key)
    reason = r.typed(spec, "reason", key, str, "text")
    violation = r.typed(spec, "violation", key, str, "text")
    rule_id = r.typed(spec, "id", key, str, "text") or key
    if violation is not None and "arguments" not in spec:
        r.fail("'violation' only goes with 'arguments'", f"{key}.violation")
    if "arguments" in spec:
        constraints = _argument_constraints(r, spec, key, base_dir)
        return r.built(key, lambda: ArgumentRule(tools or "*", constraints, verdict,
                                                 reason=reason, violation=violation,
                                                 effect=effect, roles=roles, rule_id=rule_id))
    if verdict is None:
        r.fail("a rule without 'arguments' needs a 'verdict'", key)
    return r.built(key, lambda: ToolRule(tools or "*", verdict, reason=reason, effect=effect,
                                         roles=roles, rule_id=rule_id))


def _webhooks(r: _Reader, specs: Any, key: str = "approvals.webhooks") -> tuple[Any, ...]:
    """``[[approvals.webhooks]]``: url, secret_env (never the secret itself), callback_url,
    max_attempts, first_delay, max_delay, timeout (seconds)."""
    from ._core import WebhookTarget

    if not isinstance(specs, list):
        r.fail("must be an array of tables ([[approvals.webhooks]])", key)
    targets = []
    for number, spec in enumerate(specs, 1):
        where = f"{key}[{number}]"
        spec = r.table(spec, where, {"url", "secret_env", "callback_url", "max_attempts",
                                     "first_delay", "max_delay", "timeout"})
        if "url" not in spec or "secret_env" not in spec:
            r.fail("a webhook needs 'url' and 'secret_env' (the variable holding its "
                   "secret; the secret never goes in the file)", where)
        options: dict[str, Any] = {
            name: r.typed(spec, name, where, str, "a string")
            for name in ("url", "secret_env", "callback_url") if name in spec}
        if "max_attempts" in spec:
            options["max_attempts"] = r.typed(spec, "max_attempts", where, int, "an integer")
        for name in ("first_delay", "max_delay", "timeout"):
            if name in spec:
                options[name] = float(r.typed(spec, name, where, (int, float), "seconds"))
        targets.append(r.built(where, functools.partial(WebhookTarget, **options)))
    return tuple(targets)


def _rate_limit(r: _Reader, spec: Any, key: str) -> Rule:
    spec = r.table(spec, key, _RATE)
    tools = r.tools(spec, key)
    if tools is None:
        r.fail("a rate limit needs 'tool' or 'tools' ('*' for every tool)", key)
    if "max_calls" not in spec or "per" not in spec:
        r.fail("a rate limit needs 'max_calls' and 'per'", key)
    max_calls = r.typed(spec, "max_calls", key, int, "an integer")
    per = r.duration(spec, "per", key) or timedelta(0)
    combined = r.typed(spec, "combined", key, bool, "true or false")
    reason = r.typed(spec, "reason", key, str, "text")
    rule_id = r.typed(spec, "id", key, str, "text") or key
    return r.built(key, lambda: RateLimit(tools, max_calls=max_calls, per=per,
                                          combined=bool(combined), reason=reason,
                                          rule_id=rule_id))


@dataclass
class _Parsed:
    """What the sections of a policy file build, as each section parser adds its part."""

    base_dir: str | None
    """The file's directory (relative paths in constraints and ``[shadow]`` start there)."""
    rules: list[Rule] = field(default_factory=list)
    defaults: dict[Effect, Verdict] = field(default_factory=dict)
    principals: dict[str, Principal] = field(default_factory=dict)
    budgets: Budgets | None = None
    approvals: ApprovalLimits | None = None
    declarations: dict[str, ToolDeclaration] = field(default_factory=dict)
    dataflows: dict[str, Dataflow] = field(default_factory=dict)
    silences: tuple[Any, ...] = ()
    """The ``[lint]`` silences (:class:`~anfitrion.policy.Silence`)."""
    shadow_file: str | None = None
    """The file ``[shadow]`` names (read by :func:`load_policy`: the parser does no I/O)."""
    media: MediaSettings = field(default_factory=MediaSettings)


Section = Callable[[_Reader, Any, _Parsed], None]
"""A section parser: the reader, the section's value (``None`` when the file has none) and
what the file builds so far. It checks its keys through the reader (every error names the
key and its line) and adds its part."""


def _store_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    """``[store] url``: where the commands keep their data (read by :mod:`anfitrion._home`)."""
    if value is not None:
        r.typed(r.table(value, "store", {"url"}), "url", "store", str, "a store URL")


def _defaults_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    if value is None:
        return
    table = r.table(value, "defaults", {"read", "write"})
    for effect in ("read", "write"):
        verdict = r.verdict(table, effect, "defaults")
        if verdict is not None:
            parsed.defaults[Effect(effect)] = verdict


def _principals_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    if value is None:
        return
    table = r.table(value, "principals", set(value) if isinstance(value, dict) else set())
    for pid, spec in table.items():
        key = f"principals.{pid}"
        spec = r.table(spec, key, {"scopes", "roles"})
        parsed.principals[pid] = Principal(pid, frozenset(r.strings(spec, "roles", key) or ()),
                                           frozenset(r.strings(spec, "scopes", key) or ()))


def _array(r: _Reader, value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        r.fail(f"must be an array of tables ([[{name}]])", name)
    return value


def _rules_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    for i, spec in enumerate(_array(r, value, "rules"), 1):
        parsed.rules.append(_rule(r, spec, f"rules[{i}]", parsed.base_dir))


def _read_beside(r: _Reader, name: str, key: str, base_dir: str | None) -> tuple[str, str]:
    """A file a policy file names (relative to it): its path and its UTF-8 text."""
    if base_dir is not None and not os.path.isabs(name):
        name = os.path.join(base_dir, name)
    try:
        with open(name, encoding="utf-8") as f:
            return name, f.read()
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        r.fail(f"cannot read {name!r}: {getattr(exc, 'strerror', None) or exc}", key)


def _cedar_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    """``[[cedar]]``: Cedar policies (``policies``, and their ``schema``) as a rule
    (:mod:`anfitrion.policy._cedar`); a file that does not parse or validate refuses to load."""
    from ._cedar import CedarRule, load_cedar  # the engine is the cedar extra: loaded on use

    for i, spec in enumerate(_array(r, value, "cedar"), 1):
        key = f"cedar[{i}]"
        table = r.table(spec, key, {"id", "policies", "schema"})
        name = r.typed(table, "policies", key, str, "a Cedar file path")
        if name is None:
            r.fail("names no Cedar file ('policies = \"tools.cedar\"')", key)
        path, text = _read_beside(r, name, f"{key}.policies", parsed.base_dir)
        schema_path = schema_text = None
        if (schema := r.typed(table, "schema", key, str, "a Cedar schema file path")):
            schema_path, schema_text = _read_beside(r, schema, f"{key}.schema", parsed.base_dir)
        policies = load_cedar(text, path, schema_text=schema_text, schema_source=schema_path)
        rule_id = r.typed(table, "id", key, str, "text") or key
        parsed.rules.append(CedarRule(policies, rule_id=rule_id))


def _pdp_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    """``[[pdp]]``: an external decision point (AuthZEN or OPA) as a rule
    (:mod:`anfitrion.policy._pdp`)."""
    from ._pdp import DecisionPointRule

    for i, spec in enumerate(_array(r, value, "pdp"), 1):
        key = f"pdp[{i}]"
        table = r.table(spec, key, {"id", "url", "kind", "timeout", "on_error", "tool",
                                    "tools", "token_env"})
        url = r.typed(table, "url", key, str, "an https:// URL")
        if url is None:
            r.fail("a decision point needs 'url'", key)
        options: dict[str, Any] = {"rule_id": r.typed(table, "id", key, str, "text") or key}
        for name in ("kind", "on_error", "token_env"):
            if name in table:
                options[name] = r.typed(table, name, key, str, "a string")
        if "timeout" in table:
            options["timeout"] = float(r.typed(table, "timeout", key, (int, float), "seconds"))
        if (tools := r.tools(table, key)) is not None:
            options["tools"] = tools
        parsed.rules.append(r.built(key, functools.partial(DecisionPointRule, url, **options)))


def _rate_limits_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    for i, spec in enumerate(_array(r, value, "rate_limits"), 1):
        parsed.rules.append(_rate_limit(r, spec, f"rate_limits[{i}]"))


def _repeat_guard_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    if value is None:
        return
    table = r.table(value, "repeat_guard", {"max_repeats", "reason"})
    repeats = r.typed(table, "max_repeats", "repeat_guard", int, "an integer")
    reason = r.typed(table, "reason", "repeat_guard", str, "text")
    parsed.rules.append(r.built("repeat_guard.max_repeats", lambda: RepeatGuard(
        3 if repeats is None else repeats, reason=reason)))


def _budgets_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    if value is None:
        return
    table = r.table(value, "budgets", {"tool_calls", "turns", "approvals_asked"})
    values: dict[str, int] = {k: r.typed(table, k, "budgets", int, "an integer") for k in table}
    parsed.budgets = r.built("budgets", lambda: Budgets(**values))


def _approvals_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    if value is None:
        return
    key = "approvals"
    table = r.table(value, key, {"ttl", "max_pending", "max_asks", "per", "max_edits",
                                 "webhooks"})
    options: dict[str, Any] = {}
    if "webhooks" in table:
        options["webhooks"] = _webhooks(r, table["webhooks"])
    for name in ("ttl", "per"):
        if (d := r.duration(table, name, key)) is not None:
            options[name] = d
    for name in ("max_pending", "max_asks", "max_edits"):
        if (n := r.typed(table, name, key, int, "an integer")) is not None:
            options[name] = n
    parsed.approvals = r.built(key, lambda: ApprovalLimits(**options))


def _tools_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    parsed.declarations, parsed.dataflows = _tool_declarations(r, value)


def _taint_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    """``[taint]``: containment is on unless the file turns it off — writes in a session that
    read untrusted content ask a person, and arguments that came only from such content are
    flagged. The data flows of ``[tools."<name>"]`` go to it."""
    taint: dict[str, Any] = {"declarations": parsed.dataflows} if parsed.dataflows else {}
    if value is not None:
        table = r.table(value, "taint", {"enabled", "allowed_hosts", "deny_flagged", "reads",
                                         "free_reads", "plan"})
        taint |= {name: r.typed(table, name, "taint", bool, "true or false")
                  for name in ("enabled", "deny_flagged") if name in table}
        if "plan" in table:
            plan = table["plan"]
            taint["plan"] = plan if plan == PLAN_BEFORE_TAINT else r.built(
                "taint.plan", lambda: _plan(plan))
        for name in ("allowed_hosts", "free_reads"):
            if name in table:
                taint[name] = r.strings(table, name, "taint")
        if "reads" in table:
            reads = r.typed(table, "reads", "taint", str, "a string")
            if reads not in READS_MODES:
                r.fail(f"reads must be one of {', '.join(map(repr, READS_MODES))}, "
                       f"not {reads!r}", "taint.reads")
            taint["reads"] = reads
    if taint.pop("enabled", True):
        parsed.rules.append(r.built("taint", lambda: taint_rule(**taint)))


def _secrets_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    """``[secrets]``: credentials in outgoing arguments ask (the default), deny, or are let
    through (``verdict = "off"``); ``exempt_tools`` are not scanned."""
    table = r.table({} if value is None else value, "secrets", {"verdict", "exempt_tools"})
    verdict = r.typed(table, "verdict", "secrets", str, "a string") or "ask"
    if verdict not in ("ask", "deny", "off"):
        r.fail("must be one of 'ask', 'deny', 'off'", "secrets.verdict")
    if verdict == "off":
        return
    exempt = r.strings(table, "exempt_tools", "secrets") or []
    parsed.rules.append(r.built("secrets", lambda: SecretArguments(verdict, exempt_tools=exempt)))


def _lint_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    """``[lint]``: silenced findings of ``anfitrion tools lint``, checked by the linter."""
    if value is None:
        return
    from ._lint import parse_silenced  # the linter reads tool definitions: loaded on use

    try:
        parsed.silences = tuple(parse_silenced(value))
    except ValueError as exc:
        r.fail(str(exc), "lint")


def _media_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    """``[media]``: which images and sounds of tool results reach the model
    (:mod:`anfitrion.policy._media`)."""
    parsed.media = parse_media({} if value is None else {"media": value}, r.fail)


def _shadow_section(r: _Reader, value: Any, parsed: _Parsed) -> None:
    if value is not None:
        parsed.shadow_file = _shadow(r, value, parsed.base_dir)


SECTIONS: dict[str, Section] = {
    "store": _store_section,
    "defaults": _defaults_section,
    "principals": _principals_section,
    "rules": _rules_section,
    "cedar": _cedar_section,
    "pdp": _pdp_section,
    "rate_limits": _rate_limits_section,
    "repeat_guard": _repeat_guard_section,
    "budgets": _budgets_section,
    "approvals": _approvals_section,
    "tools": _tools_section,
    "taint": _taint_section,
    "secrets": _secrets_section,
    "lint": _lint_section,
    "shadow": _shadow_section,
    "media": _media_section,
}
"""The tables of a policy file and their parsers, run in this order (the rules a file builds
come in it too: ``[[rules]]``, ``[[cedar]]``, ``[[pdp]]``, ``[[rate_limits]]``,
``[repeat_guard]``, taint, secrets). Every parser runs, with ``None`` for a table the file
does not have (taint and secrets are on by default). A new table is one entry here."""


def _toml(text: str, path: str | None) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        raise ConfigError(f"not valid TOML: {_printable(str(exc))}", path=path,
                          line=int(found.group(1)) if found else None) from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError("not valid TOML: arrays or tables are nested too deeply",
                          path=path) from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise ConfigError(f"not valid TOML: {_printable(str(exc))[:120]}", path=path) from None


def parse_policy(text: str, *, path: str | None = None) -> Policy:
    """Build a :class:`Policy` from TOML text: each table by its parser in :data:`SECTIONS`.

    Parsing does no I/O: a ``[shadow]`` table is checked, and the file it names is read by
    :func:`load_policy` (here ``Policy.shadow`` stays ``None``).

    Raises:
        ConfigError: the text is not TOML, or a key or value is unknown or invalid.
    """
    return _parse(text, path)[0]


def _parse(text: str, path: str | None) -> tuple[Policy, _Reader, str | None]:
    """The policy of *text*, its reader (for errors naming a key of it) and the file its
    ``[shadow]`` names."""
    data = _toml(text, path)
    r = _Reader(text, path)
    r.table(data, "", set(SECTIONS))
    parsed = _Parsed(os.path.dirname(os.path.abspath(path)) if path else None)
    for name, section in SECTIONS.items():
        section(r, data.get(name), parsed)
    policy = Policy(parsed.rules, defaults=parsed.defaults, budgets=parsed.budgets,
                    approvals=parsed.approvals, principals=parsed.principals, source=path,
                    declarations=parsed.declarations, media=parsed.media)
    policy.content_sha256 = _content_sha256(data, text, parsed.base_dir)
    policy.lint_silences = parsed.silences
    return policy, r, parsed.shadow_file


def _content_sha256(data: Mapping[str, Any], text: str, base_dir: str | None) -> str:
    """The hash of a file's parsed content: equivalent files (comments, whitespace, key order,
    quoting) hash alike. A relative ``base`` of ``path_inside`` means another directory for a
    file elsewhere, so the file's directory counts when one is used."""
    import hashlib

    relative = base_dir is not None and any(
        isinstance(spec, dict) and isinstance(spec.get("base"), str)
        and not os.path.isabs(spec["base"])
        for rule in data.get("rules", []) if isinstance(rule, dict)
        for spec in (rule.get("arguments") or {}).values())
    try:
        decisive = {k: v for k, v in data.items() if k not in _NOT_HASHED}
        body = canonical_json({"policy": decisive, "base_dir": base_dir if relative else None})
    except (TypeError, ValueError):  # a TOML date or time: not JSON, so the text stands in
        body = text
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def _shadow(r: _Reader, spec: Any, base_dir: str | None) -> str:
    """``[shadow] policy = "candidate.toml"``: evaluated beside this policy on every call and
    recorded, never enforced (relative paths are relative to this file). The file it names,
    which :func:`load_policy` reads."""
    table = r.table(spec, "shadow", {"policy"})
    name = r.typed(table, "policy", "shadow", str, "a policy file path")
    if name is None:
        r.fail("names no policy file ('policy = \"candidate.toml\"')", "shadow")
    if base_dir is not None and not os.path.isabs(name):
        name = os.path.join(base_dir, name)
    return str(name)


def _load_shadow(r: _Reader, name: str) -> Policy:
    """The shadow policy in file *name*; errors name ``shadow.policy`` of the enforced file."""
    try:
        shadow, _, its_own = _parse(_read_policy_text(name), name)
    except ConfigError as exc:
        r.fail(f"the shadow policy cannot be loaded: {exc}", "shadow.policy")
    if its_own is not None:  # parsed, never loaded: two files naming each other never loop
        r.fail("a shadow policy cannot name a shadow of its own", "shadow.policy")
    return shadow


def _plan(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or \
            not all(isinstance(v, str) and v for v in value):
        raise UserError("must be a non-empty list of tool-name globs, or 'before-taint'")
    return value


_TOOL_EFFECT_KEYS = {"effect", "effect_key", "effect_scope", "idempotent", "preview"}
_DATAFLOW_LISTS = {"outward": "names", "destructive": "names", "service_ids": "names",
                   "parties": "names", "verbs": "words ('send', 'e-mail', 'write back')"}
"""The data-flow keys that are lists of strings, and what their strings are."""
_UNSET_UNLESS_GIVEN = frozenset({"parties", "verbs"})
"""Of those, the keys whose absence means "not declared" (``None``), not an empty list."""


def _tool_declarations(r: _Reader, value: Any
                       ) -> tuple[dict[str, ToolDeclaration], dict[str, Dataflow]]:
    """``[tools."<name>"]``: what the operator declares about tools they do not own (an MCP
    server's), read in one pass: their effect and effect identity (:class:`ToolDeclaration`)
    and their data flow (:class:`Dataflow`, only for a table that has a data-flow key, so a
    tool declared for its effect alone keeps the taint rule's behaviour for undeclared
    tools)::

        [tools."mail.send"]
        effect = "write"
        effect_key = "mail:{to}:{subject}"
        sinks = { to = "recipient", cc = "recipient" }
        outward = ["subject", "body"]
        service_ids = ["message_id"]

    Whether a template's fields name the tool's arguments is checked when the tool is known
    (:meth:`ToolDeclaration.apply`)."""
    tools = {} if value is None else value
    if not isinstance(tools, dict):
        r.fail("must be a table of tools ([tools.\"<name>\"])", "tools")
    effects: dict[str, ToolDeclaration] = {}
    flows: dict[str, Dataflow] = {}
    for name, spec in tools.items():
        key = f"tools.{name}"
        if not TOOL_NAME.fullmatch(name):
            r.fail(f"{name!r} is not a tool name ([A-Za-z0-9_.-], 1 to 64 characters)", key)
        spec = r.table(spec, key, _TOOL_EFFECT_KEYS | DATAFLOW_FIELDS)
        effects[name] = _tool_effect(r, name, spec, key)
        if DATAFLOW_FIELDS & set(spec):
            flows[name] = _tool_dataflow(r, spec, key)
    return effects, flows


def _tool_effect(r: _Reader, name: str, spec: Mapping[str, Any], key: str) -> ToolDeclaration:
    effect = r.typed(spec, "effect", key, str, "'read' or 'write'")
    if effect is not None and effect not in ("read", "write"):
        r.fail("must be 'read' or 'write'", f"{key}.effect")
    template = r.typed(spec, "effect_key", key, str, "a template such as 'refund:{id}'")
    if template is not None and (problem := check_template_syntax(template)) is not None:
        r.fail(f"effect_key {template!r}: {problem}", f"{key}.effect_key")
    scope = r.typed(spec, "effect_scope", key, str, "a string")
    if scope is not None and scope not in [s.value for s in EffectScope]:
        r.fail(f"must be one of {', '.join(repr(s.value) for s in EffectScope)}",
               f"{key}.effect_scope")
    idempotent = r.typed(spec, "idempotent", key, bool, "true or false")
    preview = r.typed(spec, "preview", key, str, "'email'")
    if preview is not None and preview not in PREVIEW_KINDS:
        r.fail(f"must be one of {', '.join(repr(k) for k in sorted(PREVIEW_KINDS))}",
               f"{key}.preview")
    lines = {k: line for k in spec if (line := r.index.find(f"{key}.{k}")) is not None}
    return ToolDeclaration(name, Effect(effect) if effect else None, template,
                           EffectScope(scope) if scope else None, idempotent, r.path, lines,
                           preview=preview)


def _tool_dataflow(r: _Reader, spec: Mapping[str, Any], key: str) -> Dataflow:
    sinks = spec.get("sinks", {})
    if not isinstance(sinks, dict) or not all(isinstance(v, str) for v in sinks.values()):
        r.fail("must be a table of argument name = kind", f"{key}.sinks")
    lists: dict[str, Any] = {}
    for name, what in _DATAFLOW_LISTS.items():
        value = spec.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            r.fail(f"must be a list of {what}", f"{key}.{name}")
        if name in spec or name not in _UNSET_UNLESS_GIVEN:
            lists[name] = tuple(value)
    if "directory" in spec:
        lists["directory"] = r.typed(spec, "directory", key, bool, "true or false")
    nouns = spec.get("id_nouns", {})
    if not isinstance(nouns, dict) or not all(
            isinstance(v, list) and all(isinstance(w, str) for w in v) for v in nouns.values()):
        r.fail("must be a table of argument name = [nouns]", f"{key}.id_nouns")
    lists["id_nouns"] = {k: tuple(v) for k, v in nouns.items()}
    return r.built(key, functools.partial(Dataflow, sinks=sinks, **lists))


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and check a policy file, and the shadow policy its ``[shadow]`` names.

    Raises:
        ConfigError: the file cannot be read, is not TOML, or holds an invalid policy.
    """
    name = os.fspath(path)
    policy, r, shadow_file = _parse(_read_policy_text(name), name)
    if shadow_file is not None:
        policy.shadow = _load_shadow(r, shadow_file)
    return policy


def _read_policy_text(name: str) -> str:
    """The text of policy file *name*, by the one reader of settings files.

    Raises:
        ConfigError: it cannot be read or is not UTF-8.
    """
    try:
        return read_settings_text(name)
    except FileNotFoundError as exc:
        raise ConfigError(f"cannot read the policy file: {exc.strerror or exc}",
                          path=_printable(name)) from None


def find_policy(path: str | os.PathLike[str] | None = None) -> Policy:
    """The policy a command should use: *path*, else ``./anfitrion.toml`` when it exists,
    else :meth:`Policy.default`.

    Raises:
        ConfigError: the file is invalid (or *path* was given and cannot be read).
    """
    if path is None:
        if not os.path.exists(DEFAULT_POLICY_FILE):
            return Policy.default()
        path = DEFAULT_POLICY_FILE
    return load_policy(path)
