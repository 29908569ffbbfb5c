"""Runs inside a server's sandbox (standard library only, started as a file with ``-I -S``):
listens on the sandbox's own loopback and forwards each connection to the gateway's egress
proxy through the unix socket bound into the sandbox, then runs the server and exits with it.

    _forwarder.py SOCKET PROXY_PORT [HOST:PORT ...] -- COMMAND ...

``PROXY_PORT`` takes HTTP ``CONNECT`` requests (``HTTPS_PROXY``), passed on as they are: the
gateway decides. Each ``HOST:PORT`` whose host is a loopback address is a declared local
service: its port on the sandbox's loopback is forwarded to that service (the gateway's proxy
is asked to ``CONNECT`` to it, and refuses what is not declared).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading

_HEAD_LIMIT = 8192


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, target):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _join(client: socket.socket, upstream: socket.socket) -> None:
    threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
    threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()


def _proxy_connection(client: socket.socket, path: str, target: str | None) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
        if target is not None:  # a declared local service: ask the proxy for it
            upstream.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head and len(head) < _HEAD_LIMIT:
                chunk = upstream.recv(1024)
                if not chunk:
                    break
                head += chunk
            if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
                raise OSError("refused")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                client.sendall(rest)
    except OSError:
        client.close()
        upstream.close()
        return
    _join(client, upstream)


def _listen(port: int, path: str, target: str | None) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)

    def accept() -> None:
        while True:
            client, _ = server.accept()
            threading.Thread(target=_proxy_connection, args=(client, path, target),
                             daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()


def main(argv: list[str]) -> int:
    split = argv.index("--")
    path, proxy_port, *services = argv[:split]
    command = argv[split + 1:]
    _listen(int(proxy_port), path, None)
    for service in services:
        port = int(service.rpartition(":")[2])
        _listen(port, path, service)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
