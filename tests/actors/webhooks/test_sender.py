"""The webhook sender against a real HTTPS receiver on loopback (trustme CA)."""

from __future__ import annotations

import hmac
import ipaddress
import itertools
import socket
from collections.abc import AsyncIterator, Iterator

import pytest
import trio
import trio.testing

from actors.errors import PortRefused
from actors.webhooks.sender import BODY_LIMIT, WebhookSender, check_url, parse_url
from protocol.webhooks import delivery_headers
from tests.actors.webhooks.conftest import start_receiver
from tests.webhook_receiver import (
    CLOSE,
    HANG,
    Receiver,
    ReceiverTLS,
    Stream,
    endless,
    make_tls,
    response,
    serve_receiver,
)

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
BODY = b'{"id":"evt_1","type":"key.created","created_at":"2026-01-01T00:00:00Z","data":{}}'


def sender(tls: ReceiverTLS, **kw: object) -> WebhookSender:
    options: dict[str, object] = {"allowed_networks": LOOPBACK, "ssl_context": tls.client()}
    options.update(kw)
    return WebhookSender(**options)  # type: ignore[arg-type]


def headers(secrets: list[str], timestamp: int = 1_700_000_000) -> list[tuple[str, str]]:
    return delivery_headers("evt_1", "key.created", timestamp, BODY, secrets)


def verify(secret: str, header: str, body: bytes) -> bool:
    """An independent verifier written from docs/webhooks.md: `t=<ts>,v1=<hex>[,v1=…]`, HMAC-SHA256
    of `<t>.<raw body>` keyed by the secret, compared in constant time."""
    fields = [part.split("=", 1) for part in header.split(",")]
    stamps = [v for k, v in fields if k == "t"]
    assert len(stamps) == 1
    expected = hmac.new(secret.encode(), stamps[0].encode() + b"." + body, "sha256").hexdigest()
    return any(hmac.compare_digest(v, expected) for k, v in fields if k == "v1")


async def test_a_success_sends_exactly_the_spec_headers_and_raw_body(
    tls: ReceiverTLS, receiver: Receiver
) -> None:
    result = await sender(tls).post(receiver.url + "?token=abc", BODY, headers(["whsec_x"]))
    assert (result.status, result.error, result.body) == (200, None, b"ok")
    [arrival] = receiver.arrivals
    assert (arrival.method, arrival.target, arrival.body) == ("POST", "/hook?token=abc", BODY)
    names = [name for name, _ in arrival.headers]
    assert names == [
        "Host",
        "Content-Length",
        "Content-Type",
        "Service-Webhook-Id",
        "Service-Webhook-Event",
        "Service-Webhook-Timestamp",
        "Service-Webhook-Signature",
        "User-Agent",
        "Connection",
    ]
    assert arrival.header("Host") == f"127.0.0.1:{receiver.port}"
    assert arrival.header("Content-Type") == "application/json"
    assert arrival.header("Service-Webhook-Id") == "evt_1"
    assert arrival.header("Service-Webhook-Event") == "key.created"
    assert arrival.header("Service-Webhook-Timestamp") == "1700000000"
    signature = arrival.header("Service-Webhook-Signature")
    assert signature is not None and signature.startswith("t=1700000000,v1=")
    assert verify("whsec_x", signature, arrival.body)
    assert not verify("whsec_y", signature, arrival.body)
    assert not verify("whsec_x", signature, arrival.body + b" ")


async def test_custom_and_dual_secrets_each_verify(tls: ReceiverTLS, receiver: Receiver) -> None:
    custom = "my-own~secret#&=,"  # printable, with the header's own separators
    await sender(tls).post(receiver.url, BODY, headers([custom, "whsec_old"]))
    signature = receiver.arrivals[0].header("Service-Webhook-Signature")
    assert signature is not None and signature.count("v1=") == 2
    assert verify(custom, signature, BODY) and verify("whsec_old", signature, BODY)


@pytest.mark.parametrize("status", [201, 204, 301, 400, 404, 408, 429, 500, 503])
async def test_the_status_is_returned_and_retry_after_kept(
    tls: ReceiverTLS, receiver: Receiver, status: int
) -> None:
    body = b"" if status == 204 else b"nope"
    receiver.play(response(status, body, "Retry-After: 120\r\nLocation: https://1.1.1.1/\r\n"))
    result = await sender(tls).post(receiver.url, BODY, headers(["s"]))
    assert (result.status, result.error, result.retry_after) == (status, None, "120")
    assert len(receiver.arrivals) == 1  # a redirect is never followed


async def test_a_silent_receiver_times_out_after_the_attempt_timeout(
    tls: ReceiverTLS, receiver: Receiver, autojump_clock: trio.testing.MockClock
) -> None:
    receiver.play(HANG)
    result = await sender(tls, attempt_timeout_s=10.0).post(receiver.url, BODY, headers(["s"]))
    assert (result.status, result.error, result.duration_s) == (None, "timeout after 10 s", 10.0)


async def test_a_slow_body_after_the_head_keeps_the_status(
    tls: ReceiverTLS, receiver: Receiver, autojump_clock: trio.testing.MockClock
) -> None:
    receiver.play(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")  # then nothing
    result = await sender(tls).post(receiver.url, BODY, headers(["s"]))
    assert (result.status, result.error, result.body, result.duration_s) == (
        200,
        None,
        b"part",
        10.0,
    )


async def test_a_closed_port_is_connection_refused(tls: ReceiverTLS) -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        result = await sender(tls).post(f"https://127.0.0.1:{port}/", BODY, headers(["s"]))
    assert (result.status, result.error) == (None, "connection refused")


async def test_an_untrusted_certificate_is_a_tls_failure(receiver: Receiver) -> None:
    result = await sender(make_tls()).post(receiver.url, BODY, headers(["s"]))
    assert result.status is None
    assert result.error is not None and result.error.startswith("TLS failure: ")
    assert "certificate" in result.error
    assert receiver.arrivals == []


async def test_a_certificate_for_another_name_is_a_tls_failure() -> None:
    tls = make_tls("example.com")
    async with trio.open_nursery() as nursery:
        receiver = await start_receiver(nursery, tls)
        result = await sender(tls).post(receiver.url, BODY, headers(["s"]))
        nursery.cancel_scope.cancel()
    assert result.error is not None and "TLS failure" in result.error
    assert "mismatch" in result.error or "match" in result.error


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("localhost", "loopback"),
        ("[::1]", "loopback"),
        ("[::ffff:127.0.0.1]", "loopback"),
        ("[::ffff:10.1.2.3]", "private"),
        ("10.0.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
    ],
)
async def test_refused_addresses_are_never_connected(
    tls: ReceiverTLS, receiver: Receiver, host: str, why: str
) -> None:
    guarded = sender(tls, allowed_networks=())
    result = await guarded.post(f"https://{host}:{receiver.port}/hook", BODY, headers(["s"]))
    assert (result.status, result.error) == (None, f"refused address: {why}")
    assert receiver.connections == 0
    with pytest.raises(ValueError, match=f"resolves to a {why} address"):
        await check_url(f"https://{host}/hook")


class FakeDNS(trio.abc.HostnameResolver):
    """A resolver answering fixed addresses for names (Trio's own hook for custom resolvers):
    what a hostile DNS server could answer at delivery time."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    async def getaddrinfo(  # type: ignore[override]
        self, host: bytes | None, port: object, family: int = 0, type: int = 0, *args: object
    ) -> list[tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[object, ...]]]:
        name = (host or b"").decode()
        if name not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "unknown name")
        out: list[tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[object, ...]]]
        out = []
        for text in self.answers[name]:
            if ipaddress.ip_address(text).version == 4:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (text, port)))
            else:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (text, port, 0, 0)))
        return out

    async def getnameinfo(self, sockaddr: object, flags: int) -> tuple[str, str]:
        raise NotImplementedError


@pytest.fixture
async def fake_dns() -> AsyncIterator[dict[str, list[str]]]:
    answers: dict[str, list[str]] = {}
    previous = trio.socket.set_custom_hostname_resolver(FakeDNS(answers))
    yield answers
    trio.socket.set_custom_hostname_resolver(previous)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("64:ff9b:1::7f00:1", "private"),
        ("::ffff:0:7f00:1", "loopback"),
        ("192.88.99.1", "reserved"),
        ("2002:a00:1::1", "private"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
        ("::a00:1", "private"),
    ],
)
async def test_dns_answers_in_every_disguise_are_refused_at_delivery(
    tls: ReceiverTLS, receiver: Receiver, fake_dns: dict[str, list[str]], address: str, why: str
) -> None:
    """Issue #19 item 11: the name passed the check at subscription time; at delivery it
    resolves (also) to an address that embeds or is an inside one."""
    fake_dns["hooks.example.com"] = ["93.184.215.14", address]
    url = f"https://hooks.example.com:{receiver.port}/hook"
    result = await sender(tls, allowed_networks=()).post(url, BODY, headers(["s"]))
    assert (result.status, result.error) == (None, f"refused address: {why}")
    assert receiver.connections == 0
    with pytest.raises(ValueError, match=f"resolves to a {why} address"):
        await check_url("https://hooks.example.com/hook")


async def test_ports_other_than_443_need_the_operator(
    tls: ReceiverTLS, receiver: Receiver, fake_dns: dict[str, list[str]]
) -> None:
    fake_dns["hooks.example.com"] = ["93.184.215.14"]
    result = await sender(tls).post("https://hooks.example.com:8443/", BODY, headers(["s"]))
    assert (result.status, result.error) == (None, "refused port: 8443")
    with pytest.raises(PortRefused):
        await check_url("https://hooks.example.com:8443/")
    with pytest.raises(PortRefused):
        await check_url("https://93.184.215.14:25/")
    await check_url("https://hooks.example.com:8443/", allowed_ports=[8443])
    await check_url("https://hooks.example.com:443/")
    with pytest.raises(PortRefused):
        await check_url("http://hooks.example.com:443/", allow_http=True)  # http's own is 80
    await check_url("http://hooks.example.com/", allow_http=True)
    # A receiver in a network the operator allowed may listen anywhere (the loopback receiver
    # of these tests does), but a name that also answers a public address may not.
    fake_dns["local.example.com"] = ["127.0.0.1"]
    url = f"https://local.example.com:{receiver.port}/hook"
    await check_url(url, allowed_networks=LOOPBACK)
    fake_dns["mixed.example.com"] = ["127.0.0.1", "93.184.215.14"]
    with pytest.raises(PortRefused):
        await check_url(f"https://mixed.example.com:{receiver.port}/", allowed_networks=LOOPBACK)


@pytest.mark.parametrize(
    "url",
    [
        "https://93.184.216.34%00.127.0.0.1/",
        "https://[fe80::1%25eth0]/",
        "https://[2606:4700:4700::1111%251]/",
        "https://hooks%2eexample.com/",
    ],
)
async def test_a_host_with_a_zone_id_or_escape_is_refused(tls: ReceiverTLS, url: str) -> None:
    with pytest.raises(ValueError, match="must not contain %"):
        parse_url(url)
    result = await sender(tls).post(url, BODY, headers(["s"]))
    assert result.error is not None and "must not contain %" in result.error


async def test_allowed_private_networks_let_loopback_through_by_name_too(
    tls: ReceiverTLS, receiver: Receiver
) -> None:
    if not _resolves_to_v4_only_loopback("localhost"):
        pytest.skip("localhost resolves to ::1 here as well; 127.0.0.0/8 alone would refuse it")
    url = f"https://localhost:{receiver.port}/hook"
    result = await sender(tls).post(url, BODY, headers(["s"]))
    assert (result.status, result.error) == (200, None)
    assert receiver.arrivals[0].header("Host") == f"localhost:{receiver.port}"
    await check_url(url, allowed_networks=LOOPBACK)


async def test_an_ipv4_allowance_covers_the_mapped_ipv6_form(tls: ReceiverTLS) -> None:
    await check_url("https://[::ffff:127.0.0.1]/", allowed_networks=LOOPBACK)
    with pytest.raises(ValueError, match="loopback"):
        await check_url("https://[::1]/", allowed_networks=LOOPBACK)


def _resolves_to_v4_only_loopback(name: str) -> bool:
    infos = socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)
    return all(ipaddress.ip_address(info[4][0]) in LOOPBACK[0] for info in infos)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://example.com/", "must use https"),
        ("ftp://example.com/", "must use https"),
        ("https:///path", "no host"),
        ("https://user:pw@example.com/", "user information"),
        ("https://example.com:99999/", "port is not valid"),
        ("https://example.com/a b", "printable ASCII"),
        ("https://exämple.com/", "printable ASCII"),
        ("https://example.com/\r\nX: y", "printable ASCII"),
        ("https://example.com/" + "a" * 2048, "longer than"),
    ],
)
async def test_malformed_urls_are_refused_with_the_reason(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url)
    with pytest.raises(ValueError, match=message):
        await check_url(url)


async def test_http_only_when_allowed(tls: ReceiverTLS) -> None:
    async with trio.open_nursery() as nursery:
        plain = await start_receiver(nursery, None)
        refused = await sender(tls).post(plain.url, BODY, headers(["s"]))
        allowed = await sender(tls, allow_http=True).post(plain.url, BODY, headers(["s"]))
        nursery.cancel_scope.cancel()
    assert refused.error == "invalid URL: the URL must use https"
    assert (allowed.status, allowed.error) == (200, None)
    assert len(plain.arrivals) == 1


async def test_an_unknown_name_does_not_resolve(tls: ReceiverTLS) -> None:
    result = await sender(tls).post("https://no-such-host.invalid/", BODY, headers(["s"]))
    assert (result.status, result.error) == (None, "DNS resolution failed")
    with pytest.raises(ValueError, match="does not resolve"):
        await check_url("https://no-such-host.invalid/")


@pytest.mark.parametrize("host", ["a..b", "x" * 64 + ".example"])
async def test_a_name_the_idna_codec_refuses_does_not_resolve(tls: ReceiverTLS, host: str) -> None:
    result = await sender(tls).post(f"https://{host}/", BODY, headers(["s"]))
    assert (result.status, result.error) == (None, "DNS resolution failed")
    with pytest.raises(ValueError, match="does not resolve"):
        await check_url(f"https://{host}/")


async def test_an_oversized_head_is_an_invalid_response(
    tls: ReceiverTLS, receiver: Receiver
) -> None:
    header = b"X-Junk: " + b"j" * 1000 + b"\r\n"
    receiver.play(Stream(lambda: iter([b"HTTP/1.1 200 OK\r\n", *(header for _ in range(10_000))])))
    result = await sender(tls).post(receiver.url, BODY, headers(["s"]))
    assert result.status is None
    assert result.error is not None and result.error.startswith("invalid response:")


async def test_a_never_ending_body_is_read_only_to_the_limit(
    tls: ReceiverTLS, receiver: Receiver
) -> None:
    receiver.play(Stream(lambda: itertools.chain([b"HTTP/1.1 500 Oops\r\n\r\n"], endless())))
    result = await sender(tls).post(receiver.url, BODY, headers(["s"]))
    assert (result.status, result.error) == (500, None)
    assert result.body == b"x" * BODY_LIMIT


@pytest.mark.parametrize(
    "reply",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 2000 Huh\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        CLOSE,
        b"HTTP/1.1 200 OK\r\n",  # then the connection closes mid-head
    ],
)
async def test_garbage_ends_in_an_error_not_an_exception(
    tls: ReceiverTLS, receiver: Receiver, reply: object
) -> None:
    receiver.play(reply if reply is CLOSE else Stream(lambda: iter([reply]), close=True))  # type: ignore[list-item]
    result = await sender(tls).post(receiver.url, BODY, headers(["s"]))
    assert result.status is None
    assert result.error is not None and result.error.startswith("invalid response:")


async def test_a_slowloris_head_is_cut_at_the_timeout(
    tls: ReceiverTLS, receiver: Receiver, autojump_clock: trio.testing.MockClock
) -> None:
    def drip() -> Iterator[bytes | float]:
        yield b"HTTP/1.1 200 OK\r\n"
        while True:
            yield 1.0  # a header line a second: never a complete head, never over a limit
            yield b"X: y\r\n"

    receiver.play(Stream(drip))
    result = await sender(tls).post(receiver.url, BODY, headers(["s"]))
    assert (result.status, result.error, result.duration_s) == (None, "timeout after 10 s", 10.0)


async def test_an_allowed_ipv6_loopback_receiver_is_reached(tls: ReceiverTLS) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    async with trio.open_nursery() as nursery:
        receiver: Receiver = await nursery.start(
            lambda task_status: serve_receiver(tls=tls.server, host="::1", task_status=task_status)
        )
        v6 = (ipaddress.ip_network("::1/128"),)
        allowed = await sender(tls, allowed_networks=v6).post(receiver.url, BODY, headers(["s"]))
        refused = await sender(tls).post(receiver.url, BODY, headers(["s"]))  # 127/8 only
        nursery.cancel_scope.cancel()
    assert (allowed.status, allowed.error) == (200, None)
    assert refused.error == "refused address: loopback"
    assert receiver.arrivals[0].header("Host") == f"[::1]:{receiver.port}"
    assert len(receiver.arrivals) == 1


async def test_a_header_with_a_line_break_is_never_sent(
    tls: ReceiverTLS, receiver: Receiver
) -> None:
    smuggled = [*headers(["s"]), ("X-Event", "a\r\nX-Injected: 1")]
    result = await sender(tls).post(receiver.url, BODY, smuggled)
    assert (result.status, result.error) == (None, "invalid request headers")
    assert receiver.connections == 0
