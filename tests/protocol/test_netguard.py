"""protocol/netguard.py: every address class the issue names is refused, in every IPv6 disguise,
unless an operator allowed its network; public addresses pass."""

from __future__ import annotations

import ipaddress

import pytest

from protocol.netguard import parse_address, refusal

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
]

ALLOWED = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


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


def test_parse_address() -> None:
    assert parse_address("[::1]") == ipaddress.ip_address("::1")
    assert parse_address("fe80::1%eth0") == ipaddress.ip_address("fe80::1")
    assert parse_address("10.0.0.1") == ipaddress.ip_address("10.0.0.1")
    assert parse_address("example.com") is None
    assert parse_address("127.1") is None  # not an IP literal here: resolved, then checked
