"""A 512 MiB multipart upload over real loopback sockets to a served gateway: the built-in
HTTP/1.1 server, the request layer's file body limit and `request.multipart()`, to a test-only
route that streams the file part through: the bytes and their hash arrive intact, and the
process's memory does not grow with the upload.

The client runs on a worker thread with a blocking socket, so the upload is generated lazily
and concurrently with the server (hashlib and socket writes release the GIL)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from gateway.errors import ClientDisconnected
from gateway.files.form import FORM_OVERHEAD_BYTES
from gateway.web import Operation, Request, Response, Routes, json_response
from gateway.web.multipart import Form
from gateway.web.spool import SpooledFile
from tests.harness import Gateway, gateway_config, running_gateway
from tests.waiting import wait_until

MiB = 1024 * 1024
UPLOAD_BYTES = 512 * MiB
ROUTE_LIMIT = UPLOAD_BYTES + MiB  # the file plus room for the form around it
BOUNDARY = b"----upload-b0undary-7MA4YWxkTrZu0gW"
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])  # about HTTP, not storage


def _upload_routes(forms: list[Form], spools: list[SpooledFile], left: trio.Event) -> Routes:
    """A test-only upload route in the gateway's own request layer: the route's file body
    limit, `request.multipart()`, the file part counted and hashed as it arrives (or spooled,
    on /spool)."""
    r = Routes()

    async def read_form(request: Request, spool: bool) -> dict[str, Any]:
        result: dict[str, Any] = {}
        try:
            async with request.multipart() as form:
                forms.append(form)
                async for part in form:
                    if part.filename is None:
                        result[part.name] = await part.text()
                    elif spool:
                        spools.append(await part.spool())
                    else:
                        digest = hashlib.sha256()
                        size = 0
                        async for data in part:
                            digest.update(data)
                            size += len(data)
                        result[part.name] = {"filename": part.filename, "size": size}
                        result["sha256"] = digest.hexdigest()
        except ClientDisconnected:
            left.set()
            raise
        return result

    for path, spool in (("/v1/test/upload", False), ("/v1/test/spool", True)):

        async def upload(request: Request, spool: bool = spool) -> Response:
            return json_response(await read_form(request, spool))

        r.operation(
            Operation(
                "POST",
                path,
                "test-only: a streamed multipart upload",
                "Test",
                request_content_type="multipart/form-data",
                response=dict[str, Any],
                body_limit="file",
            )
        )(upload)
    return r


@asynccontextmanager
async def _gateway(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Gateway, tuple[str, int], list[Form], list[SpooledFile], trio.Event]]:
    forms: list[Form] = []
    spools: list[SpooledFile] = []
    left = trio.Event()
    config = gateway_config(
        database_url, tmp_path, toml=f"[server]\nmax_file_body_bytes = {ROUTE_LIMIT}\n"
    )
    async with running_gateway(config, extra_routes=[_upload_routes(forms, spools, left)]) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        yield gw, (host, int(port)), forms, spools, left


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class RSSSampler(threading.Thread):
    """The peak VmRSS, sampled every 10 ms on its own thread until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.baseline = _rss_bytes()
        self.peak = self.baseline
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.01):
            self.peak = max(self.peak, _rss_bytes())


def _read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head, body


def _upload(address: tuple[str, int], key: str, block: bytes) -> tuple[bytes, bytes, str]:
    """POST the form with a chunked body made as it is sent: one field, then a file of
    UPLOAD_BYTES (numbered copies of `block`). Blocking: run on a worker thread."""
    digest = hashlib.sha256()
    with socket.create_connection(address) as sock:
        sock.sendall(
            b"POST /v1/test/upload HTTP/1.1\r\nhost: test\r\ntransfer-encoding: chunked\r\n"
            b"authorization: Bearer " + key.encode() + b"\r\n"
            b"content-type: multipart/form-data; boundary=" + BOUNDARY + b"\r\n\r\n"
        )

        def chunk(data: bytes) -> None:
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))

        chunk(
            b"--" + BOUNDARY + b'\r\ncontent-disposition: form-data; name="purpose"\r\n\r\n'
            b"batch\r\n--" + BOUNDARY + b'\r\ncontent-disposition: form-data; name="file"; '
            b'filename="big.jsonl"\r\ncontent-type: application/octet-stream\r\n\r\n'
        )
        for i in range(UPLOAD_BYTES // len(block)):
            data = i.to_bytes(8, "big") + block[8:]
            digest.update(data)
            chunk(data)
        chunk(b"\r\n--" + BOUNDARY + b"--\r\n")
        sock.sendall(b"0\r\n\r\n")
        head, body = _read_response(sock)
    return head, body, digest.hexdigest()


@sqlite_only
async def test_512_mb_upload_streams_through_in_bounded_memory(
    database_url: str, tmp_path: Path
) -> None:
    block = os.urandom(MiB)
    async with _gateway(database_url, tmp_path) as (gw, address, _, _, _):
        sampler = RSSSampler()
        sampler.start()
        started = time.perf_counter()
        head, body, client_sha = await trio.to_thread.run_sync(
            _upload, address, gw.management_key, block
        )
        elapsed = time.perf_counter() - started
        sampler.stopped.set()
        sampler.join()
    assert head.startswith(b"HTTP/1.1 200"), body
    result = json.loads(body)
    assert result == {
        "purpose": "batch",
        "file": {"filename": "big.jsonl", "size": UPLOAD_BYTES},
        "sha256": client_sha,
    }
    growth = sampler.peak - sampler.baseline
    print(
        f"\n512 MiB multipart upload: {elapsed:.2f} s, {UPLOAD_BYTES / MiB / elapsed:.0f} MiB/s, "
        f"RSS growth {growth / MiB:.1f} MiB (baseline {sampler.baseline / MiB:.0f} MiB)"
    )
    assert growth < 50 * MiB


def _declare_too_much(address: tuple[str, int], key: str) -> bytes:
    with socket.create_connection(address) as sock:
        sock.sendall(
            b"POST /v1/test/upload HTTP/1.1\r\nhost: test\r\ncontent-length: %d\r\n"
            b"authorization: Bearer %s\r\n"
            b"content-type: multipart/form-data; boundary=%s\r\n\r\n"
            % (ROUTE_LIMIT + FORM_OVERHEAD_BYTES + 1, key.encode(), BOUNDARY)
        )
        sock.sendall(b"x" * 65536)  # the start of a body that is never read
        head, _ = _read_response(sock)
    return head


@sqlite_only
async def test_a_declared_length_over_the_limit_is_answered_413_unread(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path) as (gw, address, forms, _, _):
        head = await trio.to_thread.run_sync(_declare_too_much, address, gw.management_key)
    assert head.startswith(b"HTTP/1.1 413")
    assert b"connection: close" in head.lower()
    assert forms == []  # the handler never got to the body


def _leave_mid_upload(address: tuple[str, int], key: str) -> None:
    with socket.create_connection(address) as sock:
        sock.sendall(
            b"POST /v1/test/spool HTTP/1.1\r\nhost: test\r\ncontent-length: %d\r\n"
            b"authorization: Bearer %s\r\n"
            b"content-type: multipart/form-data; boundary=%s\r\n\r\n--%s\r\n"
            b'content-disposition: form-data; name="file"; filename="f.bin"\r\n\r\n'
            % (100 * MiB, key.encode(), BOUNDARY, BOUNDARY)
        )
        for _ in range(8):
            sock.sendall(os.urandom(MiB))


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@sqlite_only
async def test_a_client_leaving_mid_upload_leaves_no_spooled_file(
    database_url: str, tmp_path: Path
) -> None:
    async with _gateway(database_url, tmp_path) as (gw, address, forms, spools, left):
        fds = _open_fds()
        await trio.to_thread.run_sync(_leave_mid_upload, address, gw.management_key)
        with trio.fail_after(10):
            await left.wait()
        assert spools == []  # the spool never finished...
        [form] = forms  # ...but it had gone to disk, and leaving the form closed it
        assert form.statistics().body_bytes > 2 * MiB
        assert (form.statistics().spools, form.statistics().open_spools) == (1, 0)
        # The server answers the cut body (400) and closes its socket just after the handler
        # saw the client leave; then no descriptor (the spool's temporary file) stays open.
        await wait_until(lambda: _open_fds() <= fds)
