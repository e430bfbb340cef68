"""The Host header image URLs are built from without GATEWAY_PUBLIC_BASE_URL: client bytes, so
checked in linear time (a backtracking pattern once stalled the process on 28 characters)."""

from __future__ import annotations

import pytest

from gateway.images.urls import base_url, usable_host
from protocol.errors import APIError


@pytest.mark.parametrize(
    "host",
    [
        "gw.example.org",
        "gw.example.org.",
        "gw:8443",
        "127.0.0.1:80",
        "[::1]",
        "[2001:db8::1]:443",
        "a" * 63 + ".b",
    ],
)
def test_plain_hosts_are_usable(host: str) -> None:
    assert usable_host(host)
    assert base_url(None, host) == f"http://{host}"


@pytest.mark.parametrize(
    "host",
    [
        "",
        "evil.example/x?y",
        "a..b",
        "-a.b",
        "a-.b",
        "a" * 64 + ".b",
        "gw:",
        "gw:123456",
        "gw:８０",  # full-width digits are digits to str.isdigit
        "gw:80:80",
        "[::1",
        "[nonsense]",
        "[::1]x",
        "user@gw",
        "a" * 255 + "!",  # took minutes with the old pattern
        "a." * 130 + "!",
    ],
)
def test_anything_else_is_not(host: str) -> None:
    assert not usable_host(host)
    with pytest.raises(APIError) as caught:
        base_url(None, host)
    assert caught.value.status == 400 and caught.value.param == "response_format"


def test_the_configured_base_wins() -> None:
    assert base_url("https://img.example.com", "a" * 255 + "!") == "https://img.example.com"
