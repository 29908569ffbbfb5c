"""The egress proxy of a sandboxed server: an HTTP ``CONNECT`` proxy on a unix socket, bound
into the server's sandbox, that connects only to the ``host:port`` destinations the server's
profile declares.

- Only ``CONNECT host:port`` (HTTPS and other TLS or TCP protocols through a tunnel); any other
  request is answered ``405``.
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
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import anyio.abc

__all__ = ["egress_proxy"]

HEAD_LIMIT = 8192
HEAD_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
LOOPBACK_NAMES = ("localhost",)


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
        if not literal.is_global:
            raise PermissionError(f"{host} is not a public address")
        return [host]
    found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    bad = [a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_global]
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
                raise ValueError("request head too long")
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


async def _handle(client: anyio.abc.ByteStream, allowed: frozenset[str],
                  on_refused: Callable[[str], Awaitable[None]]) -> None:
    async with client:
        try:
            head = await _read_head(client)
        except (ValueError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1")[:400]
        words = line.split(" ")
        if len(words) != 3 or words[0] != "CONNECT":
            await on_refused(f"refused {line[:120]!r}: only CONNECT is proxied")
            await _refuse(client, "405 Method Not Allowed", "only CONNECT host:port")
            return
        parsed = _split(words[1])
        target = f"{parsed[0]}:{parsed[1]}" if parsed else words[1][:120]
        bracketed = f"[{parsed[0]}]:{parsed[1]}" if parsed else target
        if parsed is None or (target not in allowed and bracketed not in allowed):
            await on_refused(f"refused connection to {target}: not declared in the profile")
            await _refuse(client, "403 Forbidden", f"{target} is not declared")
            return
        try:
            addresses = await _resolve(*parsed)
            upstream: anyio.abc.ByteStream | None = None
            with anyio.fail_after(CONNECT_TIMEOUT):
                for address in addresses:
                    with suppress(OSError):
                        upstream = await anyio.connect_tcp(address, parsed[1])
                        break
            if upstream is None:
                raise OSError("no address answered")
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
