"""SSRF attacks on http_fetch: every spelling of a non-public address, hostile DNS answers,
redirects to other schemes and hosts, userinfo and look-alike host tricks. A local HTTP server
records every request that gets through."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import quote, unquote

import anyio
import pytest

from anfitrion import Principal, ToolContext
from anfitrion._tools import Tool
from anfitrion.exceptions import ArgumentError, ToolError

pytest.importorskip("httpx")

from anfitrion._addresses import address_is_public
from anfitrion.toolkits import http_fetch, static_resolver

NON_PUBLIC = [
    "0.0.0.0", "0", "0.0", "00000", "0x0", "127.0.0.1", "127.1", "0177.1", "0x7f.1",
    "017700000001", "2130706433", "0x7F000001", "127.0.0.1.", "10.1", "192.168.0.1",
    "100.64.0.1", "169.254.169.254", "0xa9fea9fe", "2852039166", "192.0.0.170", "198.18.0.1",
    "224.0.0.1", "240.0.0.1", "255.255.255.255",
    "[::]", "[::1]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:7f00:1]", "[::127.0.0.1]", "[::ffff:0:7f00:1]",
    "[::ffff:169.254.169.254]", "[64:ff9b::a9fe:a9fe]", "[64:ff9b:1::a9fe:a9fe]",
    "[2002:7f00:1::]", "[2002:a9fe:a9fe::1]", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
    "[fe80::1]", "[fc00::1]", "[fd00:ec2::254]", "[fec0::1]", "[ff02::1]", "[100::1]",
    "[2001:db8::1]",
    "\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # full-width digits, mapped by IDNA
    "127\u30020\u30020\u30021",                  # ideographic full stops
]


@pytest.mark.parametrize("host", NON_PUBLIC)
def test_a_non_public_address_in_any_spelling_is_refused_even_when_listed(host: str) -> None:
    entry = host if not host.endswith(".") else host[:-1]
    tool = http_fetch([entry, "docs.example.com"], resolver=static_resolver({}))
    with pytest.raises(ArgumentError, match=r"not public|not a valid|invalid host|no valid host"):
        tool.validate({"url": f"https://{host}/latest/meta-data/"})


@pytest.mark.parametrize("url", [
    "https://[fe80::1%25eth0]/", "https://[fe80::1%eth0]/", "https://[::1%251]/",
    "https://docs.example.com%2e/", "https://docs.example.com%00.evil.com/",
    "https://docs.example.com%40evil.com/", "https://evil.com%23.docs.example.com/",
    "https://docs.example.com:@evil.com/", "https://docs.example.com%2F@evil.com/",
    "https://@docs.example.com/", "https://evil.com\\@docs.example.com/",
    "https://docs.example.com\t.evil.com/", "https://docs.example.com\u3000/",
    "https://docs.example.com.evil.com/", "https://evil.com/?docs.example.com",
    "https://evil.com/#https://docs.example.com", "https:docs.example.com",
    "https:/docs.example.com/", "//docs.example.com/", "HTTP://docs.example.com/",
    "gopher://docs.example.com:70/_", "file://docs.example.com/etc/passwd",
    "ws://docs.example.com/", "jar:https://docs.example.com!/",
    "https://xn--docs-9na.example.com/", "https://d\u043ecs.example.com/",
])
def test_host_and_userinfo_tricks_are_refused_at_validation(url: str) -> None:
    tool = http_fetch(["docs.example.com"], resolver=static_resolver({}))
    with pytest.raises(ArgumentError):
        tool.validate({"url": url})


def test_a_full_width_spelling_of_an_allowed_name_is_the_same_host() -> None:
    tool = http_fetch(["docs.example.com"], resolver=static_resolver({}))
    tool.validate({"url": "https://\uff24\uff2f\uff23\uff33.example.com/"})


@pytest.mark.parametrize("address", [
    "fec0::1", "fec0::a9fe:a9fe", "::ffff:0:a00:1", "64:ff9b:1::a00:1", "::a00:1",
])
def test_a_site_local_or_embedding_ipv6_answer_is_not_public(address: str) -> None:
    import ipaddress

    assert not address_is_public(ipaddress.ip_address(address))


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        path, _, query = self.path.partition("?")
        if path == "/go":
            self.send_response(302)
            self.send_header("Location", unquote(query.removeprefix("to=")))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"reached"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


async def _fetch(tool: Tool, url: str) -> Any:
    with anyio.fail_after(20):
        return await tool.handler(tool.validate({"url": url}),
                                  ToolContext(Principal("a"), "s", "c", tool.name))


@pytest.mark.anyio
@pytest.mark.parametrize("answers", [
    ["127.0.0.1"], ["0.0.0.0"], ["::"], ["::1"], ["::ffff:127.0.0.1"], ["fec0::1"],
    ["10.0.0.1"], ["169.254.169.254"], ["fe80::1%eth0"], ["2002:7f00:1::"],
    ["93.184.216.34", "127.0.0.1"], ["not-an-address"], [],
])
async def test_a_hostile_dns_answer_for_an_allowed_name_is_refused_before_connecting(
        port: int, answers: list[str]) -> None:
    _Recorder.seen.clear()
    tool = http_fetch([f"docs.example.com:{port}"],
                      resolver=static_resolver({"docs.example.com": answers}))
    with pytest.raises(ToolError, match=r"not a public|cannot resolve|invalid address"):
        await _fetch(tool, f"https://docs.example.com:{port}/")
    assert _Recorder.seen == []


@pytest.mark.anyio
@pytest.mark.parametrize("location", [
    "file:///etc/passwd", "gopher://app.test:{port}/", "ftp://app.test/",
    "http://0.0.0.0:{port}/secret", "http://[::]:{port}/secret", "http://0:{port}/secret",
    "http://internal.test:{port}/secret", "http://meta.test:{port}/latest/meta-data/",
    "http://app.test:{port}@internal.test:{port}/secret", "http://evil.test:{port}/secret",
    "https://[fec0::1]/", "http://[::ffff:10.0.0.1]:{port}/secret",
    "http://app.test:{port}\\@internal.test/", "//internal.test:{port}/secret",
    "http:\\\\internal.test/secret", "data:text/plain,owned", "javascript:alert(1)",
])
async def test_a_redirect_is_checked_again_like_a_new_url(port: int, location: str) -> None:
    _Recorder.seen.clear()
    resolver = static_resolver({"app.test": ["127.0.0.1"], "internal.test": ["10.0.0.5"],
                                "meta.test": ["169.254.169.254"], "evil.test": ["127.0.0.1"]})
    hosts = [f"{h}:{port}" for h in ("app.test", "internal.test", "meta.test")]
    tool = http_fetch(hosts, resolver=resolver, allow_http_loopback=True)
    target = quote(location.format(port=port), safe="")
    with pytest.raises(ToolError, match=r"refused|not a public"):
        await _fetch(tool, f"http://app.test:{port}/go?to={target}")
    assert _Recorder.seen == [f"/go?to={target}"]
