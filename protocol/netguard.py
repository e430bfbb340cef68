"""Which addresses an outbound webhook may reach (the SSRF guard), with no I/O.

A delivery resolves the host itself, refuses the whole URL when any address is refused, and
connects to an address it checked (actors/webhooks/sender.py), so DNS cannot change the
answer between the check and the connection.

Refused unless inside an operator's `[webhooks] allowed_private_networks`: loopback,
private (RFC 1918, 100.64/10 shared, fc00::/7 unique local), link-local (169.254/16 with the
cloud metadata address, fe80::/10), multicast, unspecified, reserved, documentation and
benchmarking ranges (the 6to4 relay anycast 192.88.99/24, RFC 8215's local-use NAT64
64:ff9b:1::/48, ORCHID, SRv6 SIDs among them: none is a public receiver), and every IPv6 form
that embeds one of those IPv4 addresses (mapped `::ffff:a.b.c.d`, translated
`::ffff:0:a.b.c.d`, IPv4-compatible `::a.b.c.d`, 6to4 `2002::/16`, NAT64 `64:ff9b::/96`,
Teredo's server and client).

Which ports a webhook may use is the sender's rule (actors/webhooks/sender.py); `inside` says
whether an address is in the networks an operator allowed, which lifts that rule too.
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
        ("192.88.99.0/24", "reserved"),  # 6to4 relay anycast (deprecated, RFC 7526)
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
        ("64:ff9b:1::/48", "private"),  # local-use NAT64 (RFC 8215): a site's own translator
        ("2001:2::/48", "reserved"),  # benchmarking
        ("2001:10::/28", "reserved"),  # ORCHID (deprecated)
        ("2001:db8::/32", "reserved"),  # documentation
        ("3fff::/20", "reserved"),  # documentation (RFC 9637)
        ("5f00::/16", "reserved"),  # SRv6 SIDs (RFC 9602): not routed on the internet
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_V4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT, RFC 2765


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address stands for or carries (none for most)."""
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address.teredo is not None:
        return address.teredo  # the server's and the client's: either may be aimed inside
    if (
        address in _NAT64
        or address in _V4_TRANSLATED
        or (address in _V4_COMPATIBLE and int(address) > 1)
    ):
        return (ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF),)
    return ()


def inside(address: Address, allowed: Sequence[Network]) -> bool:
    """Whether `address` (or, for an IPv6 form embedding IPv4, every IPv4 address it carries)
    is in one of the `allowed` networks."""
    if any(address.version == net.version and address in net for net in allowed):
        return True
    inner = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else ()
    return bool(inner) and all(
        any(net.version == 4 and v4 in net for net in allowed) for v4 in inner
    )


def refusal(address: Address, allowed: Sequence[Network] = ()) -> str | None:
    """Why `address` may not be reached ("loopback", "private", …), or None if it may."""
    if inside(address, allowed):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        for net6, why in _V6_REFUSED:
            if address in net6:
                return why
        for inner in embedded_ipv4(address):
            why4 = None if inside(inner, allowed) else _v4_refusal(inner)
            if why4 is not None:
                return why4
        return None
    return _v4_refusal(address)


def _v4_refusal(address: ipaddress.IPv4Address) -> str | None:
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
