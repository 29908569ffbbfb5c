"""The one public-address check: whether an IP address is one anfitrion may connect out to.

Used wherever a host reaches an address someone else chose: the ``http_fetch`` toolkit, the
MCP sandbox's egress proxy, the OAuth metadata fetcher and the gateway's OAuth issuer check. A
globally routable unicast address is public; private, loopback, link-local, multicast,
reserved, shared, site-local and unspecified ones are not, also when wrapped in IPv4-mapped,
6to4, Teredo or NAT64 IPv6 (``2002:7f00:1::`` is 127.0.0.1, though Python calls it global).
"""

from __future__ import annotations

import ipaddress

__all__ = ["Address", "address_is_public", "embedded_ipv4", "is_loopback"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def embedded_ipv4(ip: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, 6to4, Teredo, NAT64)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    out = [a for a in (ip.ipv4_mapped, ip.sixtofour) if a is not None]
    if ip.teredo is not None:
        out.extend(ip.teredo)
    if ip in _NAT64:
        out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return out


def address_is_public(ip: Address) -> bool:
    """True for a globally routable unicast address, also looking inside IPv6 wrappings.

    Example:
        >>> address_is_public(ipaddress.ip_address("2002:7f00:1::"))  # 6to4 of 127.0.0.1
        False
    """
    if not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_unspecified:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:  # fec0::/10, still routed
        return False                                                  # inside some networks
    return all(address_is_public(inner) for inner in embedded_ipv4(ip))


def is_loopback(ip: Address) -> bool:
    """Loopback, also when wrapped in IPv6."""
    return ip.is_loopback or any(inner.is_loopback for inner in embedded_ipv4(ip))
