"""WebSocket on the built-in server: a bare ASGI echo app of the test's own over real loopback
sockets, wsproto as the client; and the same echo as a route of the served gateway."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)

from gateway.web import Routes
from tests.gateway.rawhttp import Raw, get
from tests.gateway.test_http1_connections import serving
from tests.harness import gateway_config, running_gateway

disconnects: list[int] = []
disconnected: list[trio.Event] = []  # set when the echo app hears `websocket.disconnect`


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    if scope["type"] != "websocket":
        raise RuntimeError("no lifespan here")
    assert (await receive())["type"] == "websocket.connect"
    path = scope["path"]
    if path == "/deny":
        await send({"type": "websocket.close"})
        return
    if path == "/fail-before-accept":
        raise ValueError("before accept")
    protocols = scope["subprotocols"]
    await send({"type": "websocket.accept", "subprotocol": protocols[0] if protocols else None})
    if path == "/fail-after-accept":
        raise ValueError("after accept")
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            disconnects.append(message["code"])
            for event in disconnected:
                event.set()
            return
        if message.get("text") == "close please":
            await send({"type": "websocket.close", "code": 4000, "reason": "asked"})
            continue
        reply = {k: message[k] for k in ("text", "bytes") if message.get(k) is not None}
        await send({"type": "websocket.send", **reply})


class Client:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.pending: list[Event] = []

    @classmethod
    async def connect(cls, url: str, path: str, subprotocols: list[str] | None = None) -> Client:
        client = cls((await Raw.connect(url)).stream)
        await client.send(Request(host="t", target=path, subprotocols=subprotocols or []))
        return client

    async def send(self, event: Event) -> None:
        await self.stream.send_all(self.ws.send(event))

    async def event(self) -> Event | None:
        """The next event; None when the TCP connection ended."""
        with trio.fail_after(5):
            while not self.pending:
                self.pending.extend(self.ws.events())
                if self.pending:
                    break
                data = await self.stream.receive_some()
                if not data:
                    return None
                self.ws.receive_data(data)
        return self.pending.pop(0)

    async def message(self) -> str | bytes:
        parts: list[Any] = []
        while True:
            event = await self.event()
            assert isinstance(event, Message), event
            parts.append(event.data)
            if event.message_finished:
                return "".join(parts) if isinstance(parts[0], str) else b"".join(parts)


async def test_echo_ping_fragments_and_an_orderly_close() -> None:
    disconnects.clear()
    async with serving(echo_app) as url:
        client = await Client.connect(url, "/echo?x=1", ["chat", "other"])
        accept = await client.event()
        assert isinstance(accept, AcceptConnection) and accept.subprotocol == "chat"
        await client.send(TextMessage("héllo"))
        assert await client.message() == "héllo"
        await client.send(BytesMessage(b"\x00\x01"))
        assert await client.message() == b"\x00\x01"
        await client.send(TextMessage("frag", message_finished=False))
        await client.send(TextMessage("mented"))
        assert await client.message() == "fragmented"
        await client.send(Ping(b"p"))
        pong = await client.event()
        assert isinstance(pong, Pong) and pong.payload == b"p"
        await client.send(CloseConnection(1000))
        close = await client.event()
        assert isinstance(close, CloseConnection) and close.code == 1000
        assert await client.event() is None  # then the server closes TCP
        await client.stream.aclose()
    assert disconnects == [1000]


async def test_the_app_closes() -> None:
    async with serving(echo_app) as url:
        client = await Client.connect(url, "/echo")
        assert isinstance(await client.event(), AcceptConnection)
        await client.send(TextMessage("close please"))
        close = await client.event()
        assert isinstance(close, CloseConnection) and (close.code, close.reason) == (4000, "asked")
        await client.send(close.response())
        assert await client.event() is None
        await client.stream.aclose()


async def test_closing_before_accept_is_403() -> None:
    async with serving(echo_app) as url:
        client = await Client.connect(url, "/deny")
        reject = await client.event()
        assert isinstance(reject, RejectConnection) and reject.status_code == 403
        await client.stream.aclose()


async def test_a_message_over_the_limit_closes_with_1009() -> None:
    disconnects.clear()
    async with serving(echo_app, websocket_max_message_bytes=1000) as url:
        client = await Client.connect(url, "/echo")
        assert isinstance(await client.event(), AcceptConnection)
        await client.send(BytesMessage(b"x" * 1000))
        assert await client.message() == b"x" * 1000
        await client.send(BytesMessage(b"x" * 600, message_finished=False))
        await client.send(BytesMessage(b"x" * 600))
        close = await client.event()
        assert isinstance(close, CloseConnection) and close.code == 1009
        await client.stream.aclose()
    assert disconnects == [1009]


async def test_a_client_that_vanishes_is_a_1006_disconnect() -> None:
    disconnects.clear()
    heard = trio.Event()
    disconnected[:] = [heard]
    async with serving(echo_app) as url:
        client = await Client.connect(url, "/echo")
        assert isinstance(await client.event(), AcceptConnection)
        await client.stream.aclose()
        with trio.fail_after(5):
            await heard.wait()
    assert disconnects == [1006]


@pytest.mark.parametrize(
    ("path", "expected"), [("/fail-before-accept", 500), ("/fail-after-accept", 1011)]
)
async def test_an_app_failure_ends_that_connection_only(
    path: str, expected: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, "gateway.http")
    async with serving(echo_app) as url:
        other = await Client.connect(url, "/echo")
        assert isinstance(await other.event(), AcceptConnection)
        client = await Client.connect(url, path)
        event = await client.event()
        if expected == 500:
            assert isinstance(event, RejectConnection) and event.status_code == 500
        else:
            assert isinstance(event, AcceptConnection)
            close = await client.event()
            assert isinstance(close, CloseConnection) and close.code == 1011
        await client.stream.aclose()
        await other.send(TextMessage("still here"))
        assert await other.message() == "still here"
        await other.stream.aclose()


async def test_a_bad_handshake_is_400() -> None:
    async with serving(echo_app) as url:
        raw = await Raw.connect(url)
        await raw.stream.send_all(get("/echo", b"upgrade: websocket\r\nconnection: upgrade\r\n"))
        with trio.fail_after(5):
            status, _, body = await raw.response()
            assert status == 400 and b"WebSocket" in body
            assert await raw.closed()
        await raw.aclose()


async def test_a_bad_frame_closes_with_1002() -> None:
    async with serving(echo_app) as url:
        client = await Client.connect(url, "/echo")
        assert isinstance(await client.event(), AcceptConnection)
        await client.stream.send_all(b"\x81\x02hi")  # unmasked: clients must mask
        close = await client.event()
        assert isinstance(close, CloseConnection) and close.code == 1002
        await client.stream.aclose()


def _echo_routes() -> Routes:
    r = Routes()
    r.websocket("/v1/test/echo")(echo_app)  # test-only: where a realtime relay would go
    return r


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_echo_route_on_the_served_gateway(database_url: str, tmp_path: Path) -> None:
    """The same echo, declared as a WebSocket route of the gateway's request layer and served
    by `gateway serve`'s default server; an undeclared path is refused (403)."""
    config = gateway_config(database_url, tmp_path)
    async with running_gateway(config, extra_routes=[_echo_routes()]) as gw:
        client = await Client.connect(gw.url, "/v1/test/echo")
        assert isinstance(await client.event(), AcceptConnection)
        await client.send(TextMessage("through the gateway"))
        assert await client.message() == "through the gateway"
        await client.send(CloseConnection(1000))
        assert isinstance(await client.event(), CloseConnection)
        await client.stream.aclose()
        unknown = await Client.connect(gw.url, "/v1/test/nowhere")
        rejected = await unknown.event()
        assert isinstance(rejected, RejectConnection) and rejected.status_code == 403
        await unknown.stream.aclose()
        assert (await gw.client.get("/healthz")).status_code == 200
