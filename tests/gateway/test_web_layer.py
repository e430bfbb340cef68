"""The request layer on its own, over in-memory ASGI channels: routing, 404/405, path
parameters with `/`, body limits, lifespan and WebSocket dispatch (and, over a socket, an
unknown WebSocket path refused through Hypercorn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from gateway.server.asgi import Message, Receive, Scope, Send
from gateway.web import (
    Auth,
    BodyLimits,
    Operation,
    Request,
    Response,
    Routes,
    WebApp,
    json_response,
)
from gateway.web.app import WEBSOCKET_NOT_FOUND
from gateway.web.routing import Router
from protocol.errors import APIError
from tests.harness import gateway_config, running_gateway


async def _noop(request: Request) -> Response:
    return json_response({})


def _routes() -> Routes:
    r = Routes()

    @r.operation(Operation("GET", "/v1/things", "list", "T", auth=Auth.NONE))
    async def things(request: Request) -> Response:
        return json_response({"limit": request.query_int("limit", 5, minimum=1, maximum=9)})

    @r.operation(Operation("POST", "/v1/things", "create", "T", request=dict, auth=Auth.NONE))
    async def create(request: Request) -> Response:
        return json_response(await request.json(dict[str, Any]), status=201)

    @r.operation(Operation("GET", "/v1/things/{thing_id}", "one", "T", auth=Auth.NONE))
    async def one(request: Request) -> Response:
        return json_response(request.path_params)

    @r.operation(
        Operation(
            "GET",
            "/v1/models/{model_id}",
            "model",
            "T",
            auth=Auth.NONE,
            slash_params=("model_id",),
        )
    )
    async def model(request: Request) -> Response:
        return json_response(request.path_params)

    @r.websocket("/v1/echo")
    async def echo(scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        message = await receive()
        await send({"type": "websocket.send", "text": message["text"].upper()})
        await send({"type": "websocket.close", "code": 1000})

    return r


def test_router_static_templated_and_slash_params() -> None:
    router = Router(_routes())
    route, params = router.match("GET", b"/v1/things")
    assert route.operation.summary == "list" and params is None
    route, params = router.match("GET", b"/v1/things/th_1")
    assert params == {"thing_id": "th_1"}
    _, params = router.match("GET", b"/v1/models/sim/sim-small")
    assert params == {"model_id": "sim/sim-small"}
    with pytest.raises(APIError) as unknown:
        router.match("GET", b"/v1/things/a/b")
    assert unknown.value.status == 404 and unknown.value.code == "unknown_url"
    with pytest.raises(APIError) as wrong:
        router.match("DELETE", b"/v1/things")
    assert wrong.value.status == 405 and wrong.value.headers == {"Allow": "GET, POST"}
    route, params = router.match("HEAD", b"/v1/things/th_2")  # HEAD: the GET route
    assert route.operation.method == "GET" and params == {"thing_id": "th_2"}


def test_router_matches_the_raw_path_segment_by_segment() -> None:
    router = Router(_routes())
    # %2F is part of a segment, never a separator: a thing id holding "/", or no route.
    _, params = router.match("GET", b"/v1/things/a%2Fb")
    assert params == {"thing_id": "a/b"}
    for raw in (b"/v1%2Fthings", b"/v1/things%2Fth_1", b"/v1%2fthings/th_1"):
        with pytest.raises(APIError) as unknown:
            router.match("GET", raw)
        assert unknown.value.code == "unknown_url", raw
    # Other escapes decode inside their segment, literal parts included.
    assert router.match("GET", b"/v1/th%69ngs")[1] is None
    assert router.match("GET", b"/v1/things/a%25b")[1] == {"thing_id": "a%b"}
    assert router.match("GET", b"/v1/things/a%252Fb")[1] == {"thing_id": "a%2Fb"}
    assert router.match("GET", b"/v1/things/%C3%A9")[1] == {"thing_id": "\u00e9"}
    # A slash parameter takes the rest of the path, encoded slashes decoded.
    assert router.match("GET", b"/v1/models/sim%2Fsim-small")[1] == {"model_id": "sim/sim-small"}


@pytest.mark.parametrize(
    "raw", [b"%00", b"a%01", b"%1f", b"%7F", b"%C2%85", b"%ff", b"%c0%af", b"%ED%A0%80"]
)
def test_a_path_parameter_no_id_can_hold_is_404(raw: bytes) -> None:
    router = Router(_routes())
    for path in (b"/v1/things/" + raw, b"/v1/models/sim/" + raw):
        with pytest.raises(APIError) as refused:
            router.match("GET", path)
        error = refused.value
        assert (error.status, error.code, error.param) == (
            404,
            "not_found",
            "thing_id" if b"things" in path else "model_id",
        )
        error.body()  # renders: no undecodable text in the message


def test_router_refuses_a_route_declared_twice() -> None:
    r = _routes()
    r.add(Operation("GET", "/v1/things", "again", "T", auth=Auth.NONE), _noop)
    with pytest.raises(ValueError, match="declared twice"):
        Router(r)


def test_only_the_last_path_parameter_may_hold_a_slash() -> None:
    r = Routes()
    op = Operation("GET", "/v1/{a}/{b}", "x", "T", auth=Auth.NONE, slash_params=("a",))
    r.add(op, _noop)
    with pytest.raises(ValueError, match="last path parameter"):
        Router(r)


class _Client:
    """Feeds an ASGI app from memory and collects what it sends."""

    def __init__(self, app: WebApp) -> None:
        self.app = app
        self.sent: list[Message] = []

    async def request(
        self,
        method: str,
        path: str,
        chunks: tuple[bytes, ...] | list[bytes] = (),
        headers: tuple[tuple[bytes, bytes], ...] | list[tuple[bytes, bytes]] = (),
        query: bytes = b"",
    ) -> tuple[int, dict[bytes, bytes], bytes]:
        self.sent = []
        pending = [
            {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
            for i, c in enumerate(chunks or [b""])
        ]
        self.received = 0

        async def receive() -> Message:
            self.received += 1
            if pending:
                return pending.pop(0)
            await trio.sleep_forever()
            raise AssertionError

        async def send(message: Message) -> None:
            self.sent.append(message)

        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": list(headers),
            "query_string": query,
        }
        await self.app(scope, receive, send)
        start, *bodies = self.sent
        return (
            start["status"],
            dict(start["headers"]),
            b"".join(m.get("body", b"") for m in bodies),
        )


async def test_dispatch_query_and_json_body() -> None:
    client = _Client(WebApp(_routes(), None))
    status, _, body = await client.request("GET", "/v1/things", query=b"limit=7")
    assert status == 200 and body == b'{"limit":7}'
    status, _, body = await client.request("GET", "/v1/things", query=b"limit=70")
    assert status == 400 and msgspec.json.decode(body)["error"]["param"] == "limit"
    status, _, body = await client.request("POST", "/v1/things", [b'{"a":', b" 1}"])
    assert status == 201 and body == b'{"a":1}'
    status, headers, body = await client.request("PUT", "/v1/things")
    assert status == 405 and headers[b"allow"] == b"GET, POST"
    assert msgspec.json.decode(body)["error"]["code"] == "method_not_allowed"


async def test_body_limits_declared_and_running() -> None:
    client = _Client(WebApp(_routes(), None, BodyLimits(json=10)))
    status, headers, _ = await client.request(
        "POST", "/v1/things", [b"{}"], headers=[(b"content-length", b"999999999")]
    )
    assert status == 413 and headers[b"connection"] == b"close"
    assert client.received == 0  # refused on the declared length: nothing was read
    status, _, _ = await client.request("POST", "/v1/things", [b'{"a":', b'"123456789"}', b"x"])
    assert status == 413
    assert client.received == 2  # stopped as soon as the count passed the limit
    status, _, _ = await client.request("POST", "/v1/things", [b'{"a":1}'])
    assert status == 201


async def test_lifespan_is_acknowledged() -> None:
    app = WebApp(_routes(), None)
    to_app, app_inbox = trio.open_memory_channel[Message](2)
    app_outbox, from_app = trio.open_memory_channel[Message](2)
    await to_app.send({"type": "lifespan.startup"})
    await to_app.send({"type": "lifespan.shutdown"})
    await app({"type": "lifespan"}, app_inbox.receive, app_outbox.send)
    assert [from_app.receive_nowait()["type"] for _ in range(2)] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]


async def _websocket(app: WebApp, path: str, messages: list[Message]) -> list[Message]:
    to_app, app_inbox = trio.open_memory_channel[Message](len(messages))
    app_outbox, from_app = trio.open_memory_channel[Message](10)
    for message in messages:
        await to_app.send(message)
    with trio.fail_after(5):
        await app(
            {"type": "websocket", "path": path, "headers": []}, app_inbox.receive, app_outbox.send
        )
    app_outbox.close()
    return [m async for m in from_app]


async def test_websocket_dispatch_by_path() -> None:
    app = WebApp(_routes(), None)
    sent = await _websocket(
        app,
        "/v1/echo",
        [{"type": "websocket.connect"}, {"type": "websocket.receive", "text": "hi"}],
    )
    assert sent == [
        {"type": "websocket.accept"},
        {"type": "websocket.send", "text": "HI"},
        {"type": "websocket.close", "code": 1000},
    ]


async def test_unknown_websocket_path_is_closed_before_accept() -> None:
    app = WebApp(_routes(), None)
    sent = await _websocket(app, "/v1/nope", [{"type": "websocket.connect"}])
    assert sent == [{"type": "websocket.close", "code": WEBSOCKET_NOT_FOUND}]


def test_routes_needing_a_credential_need_an_authenticator() -> None:
    r = Routes()
    r.add(Operation("GET", "/v1/secret", "x", "T"), _noop)
    with pytest.raises(ValueError, match="Authenticator"):
        WebApp(r, None)


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_unknown_websocket_path_is_refused_through_hypercorn(
    database_url: str, tmp_path: Path
) -> None:
    """Over a real socket (Hypercorn speaks WebSocket): the handshake is refused with 403."""
    config = gateway_config(database_url, tmp_path, toml='[server]\nhttp_server = "hypercorn"\n')
    async with running_gateway(config) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(
                b"GET /v1/nope HTTP/1.1\r\nhost: t\r\nupgrade: websocket\r\n"
                b"connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                b"sec-websocket-version: 13\r\n\r\n"
            )
            received = b""
            with trio.fail_after(10):
                while b"\r\n\r\n" not in received:
                    chunk = await stream.receive_some()
                    assert chunk, received
                    received += chunk
        assert received.startswith(b"HTTP/1.1 403"), received


async def test_a_list_header_sent_twice_is_combined_a_single_valued_one_refused() -> None:
    r = Routes()

    @r.operation(Operation("GET", "/v1/echo", "echo", "T", auth=Auth.NONE))
    async def echo(request: Request) -> Response:
        return json_response(
            {"accept": request.header(b"accept"), "type": request.header(b"content-type")}
        )

    client = _Client(WebApp(r, None))
    accept = [(b"accept", b"application/json"), (b"accept", b"text/event-stream")]
    status, _, body = await client.request("GET", "/v1/echo", headers=accept)
    assert status == 200
    assert msgspec.json.decode(body) == {
        "accept": "application/json, text/event-stream",
        "type": None,
    }
    twice = [(b"content-type", b"text/plain"), (b"content-type", b"text/plain")]
    status, _, body = await client.request("GET", "/v1/echo", headers=twice)
    error = msgspec.json.decode(body)["error"]
    assert (status, error["code"]) == (400, "duplicate_header")
    assert "Content-Type" in error["message"]
