"""Keep-alive expiry: an idle pooled connection older than `keepalive_expiry_s` is closed, not
reused — a connection a NAT dropped silently would otherwise cost the whole read timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from actors.upstream import UpstreamClient
from protocol.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from tests.actors.test_http1_pool import _self_signed
from tests.raw_upstream import RawUpstream, serve_raw_upstream
from tests.tcp_forwarder import forwarding

CONNECT_TIMEOUT = 0.5
READ_TIMEOUT = 60.0


def _client(url: str, *, expiry: float) -> UpstreamClient:
    return UpstreamClient(
        "raw",
        "openai",
        f"{url}/v1",
        None,
        max_connections=2,
        max_keepalive_connections=2,
        connect_timeout_s=CONNECT_TIMEOUT,
        read_timeout_s=READ_TIMEOUT,
        max_response_bytes=1 << 20,
        keepalive_expiry_s=expiry,
    )


@pytest.fixture
async def raw() -> AsyncIterator[RawUpstream]:
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_raw_upstream)
        nursery.cancel_scope.cancel()


async def test_a_connection_idle_past_its_expiry_is_not_reused(
    raw: RawUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    client = _client(raw.url, expiry=5.0)
    await client.post_json("chat", b"{}")
    await trio.sleep(4.9)  # within the expiry: reused
    await client.post_json("chat", b"{}")
    assert raw.connections == 1 and client.pool.opened == 1
    await trio.sleep(5.1)  # past it: closed unused, a new connection is opened
    assert (await client.post_json("chat", b"{}"))[0] == b'{"ok":true}'
    assert raw.connections == 2 and client.pool.opened == 2
    assert (client.pool.expired, client.pool.discarded) == (1, 0)
    await client.aclose()


async def test_only_the_expired_connections_are_closed(
    raw: RawUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    client = _client(raw.url, expiry=5.0)
    release = trio.Event()

    async def hold(read: trio.Event) -> None:
        async with client.stream("chat", b"{}") as response:
            await response.read(1000)
            read.set()
            await release.wait()

    async with trio.open_nursery() as nursery:
        read = [trio.Event(), trio.Event()]
        for event in read:
            nursery.start_soon(hold, event)
        for event in read:
            await event.wait()
        release.set()  # two idle connections now
    await trio.sleep(6)
    await client.post_json("chat", b"{}")  # closes both, opens a third
    await trio.sleep(1)
    await client.post_json("chat", b"{}")  # the third is fresh: reused
    assert (raw.connections, client.pool.expired) == (3, 2)
    await client.aclose()


@pytest.mark.parametrize(
    ("expiry", "error", "waited"),
    [
        (1.0, UpstreamUnavailable, CONNECT_TIMEOUT),  # a new connection: its TLS handshake
        (100.0, UpstreamTimeout, READ_TIMEOUT),  # without expiry: the silent stale connection
    ],
)
async def test_a_dropped_idle_connection_costs_a_connect_timeout_not_the_read_timeout(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
    expiry: float,
    error: type[UpstreamError],
    waited: float,
) -> None:
    server_context, cert_file = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    async with trio.open_nursery() as nursery:
        raw: RawUpstream = await nursery.start(partial(serve_raw_upstream, tls=server_context))
        port = int(raw.url.rsplit(":", 1)[1])
        async with forwarding("127.0.0.1", port) as forwarder:
            client = _client(f"https://127.0.0.1:{forwarder.port}", expiry=expiry)
            await client.post_json("chat", b"{}")
            await trio.sleep(2)  # idle, past a 1 s expiry
            forwarder.blackhole()  # the NAT forgot the connection: nothing moves any more
            began = trio.current_time()
            with pytest.raises(error):
                await client.post_json("chat", b"{}")
            assert trio.current_time() - began == pytest.approx(waited, abs=0.01)
            forwarder.heal()
            await client.aclose()
        nursery.cancel_scope.cancel()
