"""A mutation fuzzer over the repository's example config files: whatever a file holds, loading
it either succeeds or raises one :class:`ConfigError` whose message is a single line naming the
file — never a traceback (``OverflowError``, ``UnicodeDecodeError``, ``RecursionError``, ...).

The mutants are seeded and deterministic: the same run on every machine. The operators are the
classes of hostile input a config file can carry: flipped, inserted and deleted bytes,
truncation, values swapped for another type, huge and non-finite numbers, non-UTF-8 bytes and
other encodings, deep nesting, duplicated and dropped lines (duplicate keys).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from anfitrion.exceptions import ConfigError
from anfitrion.mcp._config import load_config
from anfitrion.policy import load_policy

ROOT = Path(__file__).resolve().parents[2]
MUTANTS_PER_KIND = 1500

# A server entry and gateway section with every key, so mutants reach every check.
FULL_MCP = b"""{
  "$schema": "https://example.invalid/mcp.schema.json",
  "mcpServers": {
    "git": {"command": "uvx", "args": ["mcp-server-git", "--repository", "."],
            "env": {"TZ": "UTC"}, "cwd": "/tmp", "trusted": true, "timeout": 30,
            "maxResultChars": 4096, "relistBeforeCall": false, "description": "git"},
    "docs": {"type": "http", "url": "https://docs.example/mcp",
             "headers": {"X-Team": "blue"}, "timeout": 2.5},
    "off": {"command": "x", "disabled": true}
  },
  "gateway": {"store": "sqlite:///anfitrion.db", "policy": "anfitrion.toml",
              "principal": "desktop", "scopes": ["mail:send"], "approvalWait": 60,
              "host": "127.0.0.1", "port": 8765, "tokenEnv": "TOKEN",
              "allowedOrigins": ["http://localhost"], "maxBodyBytes": 65536}
}
"""


# A policy with every table, key and constraint kind, so mutants reach every check.
FULL_POLICY = b"""[defaults]
read = "allow"
write = "ask"

[principals.alice]
roles = ["staff"]
scopes = ["mail:send"]

[[rules]]
id = "paths"
tools = ["write_draft", "read_*"]
effect = "write"
roles = ["staff"]
verdict = "allow"
reason = "inside drafts"
violation = "only drafts"
[rules.arguments.path]
path_inside = "drafts"
base = "/srv/work"
resolve_symlinks = false
[rules.arguments.subject]
matches = "[A-Za-z ]+"
max_input_length = 200
min_length = 1
max_length = 120
[rules.arguments.amount]
min = 0
max = 1000.5
[rules.arguments.kind]
one_of = ["a", 1, true, 2.5]

[[rules]]
tool = "fetch_url"
verdict = "ask"
arguments = { url = { url_hosts = ["docs.python.org"], url_schemes = ["https"] } }

[[rules]]
tool = "send_email"
verdict = "ask"
[rules.arguments.to]
email_domains = ["example.com"]

[[rate_limits]]
tools = ["send_email", "post_*"]
max_calls = 5
per = 3600
combined = true
reason = "slow down"

[budgets]
tool_calls = 50
turns = 20
approvals_asked = 10

[repeat_guard]
max_repeats = 3
reason = "loop"

[approvals]
ttl = "15m"
max_pending = 3
max_asks = 10
per = "1m"
max_edits = 2

[taint]
enabled = true
allowed_hosts = ["example.com"]
deny_flagged = false
reads = "flagged"
free_reads = ["get_current_day"]
"""


def _blocks(doc: str, language: str) -> list[bytes]:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    return [m.encode() for m in re.findall(rf"```{language}\n(.*?)```", text, re.S)]


def policy_examples() -> list[bytes]:
    # a [[cedar]] block names policy files beside it: the page's runnable Python example
    # writes them and loads it (tests/test_docs_code_blocks.py); here the blocks stand alone
    return [FULL_POLICY, (ROOT / "examples" / "anfitrion.toml").read_bytes(),
            *(b for b in _blocks("policy.md", "toml") if not b.startswith(b"[[cedar]]"))]


def mcp_examples() -> list[bytes]:
    # the page's config files (not the tools/list entries it shows as JSON too)
    return [FULL_MCP, *(b for b in _blocks("mcp.md", "json") if b'"mcpServers"' in b)]


HOSTILE_TOML_VALUES = [
    "inf", "-inf", "+inf", "nan", "-nan", "1e308", "-1e308", "1e-320", "99999999999999999999",
    "-99999999999999999999", "0", "-1", "0.0", '"99999999999999999999d"', '"99999999999999999999s"',
    '"1e308s"', '"0s"', '""', '"\\u0000"', "true", "false", "[]", "{}", "[1, 2]", '["a", 1]',
    "1979-05-27T07:32:00Z", "07:32:00", "1979-05-27", '"' + "x" * 5000 + '"', "[" * 2000,
    "[" * 600 + "]" * 600, "{a = " * 300 + "1" + "}" * 300, '"\\ud800"', "'''\n'''",
    '"drafts/\uff0e\uff0e/x"', '"/"', '"~"', '"*"', '"(a+)+$"', '"["', '"\\\\"', "9" * 5000,
    '"line\\nbreak"', '"\u2028"', '"\\u0085"', '"\x1b[2J"', "0x7fffffffffffffffff", "1_000",
    '"/b\\u0000"', '"rel/base"', '"(?P<x>"', '"\uff41.com"', '"xn--"', '".."', '"[!"',
]
HOSTILE_JSON_VALUES = [
    "Infinity", "-Infinity", "NaN", "1e999", "-1e999", "1e308", "99999999999999999999",
    "-1", "0", "0.0", "1e-400", "true", "false", "null", '""', '"\\u0000"', '"\\ud800"', "[]",
    "{}", '[1, "a"]', '{"x": 1}', '"' + "x" * 5000 + '"', "[" * 3000, "[" * 900 + "]" * 900,
    '{"a":' * 900 + "1" + "}" * 900, "9" * 5000, '"${NOT_SET_ANYWHERE}"', '"http://"',
    '"0.0.0.0"', '"file:///etc/passwd"', "1.5", "65536", "-0", '"line\\nbreak"',
    '"\\u2028"', '"\\u001b[2J"', '"\u2029"',
]
# keys that would forge a second line of an error message, or confuse a key path
HOSTILE_KEYS = ['"a\\nb"', '"\\u2028"', '"x\\r\\n[defaults]"', '"\\u001b[2J"', '"a.b"', '""',
                '"\u0085"', '"' + "k" * 3000 + '"']
HOSTILE_BYTES = [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                 b"\xc0\xaf", b"\x80", b"\x00", b"\xef\xbb\xbf", b"\r", b"\x1b[2J", b"\xe2\x80\xae"]


def _value_spans(text: bytes, separator: bytes) -> list[tuple[int, int]]:
    """Where the values after ``=`` (TOML) or ``:`` (JSON) are: up to the end of the line or the
    next comma/bracket, close enough for a mutation."""
    pattern = re.escape(separator) + rb"\s*([^,\n}\]]+)"
    return [m.span(1) for m in re.finditer(pattern, text)]


def _mutate(rng: random.Random, text: bytes, values: list[str], separator: bytes) -> bytes:
    if not text:
        return rng.choice(HOSTILE_BYTES)
    lines = text.split(b"\n")
    operator = rng.randrange(12)
    if operator == 0:  # flip a bit
        i = rng.randrange(len(text))
        return text[:i] + bytes([text[i] ^ (1 << rng.randrange(8))]) + text[i + 1:]
    if operator == 1:  # insert a random byte
        i = rng.randrange(len(text) + 1)
        return text[:i] + bytes([rng.randrange(256)]) + text[i:]
    if operator == 2:  # delete a run of bytes
        i = rng.randrange(len(text))
        return text[:i] + text[i + rng.randrange(1, 20):]
    if operator == 3:  # truncate
        return text[:rng.randrange(len(text))]
    if operator in (4, 5, 6):  # a value swapped for a hostile one (types, sizes, inf, nan, depth)
        spans = _value_spans(text, separator) or [(len(text), len(text))]
        start, end = rng.choice(spans)
        return text[:start] + rng.choice(values).encode("utf-8", "surrogatepass") + text[end:]
    if operator == 7:  # bytes that are not UTF-8 (or markers that change meaning)
        i = rng.randrange(len(text) + 1)
        return text[:i] + rng.choice(HOSTILE_BYTES) + text[i:]
    if operator == 8:  # another encoding of the whole file
        encoding = rng.choice(["utf-16", "utf-16-be", "utf-32", "latin-1", "cp1252"])
        return text.decode("utf-8", "replace").encode(encoding, "replace") + b"\xe9"
    if operator == 9:  # a duplicated line: duplicate keys, tables and array entries
        i = rng.randrange(len(lines))
        return b"\n".join([*lines[:i + 1], lines[i], *lines[i + 1:]])
    if operator == 10 and rng.random() < 0.4:  # a key renamed to a hostile one
        keys = list(re.finditer(rb'^\s*("[^"\n]*"|[A-Za-z0-9_-]+)\s*' + re.escape(separator),
                                text, re.M)) or list(re.finditer(rb'"[^"\n]*"(?=\s*:)', text))
        if keys:
            found = rng.choice(keys)
            start, end = found.span(1) if found.groups() else found.span()
            return text[:start] + rng.choice(HOSTILE_KEYS).encode() + text[end:]
    if operator == 10:  # a dropped or moved line
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        moved = lines[:i] + lines[i + 1:]
        if rng.random() < 0.5:
            moved.insert(j, lines[i])
        return b"\n".join(moved)
    # two mutations at once
    once = _mutate(rng, text, values, separator)
    return _mutate(rng, once, values, separator) if once else once


def _check_loads_or_fails_cleanly(load: Callable[[Path], object], path: Path, data: bytes,
                                  ) -> str:
    path.write_bytes(data)
    try:
        load(path)
    except ConfigError as exc:
        message = str(exc)
        # one line by any reading of "line" (U+2028, U+0085 ... too), nothing a terminal obeys
        assert len(message.splitlines()) == 1 and message.isprintable(), repr(message)
        assert message.startswith(f"{path}:"), repr(message)
        return "refused"
    return "loaded"


@pytest.mark.parametrize(("kind", "examples", "load", "values", "separator"), [
    ("policy", policy_examples, load_policy, HOSTILE_TOML_VALUES, b"="),
    ("mcp", mcp_examples, lambda p: load_config(p, environ={"DOCS_TOKEN": "t"}),
     HOSTILE_JSON_VALUES, b":"),
], ids=["policy-toml", "mcp-json"])
def test_every_mutant_of_an_example_config_loads_or_is_one_clear_config_error(
        tmp_path: Path, kind: str, examples: Callable[[], list[bytes]],
        load: Callable[[Path], object], values: list[str], separator: bytes) -> None:
    sources = examples()
    assert sources and all(_value_spans(s, separator) for s in sources)
    for source in sources:  # the examples themselves load
        assert _check_loads_or_fails_cleanly(load, tmp_path / f"example.{kind}", source) \
            == "loaded"
    rng = random.Random(f"anfitrion-config-fuzz-{kind}")
    outcomes = {"loaded": 0, "refused": 0}
    path = tmp_path / f"mutant.{kind}"
    for _ in range(MUTANTS_PER_KIND):
        source = rng.choice(sources)
        mutant = _mutate(rng, source, values, separator)
        try:
            outcomes[_check_loads_or_fails_cleanly(load, path, mutant)] += 1
        except Exception as exc:  # the mutant in the failure message, to reproduce it
            raise AssertionError(f"{type(exc).__name__}: {exc} for mutant {mutant[:400]!r}"
                                 ) from exc
    # the fuzzer must reach past the parser: both outcomes happen many times
    assert outcomes["refused"] > MUTANTS_PER_KIND // 4, outcomes
    assert outcomes["loaded"] > MUTANTS_PER_KIND // 20, outcomes


@pytest.mark.parametrize(("text", "key", "line", "problem"), [
    (b"[approvals]\nttl = inf\n", "approvals.ttl", 2, "at most 366 days"),
    (b"[approvals]\nttl = nan\n", "approvals.ttl", 2, "positive"),
    (b'[approvals]\nttl = "99999999999999999999d"\n', "approvals.ttl", 2, "at most 366 days"),
    (b"[approvals]\n\nper = 1e308\n", "approvals.per", 3, "at most 366 days"),
    (b'[[rate_limits]]\ntool = "x"\nmax_calls = 1\nper = "367d"\n', "rate_limits[1].per", 4,
     "at most 366 days"),
    (b'[approvals]\nttl = "\xd9\xa3h"\n', "approvals.ttl", 2, "not a duration"),  # Arabic 3
    (b'[defaults]\nread = "allow"\n"a\\u2028b" = 1\n', "defaults.a\\u2028b", 3, "unknown key"),
    (b'[[rules]]\ntool = "pay"\nverdict = "allow"\n[rules.arguments.amount]\nmin = nan\n',
     "rules[1].arguments.amount.min", 5, "finite"),  # NaN compares false: it would allow all
    (b'[[rules]]\ntool = "w"\nverdict = "allow"\n[rules.arguments.path]\npath_inside = "d"\n'
     b'resolve_symlinks = true\nbase = "/srv\\u0000"\n', "rules[1].arguments.path.path_inside",
     5, "absolute path"),
])
def test_the_reported_policy_crashes_are_config_errors_naming_file_line_and_key(
        tmp_path: Path, text: bytes, key: str, line: int, problem: str) -> None:
    path = tmp_path / "anfitrion.toml"
    path.write_bytes(text)
    with pytest.raises(ConfigError, match=problem) as caught:
        load_policy(path)
    assert (caught.value.path, caught.value.line, caught.value.key) == (str(path), line, key)
    assert len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize(("text", "line", "problem"), [
    (b'{"mcpServers": {}}\n\xff', 2, "not UTF-8"),
    (b'{\n "mcpServers": {\n  "g\xc3\x28": {"command": "x"}}}', 3, "not UTF-8"),
    ('{"mcpServers": {}}'.encode("utf-16"), 1, "not UTF-8"),
    (b"[" * 5000 + b"]" * 5000, 1, "deeper than 64"),
    (b'{"mcpServers": {},\n "mcpServers": {"evil": {"command": "x"}}}', None, "duplicate key"),
    (b'{"mcpServers": {"a": {"command": "x", "timeout": NaN}}}', None, "NaN"),
    (b'{"mcpServers": {"a": {"command": "x", "timeout": 1e999}}}', None, "out of range"),
    (b'{"mcpServers": ' + b"9" * 5000 + b"}", None, "more than 100 digits"),
    (b'{"mcpServers": {"a": {"command": "x",\n  "timeout": 1e308}}}', 2, "at most 86400"),
    (b'\xef\xbb\xbf{"mcpServers": {}}', 1, "byte order mark"),
])
def test_hostile_mcp_config_files_are_config_errors_naming_the_file_and_line(
        tmp_path: Path, text: bytes, line: int | None, problem: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(text)
    with pytest.raises(ConfigError, match=problem) as caught:
        load_config(path)
    assert (caught.value.path, caught.value.line) == (str(path), line)
    assert len(str(caught.value).splitlines()) == 1


def test_a_key_cannot_forge_a_second_line_of_an_mcp_config_error(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(b'{"mcpServers": {\n "ok\\n/etc/passwd:1: all good": {"command": "x"}}}')
    with pytest.raises(ConfigError, match="server id") as caught:
        load_config(path)
    assert caught.value.line == 2
    assert str(caught.value).splitlines() == [str(caught.value)]
    assert "ok\\u000a/etc/passwd" in str(caught.value)


@pytest.mark.parametrize("entry", [
    {"command": "x", "env": {"A=B": "1"}},
    {"command": "x", "env": {"A": "one\x00two"}},
    {"command": "x\x00y"},
    {"command": "x", "args": ["ok", "a\x00b"]},
    {"command": "x", "cwd": "/tmp\x00"},
    {"url": "https://h/mcp", "headers": {"X-A": "v\r\nX-Injected: 1"}},
    {"url": "https://h/mcp", "headers": {"X-A": "${SECRET}"}},  # a secret with a line break
    {"url": "https://h/mcp", "headers": {"Bad Name": "v"}},
    {"url": "https://h/m cp"},
    {"url": "https://h/\x1b[2J"},
])
def test_values_a_server_process_or_request_cannot_carry_are_refused_at_load(
        tmp_path: Path, entry: dict[str, object]) -> None:
    """NUL cannot reach execve and CR/LF in a header starts another one: refused with the key
    at load, not as an exception when the server is started."""
    import json

    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"s": entry}}))
    with pytest.raises(ConfigError, match=r"\(at mcpServers\.s") as caught:
        load_config(path, environ={"SECRET": "token\nX-Injected: 1"})
    assert caught.value.line == 1


@pytest.mark.parametrize("load", [load_policy, load_config])
def test_a_file_name_with_a_nul_is_a_config_error(load: Callable[[Path], object]) -> None:
    with pytest.raises(ConfigError, match="NUL"):
        load(Path("policy\x00.toml"))
