"""The ``haproxy`` configuration for gateway replicas (docs/scaling.md shows its output).

One writer for the deployment example, the replica tests and the relay benchmark: round robin
without affinity, a health check on ``/readyz`` (a draining replica leaves the rotation), a
connection refused by a replica that stopped listening retried on another one, and each
replica's own address sent as ``Host`` (a replica checks ``Host`` against its own address).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["haproxy_config"]

_TEMPLATE = """\
global
    maxconn {maxconn}{stats}
defaults
    mode http
    retries 3
    option redispatch            # a connection a replica refused goes to another one
    timeout connect 5s
    timeout client 300s          # longer than the gateway's approvalWait
    timeout server 300s
frontend mcp
    bind {bind}
    default_backend gateways
backend gateways
    balance roundrobin
    option httpchk GET /readyz   # 503 while a replica drains or its store is away
    # each replica checks Host against its own address: send the server's name as Host
    http-send-name-header Host
{servers}
"""


def haproxy_config(bind: str, replicas: Sequence[str], *, check_interval: str = "500ms",
                   maxconn: int = 512, stats_socket: str | None = None) -> str:
    """An haproxy configuration listening on *bind* (``host:port``) in front of the
    gateway replicas at *replicas* (each ``127.0.0.1:PORT``), checked every
    *check_interval*; *stats_socket*: a path for haproxy's admin socket (``show stat``)."""
    servers = "\n".join(f"    server {address} {address} check inter {check_interval}"
                        for address in replicas)
    stats = f"\n    stats socket {stats_socket} mode 600 level admin" if stats_socket else ""
    return _TEMPLATE.format(maxconn=maxconn, stats=stats, bind=bind, servers=servers)
