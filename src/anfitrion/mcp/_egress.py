"""The egress proxy of a sandboxed server: an HTTP ``CONNECT`` proxy on a unix socket, bound
into the server's sandbox, that connects only to the ``host:port`` destinations the server's
profile declares.

- ``CONNECT host:port`` (HTTPS and other TLS or TCP protocols through a tunnel), and plain
  HTTP requests in absolute form (``GET http://host:port/path HTTP/1.1``, ``HTTP_PROXY``): the
  same allow-list for both. A plain request is checked before anything is sent on
  (:func:`_parse_http`): the ``Host`` header must name the URI's own host and port, the
  authority holds no user part, the body has a ``Content-Length`` (``Transfer-Encoding`` is
  refused: no request smuggling), and the connection ends with the answer (a second request
  on it goes nowhere).
- The destination must be declared exactly (name and port, compared in lower case).
- A declared *name* must resolve to public addresses only (no loopback, private, link-local
  or reserved address: a name cannot be made to point at the gateway's own services); a
  declared loopback address (``127.0.0.1:5432``) is a local service, reached as declared.
- Every refusal is reported to ``on_refused`` (the toolset audits it) and answered ``403``
  with the reason.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import anyio.abc

from .._addresses import address_is_public
from ..exceptions import InputError

__all__ = ["egress_proxy"]

HEAD_LIMIT = 8192
HEAD_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
LOOPBACK_NAMES = ("localhost",)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                         "proxy-authenticate", "te", "trailer", "upgrade"})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")


def _split(target: str) -> tuple[str, int] | None:
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host or len(target) > 300:
        return None
    return host.strip("[]").lower(), int(port)


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _resolve(host: str, port: int) -> list[str]:
    """The addresses to connect to, or raises :class:`PermissionError` with the reason."""
    if _is_loopback(host):
        return ["127.0.0.1" if host == "localhost" else host]
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        if not address_is_public(literal):
            raise PermissionError(f"{host} is not a public address")
        return [host]
    found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    bad = [a for a in addresses if not address_is_public(ipaddress.ip_address(a.split("%")[0]))]
    if bad or not addresses:
        raise PermissionError(f"{host} resolves to a non-public address ({', '.join(bad)[:80]})")
    return addresses


async def _read_head(stream: anyio.abc.ByteStream) -> bytes:
    head = b""
    with anyio.fail_after(HEAD_TIMEOUT):
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive(4096)
            head += chunk
            if len(head) > HEAD_LIMIT:
                raise InputError("request head too long")
    return head


async def _pipe(source: anyio.abc.ByteStream, target: anyio.abc.ByteStream) -> None:
    with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                  OSError):
        while True:
            await target.send(await source.receive(65536))
    with suppress(Exception):
        await target.send_eof()


async def _refuse(client: anyio.abc.ByteStream, status: str, reason: str) -> None:
    with suppress(Exception):
        await client.send(f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\n"
                          f"Connection: close\r\n\r\nanfitrion sandbox: {reason}\n".encode())


class _Refusal(Exception):
    """A request the proxy refuses: the HTTP status to answer and the reason."""

    def __init__(self, status: str, reason: str, target: str = "") -> None:
        super().__init__(reason)
        self.status, self.reason, self.target = status, reason, target


def _allowed_target(host: str, port: int, allowed: frozenset[str]) -> str:
    """``host:port`` when declared (as a name, an address, or a bracketed IPv6 address)."""
    target = f"{host}:{port}"
    if target in allowed or f"[{host}]:{port}" in allowed:
        return target
    raise _Refusal("403 Forbidden", f"{target} is not declared", target)


@dataclass(frozen=True, slots=True)
class _HttpRequest:
    """A plain-HTTP request in absolute form, checked (see :func:`_parse_http`)."""

    method: str
    host: str
    port: int
    head: bytes
    """The request as sent on: origin-form, ``Host`` set, ``Connection: close``."""
    length: int
    """Bytes of body that follow the head (``Content-Length``)."""


def _host_header(value: str) -> tuple[str, int]:
    parsed = urlsplit(f"http://{value}")
    try:
        port = parsed.port or 80
    except ValueError:
        raise _Refusal("400 Bad Request", "the Host header is not a host[:port]") from None
    if not parsed.hostname or parsed.username is not None or parsed.path or parsed.query:
        raise _Refusal("400 Bad Request", "the Host header is not a host[:port]")
    return parsed.hostname.lower(), port


def _absolute_uri(uri: str) -> tuple[str, int, str]:
    """The host, port and origin-form target of an ``http://`` absolute URI."""
    if not uri.lower().startswith("http://"):
        raise _Refusal("400 Bad Request", "a plain-HTTP request names an absolute http:// "
                                          "URI (HTTPS and other protocols go through CONNECT)")
    parsed = urlsplit(uri)
    if "@" in parsed.netloc or "\\" in uri or not uri.isprintable() or not uri.isascii():
        raise _Refusal("400 Bad Request", "the URI's authority must be host[:port] only")
    try:
        port = parsed.port or 80
    except ValueError:
        raise _Refusal("400 Bad Request", "the URI's port is not a port") from None
    if not parsed.hostname:
        raise _Refusal("400 Bad Request", "the URI names no host")
    origin = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
    return parsed.hostname.lower(), port, origin


def _parse_http(head: bytes, allowed: frozenset[str]) -> _HttpRequest:
    """Check a plain-HTTP proxy request: an allowed method, an absolute ``http://`` URI to a
    declared ``host:port``, a ``Host`` header naming the same host and port (or none), a
    body of known length (``Content-Length``; never ``Transfer-Encoding``), header lines that
    are well formed (no folding, no bare CR or LF)."""
    lines = head.decode("latin-1").split("\r\n")
    words = lines[0].split(" ")
    if len(words) != 3 or words[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise _Refusal("400 Bad Request", "the request line is not METHOD URI HTTP/1.x")
    if words[0] not in _METHODS:
        raise _Refusal("405 Method Not Allowed", f"{words[0][:20]!r} is not proxied")
    host, port, origin = _absolute_uri(words[1])
    target = _allowed_target(host, port, allowed)
    kept: list[str] = []
    seen: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name) or "\r" in line or "\n" in line or \
                "\x00" in line:
            raise _Refusal("400 Bad Request", "a header line is not NAME: VALUE", target)
        key, value = name.lower(), value.strip(" \t")
        if key in seen and key in ("host", "content-length"):
            raise _Refusal("400 Bad Request", f"two {name} headers", target)
        seen[key] = value
        if key not in _HOP_BY_HOP:
            kept.append(f"{name}: {value}")
    if "transfer-encoding" in seen:
        raise _Refusal("411 Length Required", "a body of unknown length (Transfer-Encoding) "
                                              "is not proxied: send Content-Length", target)
    length = seen.get("content-length", "0")
    if not length.isdigit() or len(length) > 15:
        raise _Refusal("400 Bad Request", "Content-Length is not a number", target)
    if "host" in seen and _host_header(seen["host"]) != (host, port):
        raise _Refusal("400 Bad Request", f"the Host header ({seen['host'][:80]!r}) names "
                                          f"another host than the URI ({target})", target)
    if "host" not in seen:
        kept.insert(0, f"Host: {f'[{host}]' if ':' in host else host}:{port}")
    out = "\r\n".join([f"{words[0]} {origin} HTTP/1.1", *kept, "Connection: close", "", ""])
    return _HttpRequest(words[0], host, port, out.encode("latin-1"), int(length))


async def _connect(host: str, port: int) -> anyio.abc.ByteStream:
    """A connection to the first answering address of a declared destination (checked by
    :func:`_resolve`: once, here; the connection goes to the address checked, so a name
    cannot be rebound between the check and the use)."""
    addresses = await _resolve(host, port)
    with anyio.fail_after(CONNECT_TIMEOUT):
        for address in addresses:
            with suppress(OSError):
                return await anyio.connect_tcp(address, port)
    raise OSError("no address answered")


async def _copy(source: anyio.abc.ByteStream, target: anyio.abc.ByteStream, length: int) -> None:
    """Exactly *length* bytes from *source* to *target* (a request's body: what follows is
    not sent on)."""
    with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                  OSError):
        while length > 0:
            chunk = await source.receive(min(length, 65536))
            await target.send(chunk)
            length -= len(chunk)


async def _handle_http(client: anyio.abc.ByteStream, head: bytes, rest: bytes,
                       allowed: frozenset[str], on_refused: Callable[[str], Awaitable[None]]
                       ) -> None:
    """One plain-HTTP request, sent on to its declared destination; the connection is closed
    after the answer (one request per connection: a pipelined second request goes nowhere)."""
    try:
        request = _parse_http(head, allowed)
        upstream = await _connect(request.host, request.port)
    except _Refusal as exc:
        await on_refused(f"refused http request{f' to {exc.target}' if exc.target else ''}: "
                         f"{exc.reason}")
        await _refuse(client, exc.status, exc.reason)
        return
    except (PermissionError, OSError, TimeoutError) as exc:
        target = f"{request.host}:{request.port}"
        await on_refused(f"refused http request to {target}: {exc}")
        await _refuse(client, "403 Forbidden", str(exc)[:200])
        return
    async with upstream:
        body = rest[:request.length]
        await upstream.send(request.head + body)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_copy, client, upstream, request.length - len(body))
            await _pipe(upstream, client)
            tg.cancel_scope.cancel()


async def _handle(client: anyio.abc.ByteStream, allowed: frozenset[str],
                  on_refused: Callable[[str], Awaitable[None]]) -> None:
    async with client:
        try:
            head = await _read_head(client)
        except (ValueError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return
        head, _, rest = head.partition(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode("latin-1")[:400]
        words = line.split(" ")
        if words[0] != "CONNECT":
            await _handle_http(client, head, rest, allowed, on_refused)
            return
        parsed = _split(words[1]) if len(words) == 3 else None  # CONNECT host:port HTTP/1.1
        target = f"{parsed[0]}:{parsed[1]}" if parsed else words[1][:120]
        try:
            if parsed is None:
                raise _Refusal("400 Bad Request", "CONNECT names no host:port", target)
            _allowed_target(*parsed, allowed)
            upstream = await _connect(*parsed)
        except _Refusal as exc:
            await on_refused(f"refused connection to {target}: {exc.reason}")
            await _refuse(client, exc.status, exc.reason)
            return
        except (PermissionError, OSError, TimeoutError) as exc:
            await on_refused(f"refused connection to {target}: {exc}")
            await _refuse(client, "403 Forbidden", str(exc)[:200])
            return
        async with upstream:
            await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            async with anyio.create_task_group() as tg:
                tg.start_soon(_pipe, client, upstream)
                tg.start_soon(_pipe, upstream, client)


@asynccontextmanager
async def egress_proxy(allowed: Iterable[str], on_refused: Callable[[str], Awaitable[None]]
                       ) -> AsyncIterator[str]:
    """Serve the proxy on a fresh unix socket (in a private folder) while inside; yields the
    socket's path."""
    folder = tempfile.mkdtemp(prefix="anfitrion-egress-")
    path = os.path.join(folder, "egress.sock")
    allow = frozenset(allowed)
    try:
        listener = await anyio.create_unix_listener(path)
        os.chmod(path, 0o600)
        async with listener, anyio.create_task_group() as tg:
            async def serve() -> None:
                async with anyio.create_task_group() as conns:
                    while True:
                        client = await listener.accept()
                        conns.start_soon(_handle, client, allow, on_refused)
            tg.start_soon(serve)
            try:
                yield path
            finally:
                tg.cancel_scope.cancel()
    finally:
        with suppress(OSError):
            os.unlink(path)
        with suppress(OSError):
            Path(folder).rmdir()
