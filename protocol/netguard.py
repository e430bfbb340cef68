"""Which addresses an outbound webhook may reach (the SSRF guard), with no I/O.

A delivery resolves the host itself, refuses the whole URL when any address is refused, and
connects to an address it checked (actors/webhooks/sender.py), so DNS cannot change the
answer between the check and the connection.

Refused unless inside an operator's `[webhooks] allowed_private_networks`: loopback,
private (RFC 1918, 100.64/10 shared, fc00::/7 unique local), link-local (169.254/16 with the
cloud metadata address, fe80::/10), multicast, unspecified, reserved/benchmarking ranges,
and every IPv6 form that embeds one of those IPv4 addresses (mapped `::ffff:a.b.c.d`,
IPv4-compatible `::a.b.c.d`, 6to4 `2002::/16`, NAT64 `64:ff9b::/96`, Teredo).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_V4_REFUSED: tuple[tuple[ipaddress.IPv4Network, str], ...] = tuple(
    (ipaddress.IPv4Network(net), why)
    for net, why in (
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "private"),  # carrier-grade NAT, shared address space
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),  # 169.254.169.254: cloud metadata
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved"),
        ("192.0.2.0/24", "reserved"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "reserved"),
        ("198.51.100.0/24", "reserved"),
        ("203.0.113.0/24", "reserved"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),  # includes 255.255.255.255, broadcast
    )
)
_V6_REFUSED: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(net), why)
    for net, why in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fc00::/7", "private"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "private"),  # deprecated site-local
        ("ff00::/8", "multicast"),
        ("100::/64", "reserved"),  # discard-only
        ("2001:db8::/32", "reserved"),  # documentation
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for or carries, if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client's address (the server's is public by design)
    if address in _NAT64 or (address in _V4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def refusal(address: Address, allowed: Sequence[Network] = ()) -> str | None:
    """Why `address` may not be reached ("loopback", "private", …), or None if it may."""
    if any(address.version == net.version and address in net for net in allowed):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        for net6, why in _V6_REFUSED:
            if address in net6:
                return why
        inner = embedded_ipv4(address)
        if inner is None:
            return None
        if any(net.version == 4 and inner in net for net in allowed):
            return None
        address = inner
    for net4, why in _V4_REFUSED:
        if address in net4:
            return why
    return None


def parse_address(text: str) -> Address | None:
    """An IP literal (a URL host, brackets and zone stripped), or None for a name."""
    host = text.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
