"""Helpers for tests/gateway/files/test_files_hostile.py: multipart bodies built byte by byte
(so they can be wrong in exactly one way), raw-socket uploads that stream a generated body
until the gateway answers, and the checks every hostile test ends with: the error is a 4xx in
the OpenAI shape, nothing is stored (no row, no blob, no quota held) and the gateway still
serves an ordinary upload."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import trio

from tests.gateway.files.conftest import FilesGateway
from tests.gateway.rawhttp import Raw
from tests.waiting import wait_until_async

MiB = 1024 * 1024
BOUNDARY = b"hostile-b0undary-Zq8"
CLEAN_TIMEOUT_S = 15.0  # how long the server may take to clean up after a request ended
ANSWER_TIMEOUT_S = 60.0  # how long a raw upload may take to be answered

# -- multipart bodies ---------------------------------------------------------------------


def part(disposition: bytes, body: bytes = b"", headers: bytes = b"") -> bytes:
    """One part without its delimiter: `Content-Disposition: <disposition>`, any extra header
    lines (each ending in CRLF), the blank line, the body."""
    return b"content-disposition: " + disposition + b"\r\n" + headers + b"\r\n" + body


def field(name: str, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return part(b'form-data; name="%s"' % name.encode(), data)


def file_field(data: bytes, filename: bytes = b"data.bin", name: bytes = b"file") -> bytes:
    return part(
        b'form-data; name="%s"; filename="%s"' % (name, filename),
        data,
        b"content-type: application/octet-stream\r\n",
    )


def delimiter(boundary: bytes = BOUNDARY) -> bytes:
    return b"--" + boundary + b"\r\n"


def closing(boundary: bytes = BOUNDARY) -> bytes:
    return b"\r\n--" + boundary + b"--\r\n"


def form(*parts: bytes, boundary: bytes = BOUNDARY) -> bytes:
    """A complete body of `parts` (each from `part`)."""
    return b"".join(b"--" + boundary + b"\r\n" + p + b"\r\n" for p in parts) + (
        b"--" + boundary + b"--\r\n"
    )


def file_head(filename: bytes = b"data.bin", name: bytes = b"file") -> bytes:
    """The delimiter and headers of a file part, up to where its data starts."""
    return delimiter() + file_field(b"", filename, name)


def content_type(boundary: bytes = BOUNDARY) -> str:
    return "multipart/form-data; boundary=" + boundary.decode("latin-1")


# -- error and state checks ---------------------------------------------------------------


def assert_error(
    status: int | None,
    body: bytes,
    expected: int,
    code: str | None,
    *,
    param: str | None | object = ...,
) -> dict[str, Any]:
    """The answer is `expected` with an OpenAI-shaped error of `code` (and `param`, when
    given); never a 5xx. Returns the error object."""
    assert status is not None, "the gateway closed the connection without answering"
    assert status < 500, (status, body)
    assert status == expected, (status, body)
    document = json.loads(body)
    assert set(document) == {"error"}, document
    error = document["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert error["type"] == "invalid_request_error", error
    assert error["code"] == code, error
    if param is not ...:
        assert error["param"] == param, error
    return dict(error)


async def listed(fg: FilesGateway) -> list[dict[str, Any]]:
    response = await fg.client.get("/v1/files", headers=fg.auth())
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def usage(fg: FilesGateway) -> int:
    return await fg.gw.runtime.storage.files.usage(fg.gw.org_id)


async def wait_clean(fg: FilesGateway) -> None:
    """Until the store holds nothing (temporaries and unfinished multipart uploads included)
    and the org's quota usage is back to 0; then no file is listed. The request may have been
    answered (or the client may have left) before the server finished cleaning up, so this
    polls, bounded."""
    await wait_until(lambda: _clean(fg))
    assert await listed(fg) == []


async def _clean(fg: FilesGateway) -> bool:
    return not await fg.stored() and await usage(fg) == 0


async def wait_until(predicate: Callable[[], Awaitable[bool]]) -> None:
    """Poll an async predicate (the database, the blob store) until it holds, bounded."""
    await wait_until_async(predicate, CLEAN_TIMEOUT_S)


async def assert_serves(fg: FilesGateway, *, clean: bool = True) -> None:
    """An ordinary upload, download and delete still work, and (`clean`) leave nothing
    behind."""
    response = await fg.client.post(
        "/v1/files",
        headers=fg.auth(),
        files={"file": ("ok.jsonl", b'{"a": 1}\n')},
        data={"purpose": "user_data"},
    )
    assert response.status_code == 200, response.text
    file_id = response.json()["id"]
    content = await fg.client.get(f"/v1/files/{file_id}/content", headers=fg.auth())
    assert (content.status_code, content.content) == (200, b'{"a": 1}\n')
    deleted = await fg.client.delete(f"/v1/files/{file_id}", headers=fg.auth())
    assert deleted.status_code == 200, deleted.text
    if clean:
        await wait_clean(fg)


async def assert_refused_and_clean(
    fg: FilesGateway,
    status: int | None,
    body: bytes,
    expected: int,
    code: str | None,
    *,
    param: str | None | object = ...,
) -> dict[str, Any]:
    """`assert_error`, then nothing stored, then the gateway still serves."""
    error = assert_error(status, body, expected, code, param=param)
    await wait_clean(fg)
    await assert_serves(fg)
    return error


async def post(fg: FilesGateway, body: bytes, ctype: str | None = None) -> tuple[int, bytes]:
    """POST /v1/files with `body` as it is (Content-Length framed)."""
    headers = {**fg.auth()}
    if ctype is not None:
        headers["content-type"] = ctype
    response = await fg.client.post("/v1/files", headers=headers, content=body)
    return response.status_code, response.content


# -- raw-socket uploads -------------------------------------------------------------------


def request_head(fg: FilesGateway, *, length: int | None, ctype: str | None = None) -> bytes:
    """The head of POST /v1/files: Content-Length `length`, or chunked when None."""
    framing = b"transfer-encoding: chunked" if length is None else b"content-length: %d" % length
    return (
        b"POST /v1/files HTTP/1.1\r\nhost: t\r\n"
        + b"authorization: Bearer "
        + fg.gw.management_key.encode()
        + b"\r\ncontent-type: "
        + (ctype or content_type()).encode()
        + b"\r\n"
        + framing
        + b"\r\n\r\n"
    )


def chunk(data: bytes) -> bytes:
    """One piece of a chunked body (the last one, b"", ends it)."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n"


def filler(total: int, block: bytes) -> Iterable[bytes]:
    """`total` bytes as copies of `block` (the last one cut), made as they are sent."""
    for _ in range(total // len(block)):
        yield block
    if total % len(block):
        yield block[: total % len(block)]


@dataclass
class Answer:
    status: int | None
    head: bytes
    body: bytes
    sent: int  # body bytes the client had sent when the answer came (framing not counted)
    closed: bool  # the server closed the connection after the answer


async def upload_until_answered(
    fg: FilesGateway,
    pieces: Iterable[bytes],
    *,
    length: int | None = None,
    ctype: str | None = None,
) -> Answer:
    """Send the head, then `pieces` (chunked when `length` is None, else as they are, under
    that Content-Length) until the gateway answers; stop sending at its answer. The answer
    must come within `ANSWER_TIMEOUT_S`."""
    raw = await Raw.connect(fg.gw.url)
    sent = 0
    answered = trio.Event()

    async def send() -> None:
        nonlocal sent
        try:
            await raw.stream.send_all(request_head(fg, length=length, ctype=ctype))
            for piece in pieces:
                if answered.is_set():
                    return
                await raw.stream.send_all(chunk(piece) if length is None else piece)
                sent += len(piece)
            if length is None:
                await raw.stream.send_all(chunk(b""))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the server answered and closed; the answer is read below

    try:
        with trio.fail_after(ANSWER_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                status, head, body = await raw.response()
                answered.set()
                at_answer = sent
                nursery.cancel_scope.cancel()
            closed = await raw.closed()
    finally:
        await raw.aclose()
    return Answer(status, head, body, at_answer, closed)


async def stalled_upload(fg: FilesGateway, first: bytes) -> Raw:
    """A chunked upload that has sent `first` and then nothing more (the caller finishes it,
    or closes the connection)."""
    raw = await Raw.connect(fg.gw.url)
    await raw.stream.send_all(request_head(fg, length=None) + chunk(first))
    return raw
