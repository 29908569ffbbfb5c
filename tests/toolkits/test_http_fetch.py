"""SSRF and friends, against a local HTTP server and a resolver stub."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion import Principal, ToolContext
from anfitrion._tools import Tool
from anfitrion.exceptions import ArgumentError, ToolError

pytest.importorskip("httpx")

from anfitrion._addresses import address_is_public
from anfitrion.toolkits import http_fetch, static_resolver
from anfitrion.toolkits._http_fetch import numeric_host


class Handler(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, dict[str, str]]]] = []
    release: ClassVar[threading.Event] = threading.Event()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, dict(self.headers)))
        path, _, query = self.path.partition("?")
        if path == "/page":
            self._send(200, b"<html><head><title>Forecast</title><script>steal()</script>"
                            b"<style>p{}</style></head><body><h1>Lisboa</h1><p>15 &deg;C,"
                            b"   partly cloudy</p></body></html>")
        elif path == "/redirect":
            self._send(302, b"", headers={"Location": query.removeprefix("to=")})
        elif path == "/cookie":
            self._send(302, b"", headers={"Location": "/echo", "Set-Cookie": "sid=secret"})
        elif path == "/echo":
            self._send(200, json.dumps(dict(self.headers)).encode(), "application/json")
        elif path == "/loop":
            self._send(302, b"", headers={"Location": "/loop"})
        elif path == "/big":
            self._send(200, b"x" * 100_000, "text/plain")
        elif path == "/binary":
            self._send(200, b"\x89PNG\r\n", "image/png")
        elif path == "/hang":
            self.release.wait(30)
            self._send(200, b"late", "text/plain")
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        self.seen.append(("POST", self.path, dict(self.headers)))
        self._send(405, b"", "text/plain")


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        Handler.release.set()
        httpd.shutdown()
        httpd.server_close()


RESOLVER = static_resolver({
    "app.test": ["127.0.0.1"],
    "internal.test": ["10.0.0.5"],
    "meta.test": ["169.254.169.254"],
    "mixed.test": ["93.184.216.34", "127.0.0.1"],
    "mapped.test": ["::ffff:10.0.0.1"],
    "v6local.test": ["fe80::1"],
    "multicast.test": ["224.0.0.251"],
    "local.test": ["127.0.0.1"],
    "public.test": ["93.184.216.34"],
    "nat64.test": ["64:ff9b::a9fe:a9fe"],
})


def dev_tool(port: int, **options: Any) -> Tool:
    hosts = [f"{h}:{port}" for h in ("app.test", "internal.test", "meta.test", "public.test")]
    return http_fetch(hosts, resolver=RESOLVER, allow_http_loopback=True, **options)


async def fetch(t: Tool, url: str) -> Any:
    return await t.handler(t.validate({"url": url}),
                           ToolContext(Principal("a"), "s", "c", t.name))


PROD = http_fetch(["docs.example.com", "internal.test", "meta.test", "mixed.test",
                   "mapped.test", "v6local.test", "multicast.test", "local.test",
                   "nat64.test", "2130706433", "10.0.0.1"], resolver=RESOLVER)


@pytest.mark.parametrize(("url", "why"), [
    ("http://docs.example.com/", "only https"),
    ("ftp://docs.example.com/", "only https"),
    ("file:///etc/passwd", "only https"),
    ("javascript:alert(1)", "only https"),
    ("https://docs.example.com@evil.com/", "user name or password"),
    ("https://user:pw@docs.example.com/", "user name or password"),
    ("https://docs.example.com\\@evil.com/", "backslash"),
    ("https://docs.example.com /", "whitespace"),
    ("https://evil.com/", "not on the allow-list"),
    ("https://docs.example.com.evil.com/", "not on the allow-list"),
    ("https://evil.com#@docs.example.com", "not on the allow-list"),
    ("https://docs.example.com:8443/", "not on the allow-list"),
    ("https://d\u043ecs.example.com/", "not on the allow-list"),  # Cyrillic о look-alike
    ("https://docs.example.com:99999/", "invalid host or port"),
])
def test_urls_outside_the_rules_are_refused_at_validation(url: str, why: str) -> None:
    with pytest.raises(ArgumentError, match=why):
        PROD.validate({"url": url})


@pytest.mark.parametrize("host", [
    "2130706433",          # decimal 127.0.0.1
    "0177.0.0.1",          # octal
    "0x7f000001",          # hex
    "0x7f.1",              # hex, short form
    "127.1",               # short form
    "0",                   # 0.0.0.0
    "[::1]",
    "[::ffff:127.0.0.1]",  # IPv4-mapped IPv6
    "[::ffff:7f00:1]",
    "10.0.0.1",
    "012.0.0.1",           # octal 10.0.0.1
    "169.254.169.254",     # cloud metadata
    "0xa9.0xfe.0xa9.0xfe",
    "[fe80::1]",
    "224.0.0.1",           # multicast
    "240.0.0.1",           # reserved
    "100.64.0.1",          # shared address space
    "[64:ff9b::a9fe:a9fe]",  # NAT64 of 169.254.169.254
    "[2002:a00:1::]",      # 6to4 of 10.0.0.1
])
def test_non_public_addresses_are_refused_in_every_encoding(host: str) -> None:
    with pytest.raises(ArgumentError, match="not public"):
        PROD.validate({"url": f"https://{host}/"})


def test_numeric_hosts_decode_like_a_c_resolver() -> None:
    assert str(numeric_host("0x7f.1")) == "127.0.0.1"
    assert str(numeric_host("0177.0.0.01")) == "127.0.0.1"
    assert str(numeric_host("3232235521")) == "192.168.0.1"
    assert str(numeric_host("192.168.1")) == "192.168.0.1"
    assert numeric_host("docs.example.com") is None
    with pytest.raises(ValueError, match="not a valid address"):
        numeric_host("1.2.3.4.5")
    with pytest.raises(ValueError, match="not a valid address"):
        numeric_host("256.1.1.1")
    assert address_is_public(numeric_host("93.184.216.34"))  # type: ignore[arg-type]


@pytest.mark.anyio
@pytest.mark.parametrize(("host", "address"), [
    ("internal.test", "10.0.0.5"), ("meta.test", "169.254.169.254"),
    ("mixed.test", "127.0.0.1"), ("mapped.test", "::ffff:10.0.0.1"),
    ("v6local.test", "fe80::1"), ("multicast.test", "224.0.0.251"),
    ("local.test", "127.0.0.1"), ("nat64.test", "64:ff9b::a9fe:a9fe"),
])
async def test_names_resolving_to_non_public_addresses_are_refused(host: str,
                                                                   address: str) -> None:
    with pytest.raises(ToolError, match=f"resolves to {address}, which is not a public"):
        await fetch(PROD, f"https://{host}/")


@pytest.mark.anyio
async def test_refusals_go_back_to_the_model_before_any_request(server: int,
                                                                gate_run: Any) -> None:
    before = len(Handler.seen)
    run = await gate_run([dev_tool(server)], [
        ("fetch_url", {"url": f"https://0x7f.1:{server}/page"}),
        ("fetch_url", {"url": f"http://internal.test:{server}/page"}),
    ])
    assert run.results[0].error_kind == "invalid_arguments"
    assert run.results[1].error_kind == "tool_error"
    assert "not a public address" in run.results[1].content
    assert len(Handler.seen) == before
    assert run.asked == []


@pytest.mark.anyio
async def test_a_page_is_fetched_and_converted_to_text(server: int) -> None:
    result = await fetch(dev_tool(server), f"http://app.test:{server}/page")
    assert result["title"] == "Forecast"
    assert result["text"] == "Lisboa\n\n15 °C, partly cloudy"
    assert "steal" not in json.dumps(result)
    method, path, headers = Handler.seen[-1]
    assert (method, path) == ("GET", "/page")
    assert headers["Host"] == f"app.test:{server}"


@pytest.mark.anyio
@pytest.mark.parametrize(("target", "why"), [
    ("http://internal.test:{port}/page", "not a public address"),
    ("http://meta.test:{port}/latest/meta-data/", "not a public address"),
    ("http://0x0a000001:{port}/", "not public"),
    ("http://evil.test:{port}/", "not on the allow-list"),
    ("https://app.test@evil.test/", "user name or password"),
    ("file:///etc/passwd", "only https"),
])
async def test_every_redirect_hop_is_checked_again(server: int, target: str, why: str) -> None:
    url = f"http://app.test:{server}/redirect?to={target.format(port=server)}"
    with pytest.raises(ToolError, match=why):
        await fetch(dev_tool(server), url)


@pytest.mark.anyio
async def test_cookies_are_never_sent_back(server: int) -> None:
    result = await fetch(dev_tool(server), f"http://app.test:{server}/cookie")
    headers = {k.lower() for k in json.loads(result["text"])}
    assert "cookie" not in headers
    assert "authorization" not in headers


@pytest.mark.anyio
async def test_redirect_loops_stop(server: int) -> None:
    with pytest.raises(ToolError, match="more than 3 redirects"):
        await fetch(dev_tool(server, max_redirects=3), f"http://app.test:{server}/loop")


@pytest.mark.anyio
async def test_the_body_is_capped(server: int) -> None:
    result = await fetch(dev_tool(server, max_bytes=1000), f"http://app.test:{server}/big")
    assert len(result["text"]) == 1000
    assert "longer than the limit" in result["truncated"]


@pytest.mark.anyio
async def test_binary_content_is_not_returned(server: int) -> None:
    with pytest.raises(ToolError, match="'image/png', not text"):
        await fetch(dev_tool(server), f"http://app.test:{server}/binary")


@pytest.mark.anyio
async def test_a_hanging_server_hits_the_time_cap(server: int) -> None:
    with pytest.raises(ToolError, match=r"longer than 0.3 seconds|ReadTimeout"):
        await fetch(dev_tool(server, timeout=0.3), f"http://app.test:{server}/hang")


@pytest.mark.anyio
async def test_development_http_reaches_loopback_only(server: int) -> None:
    with pytest.raises(ToolError, match="only to loopback"):
        await fetch(dev_tool(server), f"http://public.test:{server}/")
    with pytest.raises(ArgumentError, match="only https"):
        PROD.validate({"url": f"http://app.test:{server}/page"})


def test_only_get_is_possible() -> None:
    assert set(PROD.input_schema["properties"]) == {"url"}  # type: ignore[arg-type]
    assert PROD.effect.value == "read"
    assert PROD.provenance.value == "untrusted"


def test_an_empty_allow_list_is_a_definition_error() -> None:
    from anfitrion import ToolDefinitionError

    with pytest.raises(ToolDefinitionError, match="at least one"):
        http_fetch([])


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_every_ipv4_encoding_decodes_to_the_same_address(number: int) -> None:
    import ipaddress

    ip = ipaddress.IPv4Address(number)
    octets = str(ip).split(".")
    forms = [str(number), hex(number), ".".join(oct(int(o)).replace("0o", "0") for o in octets),
             ".".join(hex(int(o)) for o in octets), f"{octets[0]}.{number & 0xFFFFFF}"]
    for form in forms:
        assert numeric_host(form) == ip, form
    public = address_is_public(ip)
    for form in forms:
        if public:
            continue
        with pytest.raises(ArgumentError, match="not public"):
            PROD.validate({"url": f"https://{form}/"})


@pytest.mark.anyio
async def test_the_connection_goes_to_the_checked_address_so_dns_cannot_rebind(
        server: int) -> None:
    """A resolver that answers loopback once, then a private address: one lookup per hop."""
    answers = [["127.0.0.1"], ["10.0.0.5"], ["10.0.0.5"]]
    lookups: list[str] = []

    async def rebinding(host: str) -> list[str]:
        lookups.append(host)
        return answers[len(lookups) - 1]

    t = http_fetch([f"app.test:{server}"], resolver=rebinding, allow_http_loopback=True)
    before = len(Handler.seen)
    result = await fetch(t, f"http://app.test:{server}/page")
    assert result["title"] == "Forecast"
    assert lookups == ["app.test"]
    assert len(Handler.seen) == before + 1
