"""Helpers for the Files API tests: uploads, listings, and content that validates per purpose."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import trio
from PIL import Image

from tests.gateway.files.conftest import FilesGateway

PATH = "/v1/files"


async def upload(
    fg: FilesGateway,
    content: bytes,
    purpose: str = "user_data",
    filename: str = "data.txt",
    key: str | None = None,
) -> Any:
    return await fg.client.post(
        PATH,
        headers=fg.auth(key),
        data={"purpose": purpose},
        files={"file": (filename, content)},
    )


async def uploaded(fg: FilesGateway, content: bytes, **kwargs: Any) -> dict[str, Any]:
    r = await upload(fg, content, **kwargs)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def content_of(fg: FilesGateway, file_id: str, key: str | None = None) -> Any:
    return await fg.client.get(f"{PATH}/{file_id}/content", headers=fg.auth(key))


def chat_jsonl(lines: int) -> bytes:
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    return b"".join(json.dumps(row).encode() + b"\n" for _ in range(lines))


def batch_jsonl(lines: int) -> bytes:
    return b"".join(
        json.dumps(
            {
                "custom_id": f"r{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            }
        ).encode()
        + b"\n"
        for i in range(lines)
    )


def png(width: int = 8, height: int = 8) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(out, format="PNG")
    return out.getvalue()


BOUNDARY = "gw-test-boundary"


async def chunked_form(purpose: str, pieces: list[bytes]) -> AsyncIterator[bytes]:
    """A files form sent piece by piece (so without Content-Length: chunked), boundary
    `BOUNDARY`, the purpose first."""
    head = f"--{BOUNDARY}\r\nContent-Disposition: form-data; name="
    yield f'{head}"purpose"\r\n\r\n{purpose}\r\n'.encode()
    yield f'{head}"file"; filename="f.bin"\r\n\r\n'.encode()
    for piece in pieces:
        yield piece
        await trio.lowlevel.checkpoint()
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


async def usage(fg: FilesGateway) -> int:
    return await fg.gw.runtime.storage.files.usage(fg.gw.org_id)
