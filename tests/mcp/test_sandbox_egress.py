"""The egress proxy's check of a plain-HTTP request (``_parse_http``), as a pure function:
what an attacker who has read it would send to reach another host than the one declared.

The same checks run end to end from inside a sandbox in ``test_sandbox_hostile.py``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion.mcp._egress import _parse_http, _Refusal

ALLOWED = frozenset({"api.example:80", "127.0.0.1:8080", "[::1]:8080"})


def _head(text: str) -> bytes:
    return text.encode("latin-1")


def test_an_allowed_request_is_sent_on_in_origin_form_with_its_own_host_and_closed() -> None:
    request = _parse_http(_head("GET http://API.example/v1/x?q=1 HTTP/1.1\r\nAccept: */*\r\n"
                                "Proxy-Authorization: Basic eDp5\r\nConnection: keep-alive\r\n"
                                "Content-Length: 2"), ALLOWED)
    assert (request.host, request.port, request.length) == ("api.example", 80, 2)
    assert request.head == (b"GET /v1/x?q=1 HTTP/1.1\r\nHost: api.example:80\r\nAccept: */*\r\n"
                            b"Content-Length: 2\r\nConnection: close\r\n\r\n")
    ipv6 = _parse_http(_head("GET http://[::1]:8080 HTTP/1.1\r\nHost: [::1]:8080"), ALLOWED)
    assert ipv6.head.startswith(b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n")
    same = _parse_http(_head("GET http://api.example:80/ HTTP/1.0\r\nHost: API.EXAMPLE"),
                       ALLOWED)  # the default port and case do not make another host
    assert same.head.startswith(b"GET / HTTP/1.1\r\nHost: API.EXAMPLE\r\n")


@pytest.mark.parametrize(("head", "status", "words"), [
    ("GET http://api.example/ HTTP/1.1\r\nHost: internal.example", "400", "Host header"),
    ("GET http://api.example/ HTTP/1.1\r\nHost: api.example:8080", "400", "Host header"),
    ("GET http://api.example/ HTTP/1.1\r\nHost: u@api.example", "400", "Host header"),
    ("GET http://api.example/ HTTP/1.1\r\nHost: api.example\r\nhost: x", "400", "two"),
    ("GET http://user@api.example/ HTTP/1.1", "400", "authority"),
    ("GET http://127.0.0.1:8080@169.254.169.254/ HTTP/1.1", "400", "authority"),
    ("GET http://api.example\\@169.254.169.254/ HTTP/1.1", "400", "authority"),
    ("GET http://api.example:80:80/ HTTP/1.1", "400", "port"),
    ("GET http://api.example:99999/ HTTP/1.1", "400", "port"),
    ("GET http:///x HTTP/1.1", "400", "no host"),
    ("GET http://api.example.evil/ HTTP/1.1", "403", "not declared"),
    ("GET http://api.example:81/ HTTP/1.1", "403", "not declared"),
    ("GET http://169.254.169.254/latest/meta-data/ HTTP/1.1", "403", "not declared"),
    ("GET http://2130706433:8080/ HTTP/1.1", "403", "not declared"),  # 127.0.0.1 undeclared
    ("GET /v1 HTTP/1.1\r\nHost: api.example", "400", "absolute http://"),
    ("GET https://api.example/ HTTP/1.1", "400", "CONNECT"),
    ("GET ftp://api.example/ HTTP/1.1", "400", "absolute http://"),
    ("TRACE http://api.example/ HTTP/1.1", "405", "TRACE"),
    ("GET http://api.example/ HTTP/2.0", "400", "request line"),
    ("GET  http://api.example/ HTTP/1.1", "400", "request line"),
    ("POST http://api.example/ HTTP/1.1\r\nTransfer-Encoding: chunked", "411", "Transfer"),
    ("POST http://api.example/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: x", "411",
     "Transfer"),
    ("POST http://api.example/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4", "400",
     "two"),
    ("POST http://api.example/ HTTP/1.1\r\nContent-Length: -3", "400", "Content-Length"),
    ("POST http://api.example/ HTTP/1.1\r\nContent-Length: 3, 3", "400", "Content-Length"),
    ("GET http://api.example/ HTTP/1.1\r\nX-A: a\r\n folded", "400", "NAME"),
    ("GET http://api.example/ HTTP/1.1\r\nX-A: a\nHost: evil", "400", "NAME"),
    ("GET http://api.example/ HTTP/1.1\r\nX-A: a\rHost: evil", "400", "NAME"),
    ("GET http://api.example/ HTTP/1.1\r\nBad Name: a", "400", "NAME"),
])
def test_requests_that_could_reach_another_host_are_refused(head: str, status: str,
                                                            words: str) -> None:
    with pytest.raises(_Refusal) as caught:
        _parse_http(_head(head), ALLOWED)
    assert caught.value.status.startswith(status) and words in caught.value.reason, (
        caught.value.status, caught.value.reason)


@given(st.text(alphabet=st.characters(max_codepoint=255), max_size=200))
def test_any_head_is_refused_or_goes_to_a_declared_host_named_in_its_host_header(
        text: str) -> None:
    try:
        request = _parse_http(_head("GET " + text), ALLOWED)
    except _Refusal:
        return
    assert f"{request.host}:{request.port}" in ALLOWED or \
        f"[{request.host}]:{request.port}" in ALLOWED
    lines = request.head.split(b"\r\n")
    hosts = [line for line in lines if line.lower().startswith(b"host:")]
    assert len(hosts) == 1 and request.head.endswith(b"Connection: close\r\n\r\n")
    assert all(b"\n" not in line and b"\r" not in line for line in lines)
