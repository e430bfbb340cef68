"""protocol/netguard.py: every address class the issue names is refused, in every IPv6 disguise,
unless an operator allowed its network; public addresses pass."""

from __future__ import annotations

import ipaddress

import pytest

from protocol.netguard import inside, parse_address, refusal

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("100.64.0.1", "private"),
    ("100.127.255.255", "private"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("169.254.169.254", "link-local"),
    ("169.254.0.1", "link-local"),
    ("fe80::1", "link-local"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("255.255.255.255", "reserved"),
    ("192.0.2.1", "reserved"),
    # IPv4 addresses wearing IPv6 forms
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "link-local"),
    ("::ffff:0:0", "unspecified"),
    ("::127.0.0.1", "loopback"),
    ("64:ff9b::a9fe:a9fe", "link-local"),
    ("2002:7f00:1::", "loopback"),
    ("2002:c0a8:0101::1", "private"),
    # Issue #19 item 11: ranges and disguises that got through.
    ("64:ff9b:1::7f00:1", "private"),  # RFC 8215 local-use NAT64: a site's own translator
    ("64:ff9b:1:ffff::1", "private"),
    ("::ffff:0:7f00:1", "loopback"),  # IPv4-translated (SIIT)
    ("::ffff:0:a00:1", "private"),
    ("192.88.99.1", "reserved"),  # 6to4 relay anycast
    ("2002:a00:1::1", "private"),  # 6to4 of 10.0.0.1
    ("2002:a9fe:a9fe::", "link-local"),  # 6to4 of the metadata address
    ("64:ff9b::7f00:1", "loopback"),  # NAT64 well-known prefix
    ("64:ff9b::a00:1", "private"),
    ("::a00:1", "private"),  # IPv4-compatible
    ("::169.254.169.254", "link-local"),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),  # Teredo, client 127.0.0.1
    ("2001:0:7f00:1:8000:63bf:3fff:fdd2", "loopback"),  # Teredo, server 127.0.0.1
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private"),  # Teredo, client 10.0.0.1
    ("2001:2::1", "reserved"),
    ("2001:10::1", "reserved"),
    ("3fff::1", "reserved"),
    ("5f00::1", "reserved"),
]

ALLOWED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",  # NAT64 of a public address: a public translator
    "2002:808:808::1",  # 6to4 of a public address
]


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_refused(text: str, why: str) -> None:
    assert refusal(ipaddress.ip_address(text)) == why


@pytest.mark.parametrize("text", ALLOWED)
def test_public_addresses_pass(text: str) -> None:
    assert refusal(ipaddress.ip_address(text)) is None


def test_allowed_networks_let_their_addresses_through_only() -> None:
    loopback = [ipaddress.ip_network("127.0.0.0/8")]
    assert refusal(ipaddress.ip_address("127.0.0.1"), loopback) is None
    assert refusal(ipaddress.ip_address("::ffff:127.0.0.1"), loopback) is None
    assert refusal(ipaddress.ip_address("::1"), loopback) == "loopback"
    assert refusal(ipaddress.ip_address("10.0.0.1"), loopback) == "private"
    assert refusal(ipaddress.ip_address("::1"), [ipaddress.ip_network("::1/128")]) is None


def test_inside_covers_every_embedded_address() -> None:
    loopback = [ipaddress.ip_network("127.0.0.0/8")]
    assert inside(ipaddress.ip_address("127.0.0.1"), loopback)
    assert inside(ipaddress.ip_address("::ffff:0:7f00:1"), loopback)
    assert inside(ipaddress.ip_address("64:ff9b::7f00:1"), loopback)
    assert not inside(ipaddress.ip_address("::1"), loopback)
    assert not inside(ipaddress.ip_address("8.8.8.8"), loopback)
    assert not inside(ipaddress.ip_address("2606:4700:4700::1111"), loopback)
    teredo = ipaddress.ip_address("2001:0:4136:e378:8000:63bf:80ff:fffe")  # server public
    assert not inside(teredo, loopback)
    assert refusal(teredo, loopback) is None  # its loopback client is allowed, its server public


def test_parse_address() -> None:
    assert parse_address("[::1]") == ipaddress.ip_address("::1")
    assert parse_address("fe80::1%eth0") == ipaddress.ip_address("fe80::1")
    assert parse_address("10.0.0.1") == ipaddress.ip_address("10.0.0.1")
    assert parse_address("example.com") is None
    assert parse_address("127.1") is None  # not an IP literal here: resolved, then checked
