"""The Files API over real HTTP, on SQLite and PostgreSQL × the local store and S3 (SeaweedFS):
upload, list, retrieve, download and delete with the API's fields; validation per purpose (the
purpose before or after the file); who may call (401, 403 without `files`, 404 across orgs);
the content encrypted at rest and refused when tampered with; the quota; vision expiry."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from actors.files_janitor import FilesJanitor
from gateway.files.area import FilesArea
from protocol import blobcrypt
from protocol.credentials import CredentialKind
from tests.gateway.files.conftest import FilesGateway, files_gateway
from tests.gateway.files.support import (
    BOUNDARY,
    PATH,
    batch_jsonl,
    chat_jsonl,
    chunked_form,
    content_of,
    png,
    upload,
    uploaded,
    usage,
)
from tests.gateway.keys_client import create_key, error_of
from tests.gateway.test_secrets_at_rest import _all_cells

FILE_FIELDS = {
    "id",
    "object",
    "bytes",
    "filename",
    "purpose",
    "created_at",
    "status",
    "status_details",
}


@pytest.mark.parametrize(
    "size", [0, 1, blobcrypt.CHUNK_SIZE - 1, blobcrypt.CHUNK_SIZE, 3 * 1024 * 1024 + 17]
)
async def test_a_file_round_trips_byte_identical(files_gw: FilesGateway, size: int) -> None:
    content = os.urandom(size)
    body = await uploaded(files_gw, content, filename="blob.bin")
    assert set(body) == FILE_FIELDS
    assert body["id"].startswith("file_")
    assert (body["object"], body["bytes"], body["filename"]) == ("file", size, "blob.bin")
    assert (body["purpose"], body["status"], body["status_details"]) == (
        "user_data",
        "processed",
        None,
    )
    assert abs(body["created_at"] - time.time()) < 60  # Unix seconds
    r = await content_of(files_gw, body["id"])
    assert r.status_code == 200
    assert hashlib.sha256(r.content).digest() == hashlib.sha256(content).digest()
    assert r.headers["content-length"] == str(size)
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["x-content-type-options"] == "nosniff"
    retrieved = await files_gw.client.get(f"{PATH}/{body['id']}", headers=files_gw.auth())
    assert retrieved.json() == body


async def test_download_has_the_stored_media_type_and_a_safe_disposition(
    files_gw: FilesGateway,
) -> None:
    # sent raw: httpx would percent-encode the quote and the line break (as browsers do)
    head = f"--{BOUNDARY}\r\nContent-Disposition: form-data; name="
    form = (
        (
            f'{head}"purpose"\r\n\r\nfine-tune\r\n{head}"file"; filename="tr\\"ain\t\x7f.jsonl"\r\n'
            "\r\n"
        ).encode()
        + chat_jsonl(3)
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    r = await files_gw.client.post(
        PATH,
        headers={**files_gw.auth(), "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
        content=form,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["filename"] == 'tr"ain.jsonl'  # control characters dropped from the label
    r = await content_of(files_gw, body["id"])
    assert r.headers["content-type"] == "application/jsonl"
    assert r.headers["content-disposition"] == (
        "attachment; filename=\"tr_ain.jsonl\"; filename*=UTF-8''tr%22ain.jsonl"
    )
    image = await uploaded(files_gw, png(), purpose="vision", filename="x.bin")
    r = await content_of(files_gw, image["id"])
    assert r.headers["content-type"] == "image/png"  # proved by the content, not the name


@pytest.mark.parametrize(
    ("filename", "disposition"),
    [
        ("../../etc/passwd", 'attachment; filename="passwd"'),
        ("/srv/shared/report.txt", 'attachment; filename="report.txt"'),
        ("notes/ä ü.txt", "attachment; filename=\"_ _.txt\"; filename*=UTF-8''%C3%A4%20%C3%BC.txt"),
    ],
)
async def test_a_download_is_named_by_the_base_name_only(
    files_gw: FilesGateway, filename: str, disposition: str
) -> None:
    """Issue #19 item 12: the label keeps what the client sent; the download's name does not
    carry a path a client could save outside its directory (RFC 6266)."""
    body = await uploaded(files_gw, b"x\n", filename=filename)
    assert body["filename"] == filename
    r = await content_of(files_gw, body["id"])
    assert r.status_code == 200
    assert r.headers["content-disposition"] == disposition


async def test_the_same_content_twice_gives_two_files(files_gw: FilesGateway) -> None:
    first = await uploaded(files_gw, b"same")
    second = await uploaded(files_gw, b"same")
    assert first["id"] != second["id"]
    assert await usage(files_gw) == 8


@pytest.mark.parametrize(
    ("purpose", "content"),
    [
        ("fine-tune", chat_jsonl(20)),
        ("batch", batch_jsonl(20)),
        ("vision", png(64, 32)),
        ("assistants", b"\x00\xffanything"),
        ("user_data", b"anything"),
    ],
)
async def test_every_purpose_accepts_valid_content(
    files_gw: FilesGateway, purpose: str, content: bytes
) -> None:
    body = await uploaded(files_gw, content, purpose=purpose)
    assert (body["purpose"], body["bytes"]) == (purpose, len(content))
    assert (await content_of(files_gw, body["id"])).content == content


@pytest.mark.parametrize(
    ("purpose", "content", "code", "fragment"),
    [
        (
            "fine-tune",
            chat_jsonl(2) + b'{"messages": "no"}\n' + chat_jsonl(50),
            "invalid_jsonl",
            "line 3",
        ),
        ("fine-tune", chat_jsonl(1) + b"not json\n", "invalid_jsonl", "line 2"),
        ("batch", batch_jsonl(4) + b'{"custom_id": "x"}\n', "invalid_jsonl", "line 5"),
        ("vision", b"GIF89a" + b"\x00" * 100, "unsupported_image_format", ""),
        ("vision", png()[:30], "invalid_image", ""),
    ],
)
@pytest.mark.parametrize("purpose_first", [True, False])
async def test_invalid_content_is_refused_and_nothing_is_kept(
    files_gw: FilesGateway,
    purpose: str,
    content: bytes,
    code: str,
    fragment: str,
    purpose_first: bool,
) -> None:
    purpose_part = ("purpose", (None, purpose.encode()))
    file_part = ("file", ("upload.jsonl", content))
    parts = [purpose_part, file_part] if purpose_first else [file_part, purpose_part]
    r = await files_gw.client.post(PATH, headers=files_gw.auth(), files=parts)
    assert r.status_code == 400, r.text
    error = error_of(r)
    assert (error["code"], error["param"], error["type"]) == (code, "file", "invalid_request_error")
    assert fragment in error["message"]
    assert await files_gw.stored() == {}
    assert await usage(files_gw) == 0
    listed = await files_gw.client.get(PATH, headers=files_gw.auth())
    assert listed.json()["data"] == []


async def test_the_purpose_may_come_after_the_file(files_gw: FilesGateway) -> None:
    content = chat_jsonl(5)
    r = await files_gw.client.post(
        PATH,
        headers=files_gw.auth(),
        files=[("file", ("t.jsonl", content)), ("purpose", (None, b"fine-tune"))],
    )
    assert r.status_code == 200, r.text
    assert r.json()["purpose"] == "fine-tune"
    assert (await content_of(files_gw, r.json()["id"])).content == content


async def test_list_filters_orders_and_pages(files_gw: FilesGateway) -> None:
    ids = []
    for i in range(5):
        purpose = "batch" if i % 2 else "user_data"
        content = batch_jsonl(1) if purpose == "batch" else b"x"
        ids.append((await uploaded(files_gw, content, purpose=purpose))["id"])
    auth = files_gw.auth()

    async def listing(**params: Any) -> dict[str, Any]:
        r = await files_gw.client.get(PATH, headers=auth, params=params)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        assert set(body) == {"object", "data", "first_id", "last_id", "has_more"}
        assert body["object"] == "list"
        return body

    everything = await listing()
    assert [f["id"] for f in everything["data"]] == ids[::-1]  # default: newest first
    assert (everything["first_id"], everything["last_id"]) == (ids[4], ids[0])
    assert everything["has_more"] is False
    page = await listing(limit=2, order="asc")
    assert [f["id"] for f in page["data"]] == ids[:2] and page["has_more"] is True
    page = await listing(limit=2, order="asc", after=page["last_id"])
    assert [f["id"] for f in page["data"]] == ids[2:4]
    page = await listing(limit=2, order="desc", after=ids[3])
    assert [f["id"] for f in page["data"]] == [ids[2], ids[1]]
    batches = await listing(purpose="batch")
    assert [f["id"] for f in batches["data"]] == [ids[3], ids[1]]
    empty = await listing(purpose="vision")
    assert empty == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }
    for params, param in [
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"order": "sideways"}, "order"),
        ({"purpose": "bogus"}, "purpose"),
    ]:
        r = await files_gw.client.get(PATH, headers=auth, params=params)
        assert r.status_code == 400, params
        assert error_of(r)["param"] == param
    assert len((await listing(limit=10_000))["data"]) == 5


async def test_delete_frees_the_bytes_and_the_file_is_gone_everywhere(
    files_gw: FilesGateway,
) -> None:
    body = await uploaded(files_gw, b"to be deleted")
    r = await files_gw.client.delete(f"{PATH}/{body['id']}", headers=files_gw.auth())
    assert r.status_code == 200
    assert r.json() == {"id": body["id"], "object": "file", "deleted": True}
    assert await usage(files_gw) == 0
    assert await files_gw.stored() == {}
    for method, path in [
        ("GET", f"{PATH}/{body['id']}"),
        ("GET", f"{PATH}/{body['id']}/content"),
        ("DELETE", f"{PATH}/{body['id']}"),
    ]:
        r = await files_gw.client.request(method, path, headers=files_gw.auth())
        assert r.status_code == 404
        assert error_of(r)["code"] == "file_not_found"


async def test_who_may_call(files_gw: FilesGateway) -> None:
    body = await uploaded(files_gw, b"mine")
    routes = [
        ("GET", PATH),
        ("GET", f"{PATH}/{body['id']}"),
        ("GET", f"{PATH}/{body['id']}/content"),
        ("DELETE", f"{PATH}/{body['id']}"),
    ]
    for method, path in routes:
        r = await files_gw.client.request(method, path)
        assert r.status_code == 401, path
        error_of(r)
    r = await files_gw.client.post(PATH, files={"file": ("a", b"x")}, data={"purpose": "batch"})
    assert r.status_code == 401
    other_scope = await create_key(files_gw.gw, name="chat only", scopes=["chat:completions"])
    for method, path in routes:
        r = await files_gw.client.request(method, path, headers=files_gw.auth(other_scope["key"]))
        assert r.status_code == 403, path
    r = await upload(files_gw, b"x", key=other_scope["key"])
    assert r.status_code == 403
    holder = await create_key(files_gw.gw, name="files", scopes=["files"])
    assert (await content_of(files_gw, body["id"], holder["key"])).content == b"mine"
    mine_too = await uploaded(files_gw, b"by the secret key", key=holder["key"])
    assert mine_too["bytes"] == 17


async def test_another_organizations_file_is_not_found(
    store_kind: str, database_url: str, tmp_path: Path, s3_server: Any
) -> None:
    async with files_gateway(store_kind, database_url, tmp_path / "data", s3_server) as fg:
        body = await uploaded(fg, b"acme's")
        other = await fg.gw.runtime.storage.orgs.create("other")
        credential = fg.gw.runtime.hasher.generate(CredentialKind.MANAGEMENT)
        await fg.gw.runtime.storage.orgs.add_management_key(other.id, credential)
        for method, path in [
            ("GET", f"{PATH}/{body['id']}"),
            ("GET", f"{PATH}/{body['id']}/content"),
            ("DELETE", f"{PATH}/{body['id']}"),
        ]:
            r = await fg.client.request(method, path, headers=fg.auth(credential.value))
            assert r.status_code == 404
            assert error_of(r)["code"] == "file_not_found"
        listed = await fg.client.get(PATH, headers=fg.auth(credential.value))
        assert listed.json()["data"] == []
        assert (await content_of(fg, body["id"])).content == b"acme's"


async def test_no_plaintext_at_rest(files_gw: FilesGateway) -> None:
    marker = b"PLAINTEXT-MARKER-" + os.urandom(8).hex().encode()
    content = (marker + b"\n") * 5000
    body = await uploaded(files_gw, content, purpose="assistants", filename="secret.txt")
    assert (await content_of(files_gw, body["id"])).content == content
    stored = await files_gw.stored()
    assert len(stored) == 1
    (blob,) = stored.values()
    assert len(blob) == blobcrypt.ciphertext_size(len(content))
    assert marker not in blob
    for path in files_gw.data_dir.rglob("*"):  # the database files, WAL, blobs, temporaries
        if path.is_file():
            assert marker not in path.read_bytes(), path
    cells = await _all_cells(files_gw.gw.runtime.storage.db)
    assert not any(marker.decode() in cell for cell in cells)


async def _tamper(fg: FilesGateway, file_id: str, change: Any) -> None:
    record = await fg.gw.runtime.storage.files.get(fg.gw.org_id, file_id, now=0)
    assert record is not None
    blobs = fg.gw.runtime.area(FilesArea).store.blobs
    async with await blobs.read(record.blob_key) as reader:
        blob = b"".join([chunk async for chunk in reader])
    async with await blobs.open_writer(record.blob_key) as writer:
        await writer.write(change(blob))
        await writer.commit()


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:],  # a bit flipped in the first chunk
        lambda b: b[:-1] + bytes([b[-1] ^ 0x80]),  # ... in the final chunk's tag
        lambda b: b[: len(b) // 2],  # truncated
        lambda b: b + b"extra",  # extended
    ],
    ids=["flip-first", "flip-last", "truncated", "extended"],
)
async def test_a_tampered_blob_is_refused_not_served(files_gw: FilesGateway, change: Any) -> None:
    content = os.urandom(200_000)  # four chunks: all checked before the answer starts
    body = await uploaded(files_gw, content)
    await _tamper(files_gw, body["id"], change)
    r = await content_of(files_gw, body["id"])
    assert r.status_code == 500
    error = error_of(r)
    assert (error["code"], error["type"]) == ("file_corrupt", "server_error")


async def test_tampering_found_after_the_first_chunk_cuts_the_download_short(
    files_gw: FilesGateway,
) -> None:
    content = os.urandom(3 * 1024 * 1024)
    body = await uploaded(files_gw, content)
    # a bit flipped in the last chunk: the first ones authenticate and are sent
    await _tamper(files_gw, body["id"], lambda b: b[:-100] + bytes([b[-100] ^ 1]) + b[-99:])
    received = bytearray()
    with pytest.raises(httpx.RemoteProtocolError):
        async with files_gw.client.stream(
            "GET", f"{PATH}/{body['id']}/content", headers=files_gw.auth()
        ) as r:
            assert r.status_code == 200
            async for chunk in r.aiter_raw():
                received += chunk
    assert len(received) < len(content)
    assert bytes(received) == content[: len(received)]  # only authenticated bytes were sent
    # and the server goes on serving
    assert (await files_gw.client.get(PATH, headers=files_gw.auth())).status_code == 200


async def test_swapped_blobs_do_not_open(files_gw: FilesGateway) -> None:
    first = await uploaded(files_gw, b"a" * 1000)
    second = await uploaded(files_gw, b"b" * 1000)
    repo = files_gw.gw.runtime.storage.files
    one = await repo.get(files_gw.gw.org_id, first["id"], now=0)
    two = await repo.get(files_gw.gw.org_id, second["id"], now=0)
    assert one is not None and two is not None
    blobs = files_gw.gw.runtime.area(FilesArea).store.blobs
    async with await blobs.read(two.blob_key) as reader:
        other_blob = b"".join([chunk async for chunk in reader])
    await _tamper(files_gw, first["id"], lambda _: other_blob)
    r = await content_of(files_gw, first["id"])
    assert r.status_code == 500
    assert error_of(r)["code"] == "file_corrupt"


async def test_the_quota_refuses_with_403_and_frees_on_delete(
    store_kind: str, database_url: str, tmp_path: Path, s3_server: Any
) -> None:
    async with files_gateway(
        store_kind, database_url, tmp_path / "data", s3_server, quota=100_000
    ) as fg:
        first = await uploaded(fg, os.urandom(60_000))
        r = await upload(fg, os.urandom(60_000))
        assert r.status_code == 403
        error = error_of(r)
        assert (error["code"], error["type"]) == ("quota_exceeded", "invalid_request_error")
        assert await usage(fg) == 60_000
        assert len(await fg.stored()) == 1
        second = await uploaded(fg, os.urandom(40_000))  # exactly the rest fits
        assert await usage(fg) == 100_000
        await fg.client.delete(f"{PATH}/{first['id']}", headers=fg.auth())
        assert await usage(fg) == 40_000
        await uploaded(fg, os.urandom(60_000))
        assert second["bytes"] == 40_000


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_concurrent_uploads_cannot_pass_the_quota(
    store_kind: str, database_url: str, tmp_path: Path, s3_server: Any, declared: bool
) -> None:
    quota = 250_000
    async with files_gateway(
        store_kind, database_url, tmp_path / "data", s3_server, quota=quota
    ) as fg:
        statuses: list[int] = []

        async def one() -> None:
            pieces = [os.urandom(10_000) for _ in range(10)]
            if declared:  # the whole length is reserved first
                r = await upload(fg, b"".join(pieces))
            else:  # the reservation grows as the bytes stream in
                r = await fg.client.post(
                    PATH,
                    headers={
                        **fg.auth(),
                        "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
                    },
                    content=chunked_form("user_data", pieces),
                )
            statuses.append(r.status_code)

        async with trio.open_nursery() as nursery:
            for _ in range(6):  # 6 × 100 kB against 250 kB
                nursery.start_soon(one)
        assert set(statuses) <= {200, 403}
        stored = statuses.count(200)
        if declared:
            assert stored == 2  # two full reservations fit; the others cannot complete
        else:
            # Near the quota, growing reservations take what room is left: interleaved
            # uploads may all run out (docs/decisions.md, "Files"), but never pass it.
            assert stored <= 2
        assert await usage(fg) == 100_000 * stored
        listed = (await fg.client.get(PATH, headers=fg.auth())).json()["data"]
        assert len(listed) == stored
        assert len(await fg.stored()) == stored


async def test_vision_files_expire_after_24_hours(files_gw: FilesGateway) -> None:
    runtime = files_gw.gw.runtime
    image = await uploaded(files_gw, png(), purpose="vision")
    kept = await uploaded(files_gw, b"kept", purpose="user_data")
    record = await runtime.storage.files.get(files_gw.gw.org_id, image["id"], now=0)
    assert record is not None and record.expires_at is not None
    assert record.expires_at - record.created_at == 24 * 3600 * 1_000_000
    # a day passes: the file is gone for the API at once, before the janitor runs
    await runtime.storage.db.execute(
        "UPDATE files SET expires_at = created_at WHERE id = :id", {"id": image["id"]}
    )
    for path in (f"{PATH}/{image['id']}", f"{PATH}/{image['id']}/content"):
        assert (await files_gw.client.get(path, headers=files_gw.auth())).status_code == 404
    janitor = FilesJanitor(runtime.storage.files, runtime.area(FilesArea).store.blobs)
    await janitor.sweep_once()
    assert janitor.expired == 1
    assert await usage(files_gw) == 4
    assert len(await files_gw.stored()) == 1
    assert (await content_of(files_gw, kept["id"])).content == b"kept"
