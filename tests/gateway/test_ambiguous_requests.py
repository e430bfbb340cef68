"""Requests another reader could take differently than the gateway does, over raw sockets on
both HTTP servers: a header the gateway reads given twice (which copy did a proxy in front act
on?), a multipart Content-Type with two boundaries, a part naming itself twice. Each is 400 and
the connection still serves the next request (docs/api.md, "Paths, query strings and
headers")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.gateway.rawhttp import Raw, get
from tests.harness import Gateway, gateway_config, running_gateway

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])  # about HTTP, not storage


@pytest.fixture(params=["builtin", "hypercorn"])
async def gw(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> AsyncIterator[Gateway]:
    config = gateway_config(
        database_url, tmp_path, toml=f'[server]\nhttp_server = "{request.param}"\n'
    )
    async with running_gateway(config) as gateway:
        yield gateway


async def exchange(gw: Gateway, data: bytes) -> tuple[int, dict[str, Any]]:
    """Send `data`, read the answer, then check the same connection serves another request."""
    raw = await Raw.connect(gw.url)
    try:
        await raw.stream.send_all(data)
        with trio.fail_after(10):
            status, head, body = await raw.response()
            assert status is not None
            await raw.stream.send_all(get("/healthz"))
            assert (await raw.response())[0] == 200
    finally:
        await raw.aclose()
    return status, json.loads(body) if b"application/json" in head else {}


def _error(answer: dict[str, Any]) -> dict[str, Any]:
    error = answer["error"]
    assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}
    return error


def _request(method: bytes, path: bytes, headers: list[bytes], body: bytes = b"") -> bytes:
    lines = [method + b" " + path + b" HTTP/1.1", b"host: t", *headers]
    if body:
        lines.append(b"content-length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def test_two_authorization_headers_are_400(gw: Gateway) -> None:
    key = b"authorization: Bearer " + gw.management_key.encode()
    for headers in (
        [key, b"authorization: Bearer service_mgmt_someoneelse0000000000"],
        [b"authorization: Bearer service_mgmt_someoneelse0000000000", key],
        [key, key],
        [key, b"Authorization: Basic eDp5"],
    ):
        status, answer = await exchange(gw, _request(b"GET", b"/v1/keys", headers))
        error = _error(answer)
        assert (status, error["code"]) == (400, "duplicate_header"), (headers, answer)
        assert "Authorization" in error["message"]
    status, _ = await exchange(gw, _request(b"GET", b"/v1/keys", [key]))
    assert status == 200


async def test_two_idempotency_keys_on_a_top_up_are_400(gw: Gateway) -> None:
    auth = b"authorization: Bearer " + gw.management_key.encode()
    body = b'{"amount_usd": 20}'
    headers = [
        auth,
        b"content-type: application/json",
        b"idempotency-key: a",
        b"idempotency-key: b",
    ]
    status, answer = await exchange(gw, _request(b"POST", b"/v1/credits/topup", headers, body))
    assert (status, _error(answer)["code"]) == (400, "duplicate_header")
    r = await gw.client.get("/v1/credits/transactions", headers=gw.auth())
    assert [t for t in r.json()["data"] if t["type"] == "topup"] == []


def _form(boundary: bytes, purpose_header: bytes = b'name="purpose"') -> bytes:
    return (
        b"--" + boundary + b"\r\nContent-Disposition: form-data; " + purpose_header + b"\r\n\r\n"
        b"user_data\r\n--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; '
        b'filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--' + boundary + b"--\r\n"
    )


async def _files(gw: Gateway) -> list[str]:
    r = await gw.client.get("/v1/files", headers=gw.auth())
    return [f["id"] for f in r.json()["data"]]


async def test_a_multipart_content_type_with_two_boundaries_is_400(gw: Gateway) -> None:
    auth = b"authorization: Bearer " + gw.management_key.encode()
    for content_type, framed_by in (
        (b"multipart/form-data; boundary=AAAA; boundary=BBBB", b"BBBB"),  # last wins today
        (b"multipart/form-data; boundary=AAAA; boundary=BBBB", b"AAAA"),
        (b"multipart/form-data; boundary=AAAA; BOUNDARY=BBBB", b"BBBB"),
        (b'multipart/form-data; boundary="AAAA"; boundary=AAAA', b"AAAA"),
        (b"multipart/form-data; boundary=AAAA; boundary*=utf-8''BBBB", b"AAAA"),
    ):
        headers = [auth, b"content-type: " + content_type]
        status, answer = await exchange(
            gw, _request(b"POST", b"/v1/files", headers, _form(framed_by))
        )
        error = _error(answer)
        assert (status, error["code"]) == (400, "invalid_multipart"), (content_type, answer)
        assert "boundary" in error["message"]
    assert await _files(gw) == []
    # One boundary (and other parameters) is fine.
    headers = [auth, b"content-type: multipart/form-data; charset=utf-8; boundary=AAAA"]
    status, answer = await exchange(gw, _request(b"POST", b"/v1/files", headers, _form(b"AAAA")))
    assert status == 200, answer


async def test_two_content_type_headers_are_400(gw: Gateway) -> None:
    auth = b"authorization: Bearer " + gw.management_key.encode()
    headers = [
        auth,
        b"content-type: multipart/form-data; boundary=AAAA",
        b"content-type: multipart/form-data; boundary=BBBB",
    ]
    status, answer = await exchange(gw, _request(b"POST", b"/v1/files", headers, _form(b"AAAA")))
    assert (status, _error(answer)["code"]) == (400, "duplicate_header")
    assert await _files(gw) == []


async def test_a_part_naming_itself_twice_is_400(gw: Gateway) -> None:
    auth = b"authorization: Bearer " + gw.management_key.encode()
    headers = [auth, b"content-type: multipart/form-data; boundary=AAAA"]
    for disposition in (b'name="purpose"; name="file"', b'name="file"; name="purpose"'):
        body = _form(b"AAAA", disposition)
        status, answer = await exchange(gw, _request(b"POST", b"/v1/files", headers, body))
        assert (status, _error(answer)["code"]) == (400, "invalid_multipart"), answer
    assert await _files(gw) == []
