"""Every error is answered in the OpenAI shape with a request id: unknown routes, 405,
oversized bodies (declared and chunked), and unexpected exceptions (no trace to the client)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from quart import Blueprint

from gateway.routing import Operation, Routes
from tests.gateway.keys_client import error_of
from tests.harness import Gateway, gateway_config, running_gateway


async def test_unknown_route_is_404(gateway: Gateway) -> None:
    r = await gateway.client.get("/v1/unknown/thing", headers=gateway.auth())
    assert r.status_code == 404
    error = error_of(r)
    assert error["code"] == "unknown_url" and "/v1/unknown/thing" in error["message"]


async def test_wrong_method_is_405(gateway: Gateway) -> None:
    r = await gateway.client.put("/v1/keys", headers=gateway.auth())
    assert r.status_code == 405
    assert error_of(r)["code"] == "method_not_allowed"
    assert "GET" in r.headers["allow"] and "POST" in r.headers["allow"]


async def test_oversized_body_is_413(database_url: str, tmp_path: Path) -> None:
    config = gateway_config(database_url, tmp_path)
    limit = config.server.max_request_body_bytes
    async with running_gateway(config) as gw:
        big = b'{"name": "' + b"x" * (limit + 10) + b'"}'
        r = await gw.client.post("/v1/keys", content=big, headers=gw.auth())
        assert r.status_code == 413
        assert error_of(r)["code"] == "request_too_large"

        parts = [b'{"name": "', *([b"y" * 65536] * (limit // 65536 + 2)), b'"}']
        r = await gw.client.post(
            "/v1/keys",
            content=_Chunked(parts),  # no Content-Length: Transfer-Encoding: chunked
            headers={**gw.auth(), "Content-Type": "application/json"},
        )
        assert r.status_code == 413
        assert error_of(r)["code"] == "request_too_large"
        assert (await gw.client.get("/v1/keys", headers=gw.auth())).json()["total"] == 0


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
    r = Routes(Blueprint("explode", __name__))

    @r.operation(Operation("GET", "/v1/test/explode", "raises", "Test", auth=None))
    async def explode() -> str:
        raise _Boom("secret internal detail: password=hunter2")

    return r


async def test_unexpected_exception_is_a_generic_500(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = gateway_config(database_url, tmp_path)
    async with running_gateway(config, extra_routes=[_exploding_routes()]) as gw:
        r = await gw.client.get("/v1/test/explode")
    assert r.status_code == 500
    error = error_of(r)
    assert error["type"] == "server_error"
    assert "hunter2" not in r.text and "Traceback" not in r.text and "_Boom" not in r.text
    assert any(rec.exc_info and rec.exc_info[0] is _Boom for rec in caplog.records)
