"""An upload's commit on every backend: once per `Idempotency-Key` (a retry answers the same
file and stores nothing more), and never a file whose client left before its answer."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from tests.gateway.files.conftest import FilesGateway
from tests.gateway.files.support import PATH, chat_jsonl, usage
from tests.waiting import wait_until


async def _upload(
    fg: FilesGateway, content: bytes, key: str, filename: str = "a.txt"
) -> httpx.Response:
    return await fg.client.post(
        PATH,
        headers={**fg.auth(), "Idempotency-Key": key},
        data={"purpose": "user_data"},
        files={"file": (filename, content)},
    )


async def _listed(fg: FilesGateway) -> list[str]:
    r = await fg.client.get(PATH, headers=fg.auth())
    assert r.status_code == 200, r.text
    return [f["id"] for f in r.json()["data"]]


async def test_a_retry_with_the_same_key_answers_the_same_file(files_gw: FilesGateway) -> None:
    first = await _upload(files_gw, b"hello", "upload-1")
    assert first.status_code == 200, first.text
    assert "idempotent-replayed" not in first.headers
    stored = await usage(files_gw)
    again = await _upload(files_gw, b"hello", "upload-1")
    assert again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert await _listed(files_gw) == [first.json()["id"]]
    assert await usage(files_gw) == stored  # the retry's bytes were not kept

    other = await _upload(files_gw, b"hello", "upload-2")  # another key: another file
    assert other.status_code == 200 and other.json()["id"] != first.json()["id"]


@pytest.mark.parametrize(("content", "filename"), [(b"other bytes", "a.txt"), (b"hello", "b.txt")])
async def test_the_key_with_another_upload_is_a_conflict(
    files_gw: FilesGateway, content: bytes, filename: str
) -> None:
    first = await _upload(files_gw, b"hello", "upload-1")
    assert first.status_code == 200, first.text
    stored = await usage(files_gw)
    r = await _upload(files_gw, content, "upload-1", filename)
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("idempotency_key_reused", "Idempotency-Key")
    assert await _listed(files_gw) == [first.json()["id"]]
    assert await usage(files_gw) == stored


async def test_a_malformed_key_is_refused(files_gw: FilesGateway) -> None:
    r = await _upload(files_gw, b"hello", "k" * 256)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "Idempotency-Key"
    assert await _listed(files_gw) == []


async def test_no_file_is_kept_when_its_client_left_before_the_answer(
    files_gw: FilesGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """The client sends the whole form (the file before its purpose, so the gateway validates
    the stored content before committing) and closes at once, as a client whose timeout fired:
    the commit is undone (no file listed, no quota used)."""
    caplog.set_level(logging.INFO, logger="gateway.files")
    boundary = "b0undary"
    content = chat_jsonl(20_000)
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="t.jsonl"\r\n\r\n'
    ).encode()
    body += content
    body += (
        f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n'
        f"fine-tune\r\n--{boundary}--\r\n"
    ).encode()
    url = urlsplit(files_gw.gw.url)
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {files_gw.gw.management_key}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    stream = await trio.open_tcp_stream(url.hostname or "127.0.0.1", url.port or 80)
    await stream.send_all(head + body)
    await stream.aclose()

    await wait_until(lambda: any("the client left" in r.getMessage() for r in caplog.records))
    assert await _listed(files_gw) == []
    assert await usage(files_gw) == 0
