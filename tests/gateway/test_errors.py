"""Every error is answered in the OpenAI shape with a request id, by the one mapping of the
request layer, on management and inference routes alike: unknown routes, 405, oversized bodies
(declared and chunked, per route limit), unexpected exceptions (no trace to the client), and
the database being unreachable (503 + Retry-After)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import trio

from gateway.audio import FORM_OVERHEAD_BYTES as AUDIO_FORM_OVERHEAD_BYTES
from gateway.errors import ClientDisconnected
from gateway.web import Auth, Operation, Request, Response, Routes, json_response
from protocol.scopes import CHAT_COMPLETIONS
from tests.backends import POSTGRES_URL
from tests.gateway.keys_client import error_of
from tests.harness import Gateway, gateway_config, running_gateway
from tests.inference import inference_rig
from tests.tcp_forwarder import forwarding

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])  # about HTTP, not storage


async def test_unknown_route_is_404(gateway: Gateway) -> None:
    r = await gateway.client.get("/v1/unknown/thing", headers=gateway.auth())
    assert r.status_code == 404
    error = error_of(r)
    assert error["code"] == "unknown_url" and "/v1/unknown/thing" in error["message"]
    assert error["type"] == "not_found_error"
    # A templated route's parameter is one path segment unless declared otherwise.
    assert (await gateway.client.get("/v1/keys/a/b", headers=gateway.auth())).status_code == 404


async def test_wrong_method_is_405(gateway: Gateway) -> None:
    r = await gateway.client.put("/v1/keys", headers=gateway.auth())
    assert r.status_code == 405
    error = error_of(r)
    assert error["code"] == "method_not_allowed" and error["type"] == "invalid_request_error"
    assert r.headers["allow"] == "GET, POST"
    r = await gateway.client.post("/v1/keys/key_1", headers=gateway.auth())
    assert r.status_code == 405 and r.headers["allow"] == "DELETE, GET, PATCH"
    r = await gateway.client.get("/v1/chat/completions", headers=gateway.auth())
    assert r.status_code == 405 and r.headers["allow"] == "POST"


def _counting_routes() -> Routes:
    r = Routes()

    @r.operation(
        Operation(
            "POST",
            "/v1/test/upload",
            "counts a streamed body",
            "Test",
            request=bytes,
            request_content_type="application/octet-stream",
            response=dict[str, int],
            body_limit="audio",
        )
    )
    async def upload(request: Request) -> Response:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        return json_response({"size": size})

    return r


async def _head_only(gw: Gateway, path: str, length: int, key: str | None = None) -> bytes:
    """Send a request head declaring `length` body bytes, none of them; the response head."""
    host, port = gw.url.removeprefix("http://").split(":")
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        await stream.send_all(
            f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {key or gw.management_key}\r\n"
            f"content-length: {length}\r\n\r\n".encode()
        )
        received = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in received:
                chunk = await stream.receive_some()
                assert chunk, received
                received += chunk
            while True:  # the gateway closes the connection after a 413
                chunk = await stream.receive_some()
                if not chunk:
                    break
                received += chunk
    return received


@sqlite_only
async def test_declared_length_over_the_route_limit_is_413_before_the_body(
    database_url: str, tmp_path: Path
) -> None:
    config = gateway_config(
        database_url,
        tmp_path,
        toml="[server]\nmax_request_body_bytes = 1000\nmax_audio_body_bytes = 5000\n",
    )
    async with running_gateway(config, extra_routes=[_counting_routes()]) as gw:
        for path in ("/v1/keys", "/v1/chat/completions", "/v1/embeddings", "/v1/test/upload"):
            received = await _head_only(gw, path, 10**9)
            head = received.split(b"\r\n\r\n")[0].lower()
            assert head.startswith(b"http/1.1 413"), (path, received)
            assert b"\r\nconnection: close" in head
            assert b'"request_too_large"' in received
        # The route's own limit applies: 3000 bytes are too many for JSON, not for audio.
        r = await gw.client.post("/v1/test/upload", content=b"x" * 3000, headers=gw.auth())
        assert r.status_code == 200 and r.json() == {"size": 3000}
        r = await gw.client.post("/v1/keys", content=b"x" * 3000, headers=gw.auth())
        assert r.status_code == 413 and error_of(r)["code"] == "request_too_large"
        # The audio limit leaves room for the form around the file (gateway/audio/).
        over = 5001 + AUDIO_FORM_OVERHEAD_BYTES
        r = await gw.client.post("/v1/test/upload", content=b"x" * over, headers=gw.auth())
        assert r.status_code == 413


async def test_chunked_body_passing_the_limit_is_413(database_url: str, tmp_path: Path) -> None:
    config = gateway_config(database_url, tmp_path)
    limit = config.server.max_request_body_bytes
    async with running_gateway(config) as gw:
        big = b'{"name": "' + b"x" * (limit + 10) + b'"}'
        r = await gw.client.post("/v1/keys", content=big, headers=gw.auth())
        assert r.status_code == 413
        assert error_of(r)["code"] == "request_too_large"
        assert "close" in r.headers["connection"]

        for path in ("/v1/keys", "/v1/chat/completions"):
            parts = [b'{"name": "', *([b"y" * 65536] * (limit // 65536 + 2)), b'"}']
            r = await gw.client.post(
                path,
                content=_Chunked(parts),  # no Content-Length: Transfer-Encoding: chunked
                headers={**gw.auth(), "Content-Type": "application/json"},
            )
            assert r.status_code == 413, path
            assert error_of(r)["code"] == "request_too_large"
        assert (await gw.client.get("/v1/keys", headers=gw.auth())).json()["total"] == 0


@sqlite_only
async def test_chunked_body_under_the_limit_streams(database_url: str, tmp_path: Path) -> None:
    config = gateway_config(database_url, tmp_path)
    async with running_gateway(config, extra_routes=[_counting_routes()]) as gw:
        r = await gw.client.post(
            "/v1/test/upload", content=_Chunked([b"a" * 1000] * 50), headers=gw.auth()
        )
        assert r.status_code == 200 and r.json() == {"size": 50_000}


class _Chunked:
    """An async byte stream of unknown length (an iterator, so nothing is left unfinalized
    when the client stops reading it early)."""

    def __init__(self, parts: list[bytes]) -> None:
        self._parts = iter(parts)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._parts)
        except StopIteration:
            raise StopAsyncIteration from None


class _Boom(Exception):
    pass


def _exploding_routes() -> Routes:
    r = Routes()

    @r.operation(Operation("GET", "/v1/test/explode", "raises", "Test", auth=Auth.NONE))
    async def explode(request: Request) -> Response:
        raise _Boom("secret internal detail: password=hunter2")

    @r.operation(
        Operation("POST", "/v1/test/explode-self", "raises", "Test", scope=CHAT_COMPLETIONS)
    )
    async def explode_answering_itself(request: Request) -> None:
        # Inference-style: the handler sends its own response; here it fails first.
        await request.body()
        raise _Boom("secret internal detail: password=hunter2")

    @r.operation(Operation("GET", "/v1/test/explode-late", "raises", "Test", auth=Auth.NONE))
    async def explode_after_start(request: Request) -> None:
        request.started = True
        await request.send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await request.send(
            {"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True}
        )
        raise _Boom("secret internal detail: password=hunter2")

    return r


def _boom_logged(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for rec in caplog.records if rec.exc_info and rec.exc_info[0] is _Boom)


def _assert_generic_500(r: httpx.Response) -> None:
    assert r.status_code == 500
    error = error_of(r)
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    assert "hunter2" not in r.text and "Traceback" not in r.text and "_Boom" not in r.text


@sqlite_only
async def test_unexpected_exception_is_a_generic_500(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = gateway_config(database_url, tmp_path)
    async with running_gateway(config, extra_routes=[_exploding_routes()]) as gw:
        _assert_generic_500(await gw.client.get("/v1/test/explode"))
        assert _boom_logged(caplog) == 1
        _assert_generic_500(
            await gw.client.post("/v1/test/explode-self", json={}, headers=gw.auth())
        )
        assert _boom_logged(caplog) == 2
        # Once the response started, nothing more is sent: the stream just ends.
        with pytest.raises(httpx.RemoteProtocolError):
            async with gw.client.stream("GET", "/v1/test/explode-late") as response:
                assert response.status_code == 200
                async for _ in response.aiter_bytes():
                    pass
        assert _boom_logged(caplog) == 3
        assert (await gw.client.get("/healthz")).status_code == 200


def _through(url: str, port: int) -> str:
    """`url` with its host and port replaced by the forwarder's."""
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


@pytest.mark.skipif(POSTGRES_URL is None, reason="needs GATEWAY_TEST_DATABASE_URL")
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_database_down_is_503_with_retry_after_everywhere(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL only: the outage is real (the connections to the server are reset and new ones
    refused) by cutting a TCP forwarder between the gateway and the server. SQLite is a file
    opened in-process; it has no equivalent outage short of breaking the disk."""
    target = urlsplit(database_url)
    assert target.hostname is not None
    async with forwarding(target.hostname, target.port or 5432) as forwarder:
        url = _through(database_url, forwarder.port)
        async with inference_rig(url, tmp_path, credit_usd=None) as rig:
            gw = rig.gateway
            # A key never used yet: not in the auth cache, so it needs the database.
            fresh = rig.key
            await forwarder.cut()
            caplog.clear()
            body = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
            answers = [
                await gw.client.post("/v1/chat/completions", json=body, headers=gw.auth(fresh)),
                await gw.client.post(
                    "/v1/embeddings", json={"model": "embed", "input": "x"}, headers=gw.auth(fresh)
                ),
                await gw.client.get("/v1/models", headers=gw.auth(fresh)),
                await gw.client.get("/v1/models/sim/sim-small", headers=gw.auth(fresh)),
                await gw.client.get("/v1/keys", headers=gw.auth()),  # cached key: the query fails
            ]
            for r in answers:
                assert r.status_code == 503, (r.request.url, r.text)
                error = error_of(r)
                assert error["code"] == "database_unavailable" and error["type"] == "server_error"
                assert r.headers["retry-after"] == "1"
                assert "postgres" not in r.text.lower()
            assert any(
                rec.levelno == logging.ERROR and "storage unavailable" in rec.getMessage()
                for rec in caplog.records
            )
            await forwarder.restore()  # back up: the gateway recovers without a restart
            with trio.fail_after(20):
                while True:
                    r = await gw.client.get("/v1/models", headers=gw.auth(fresh))
                    if r.status_code == 200:
                        break
                    await trio.sleep(0.1)


def test_the_servers_client_left_is_the_one_the_mapping_answers_with_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One "client left" exception: the server raises it when a write fails (a reset
    mid-stream), the request layer when the body stops; the mapping answers nothing and logs
    nothing, so the request is a 499 `client_disconnected`, not an unhandled error."""
    from gateway.server import connection
    from gateway.web.errors import to_api_error

    assert connection.ClientDisconnected is ClientDisconnected  # what Connection.write raises
    caplog.set_level(logging.DEBUG)
    assert to_api_error(ClientDisconnected(), "POST", "/v1/chat/completions") is None
    group = ExceptionGroup("a handler's nursery", [ClientDisconnected()])
    assert to_api_error(group, "POST", "/v1/chat/completions") is None
    assert caplog.records == []


def test_an_actor_that_did_not_answer_is_a_503_not_a_500(caplog: pytest.LogCaptureFixture) -> None:
    """E.g. the accountant crashed or was given up on while a reservation waited for it."""
    from actors.errors import ActorBroken
    from gateway.web.errors import to_api_error

    error = to_api_error(ActorBroken("the accountant did not answer"), "POST", "/v1/x")
    assert error is not None
    assert (error.status, error.code, error.headers) == (
        503,
        "actor_unavailable",
        {"Retry-After": "1"},
    )
    assert "the accountant" not in error.message  # internals stay in the log
    assert not [r for r in caplog.records if "unhandled" in r.getMessage()]
