"""`gateway bench files`: upload and download throughput of the Files API through a real gateway
process, against the same bytes written straight to disk, with the gateway's memory.

For each size and purpose (`fine-tune`: generated chat JSONL, validated as it streams;
`user_data`: random bytes, no validation), one upload `POST /v1/files` (multipart, `purpose`
before `file` so the validator runs while the bytes arrive; Content-Length declared), then
`GET /v1/files/{id}/content` (streamed, its size and SHA-256 checked against what was sent),
then `DELETE`. Both bodies are generated or consumed piece by piece on the client too: nothing
holds the file in memory. The gateway's RSS (its whole process tree, from /proc) is sampled
every 50 ms: before the upload, its peak during the upload and during the download, after.
The baseline writes the same bytes to a file in the gateway's data folder and fsyncs it (the
local blob store fsyncs too), then reads it back (mostly from the page cache, as the gateway's
download does).

The gateway is started as `bench suite` starts it (bench/suite.py `stack`: fresh SQLite and data
folder, bootstrap management key, a secret key holding every scope), pinned to one CPU and this
process (the client) to the other. One untimed 1 MB upload per purpose first, so the "before"
RSS excludes one-time imports and caches. Every request is bounded in time.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import trio

from bench.file_pipeline import fine_tune_jsonl
from bench.processes import SuiteError
from bench.transfer import RssGauge, transfer_gateway
from gateway.config.schema import ServerConfig

PURPOSES = ("fine-tune", "user_data")
_LABELS = {  # the `file` part's filename and media type
    "fine-tune": ("bench.jsonl", "application/jsonl"),
    "user_data": ("bench.bin", "application/octet-stream"),
}
PIECE = 64 * 1024  # what the client sends or hashes at a time
_BLOCK = 1_000_000  # the repeated block the content is made of
_BOUNDARY = "gateway-bench-files-boundary"
_WARMUP_BYTES = 1_000_000
_RECEIVE = 1024 * 1024  # bytes asked of the socket per read when downloading
_MAX_HEAD = 64 * 1024
_MIN_RATE = 1_000_000  # bytes/s: below this a transfer is given up (the time bound)
MAX_FILE = ServerConfig().max_file_body_bytes  # the gateway's default file limit (512 MB)


@dataclass(frozen=True)
class FilesOptions:
    sizes_mb: tuple[int, ...] = (100,)
    purposes: tuple[str, ...] = PURPOSES
    rounds: int = 1
    sample_interval_s: float = 0.05
    progress: bool = True


@dataclass
class FilesRow:
    """One upload and download. Rates in MB/s (10^6 bytes), memory in MiB."""

    purpose: str
    bytes: int
    upload_mb_s: float
    upload_tail_ms: float  # last byte sent to response: the blob's fsync and the row's update
    download_mb_s: float
    disk_write_mb_s: float  # the same bytes to a file, then fsync
    disk_read_mb_s: float  # and read back (page cache)
    rss_before_mb: float
    rss_peak_upload_mb: float
    rss_after_upload_mb: float
    rss_peak_download_mb: float
    rss_after_mb: float
    gateway_cpu_upload_pct: float  # the gateway's CPU time / the upload's wall time
    gateway_cpu_download_pct: float
    client_cpu_upload_pct: float  # this process's (the client's)
    client_cpu_download_pct: float
    sha256: str
    download_sha256: str
    downloaded_bytes: int
    samples: int  # RSS samples taken during the upload

    @property
    def hash_ok(self) -> bool:
        return self.downloaded_bytes == self.bytes and self.download_sha256 == self.sha256

    @property
    def gateway_cpu_ms_per_mb_upload(self) -> float:
        """The gateway's CPU per MB uploaded: what its one core allows, however busy the
        machine (1000 / this = its MB/s with a whole core)."""
        return 10 * self.gateway_cpu_upload_pct / self.upload_mb_s

    @property
    def gateway_cpu_ms_per_mb_download(self) -> float:
        return 10 * self.gateway_cpu_download_pct / self.download_mb_s

    @property
    def rss_growth_mb(self) -> float:
        return max(self.rss_peak_upload_mb, self.rss_peak_download_mb) - self.rss_before_mb

    def as_dict(self) -> dict[str, object]:
        return {
            **asdict(self),
            "hash_ok": self.hash_ok,
            "rss_growth_mb": self.rss_growth_mb,
            "gateway_cpu_ms_per_mb_upload": self.gateway_cpu_ms_per_mb_upload,
            "gateway_cpu_ms_per_mb_download": self.gateway_cpu_ms_per_mb_download,
        }


@dataclass(frozen=True)
class Content:
    """A file made of one block repeated (and a prefix of it), handed out in pieces; for JSONL
    the size is rounded down to a whole line."""

    block: bytes
    size: int
    filename: str
    media_type: str

    @classmethod
    def for_purpose(cls, purpose: str, size: int) -> Content:
        if purpose == "fine-tune":
            block = fine_tune_jsonl(_BLOCK)  # ~1 MB of ~1.4 KB lines, ends with a newline
            whole, rest = divmod(size, len(block))
            size = whole * len(block) + block.rfind(b"\n", 0, rest) + 1
            return cls(block, size, *_LABELS[purpose])
        return cls(os.urandom(_BLOCK), size, *_LABELS[purpose])

    def pieces(self, piece: int = PIECE) -> Iterator[bytes]:
        block, offset, left = self.block, 0, self.size
        while left > 0:
            n = min(piece, left, len(block) - offset)
            yield block[offset : offset + n]
            offset = (offset + n) % len(block)
            left -= n


def form_parts(purpose: str, content: Content) -> tuple[bytes, bytes]:
    """The multipart body's head (the `purpose` part, then the `file` part's headers) and tail."""
    head = (
        f"--{_BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="purpose"\r\n\r\n'
        f"{purpose}\r\n"
        f"--{_BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="file"; filename="{content.filename}"\r\n'
        f"Content-Type: {content.media_type}\r\n\r\n"
    ).encode()
    return head, f"\r\n--{_BOUNDARY}--\r\n".encode()


def _mb(kb: int) -> float:
    return kb / 1024


def _rate(size: int, seconds: float) -> float:
    return size / seconds / 1e6 if seconds > 0 else float("inf")


def disk_baseline(content: Content, folder: Path) -> tuple[float, float]:
    """MB/s writing `content` to a new file in `folder` then fsync, and reading it back."""
    path = folder / "baseline.bin"
    began = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for piece in content.pieces():
            view = memoryview(piece)
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    write_s = time.perf_counter() - began
    began = time.perf_counter()
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        while data := fh.read(PIECE):
            digest.update(data)
    read_s = time.perf_counter() - began
    path.unlink()
    return _rate(content.size, write_s), _rate(content.size, read_s)


def _bound(size: int) -> float:
    return 60.0 + size / _MIN_RATE


@dataclass(frozen=True)
class Uploaded:
    file_id: str
    sha256: str  # of the content sent
    seconds: float  # from the request to the response
    tail_s: float  # from the body's last byte to the response: the gateway's commit (fsync)


async def upload(client: httpx.AsyncClient, purpose: str, content: Content) -> Uploaded:
    """Send `content` as a `purpose` file; its id, hash and timings."""
    head, tail = form_parts(purpose, content)
    digest = hashlib.sha256()

    sent: list[float] = []

    async def body() -> AsyncIterator[bytes]:
        yield head
        for piece in content.pieces():
            digest.update(piece)
            yield piece
        yield tail
        sent.append(time.perf_counter())  # the last byte is handed to the socket

    headers = {
        "Content-Type": f"multipart/form-data; boundary={_BOUNDARY}",
        "Content-Length": str(len(head) + content.size + len(tail)),
    }
    began = time.perf_counter()
    with trio.fail_after(_bound(content.size)):
        response = await client.post("/v1/files", content=body(), headers=headers)
    answered = time.perf_counter()
    if response.status_code != 200:
        raise SuiteError(f"POST /v1/files: {response.status_code} {response.text[:300]}")
    tail_s = answered - sent[0] if sent else 0.0
    return Uploaded(str(response.json()["id"]), digest.hexdigest(), answered - began, tail_s)


async def download(client: httpx.AsyncClient, file_id: str, size: int) -> tuple[int, str, float]:
    """(bytes received, their SHA-256, seconds from request to last byte).

    On its own connection, read straight off the socket in 1 MiB reads: through httpx the
    client's CPU, not the gateway, capped the rate (about 400 MB/s on this machine)."""
    url = client.base_url
    host, port = url.host, url.port or 80
    request = (
        f"GET /v1/files/{file_id}/content HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        f"Authorization: {client.headers['authorization']}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("latin-1")
    digest = hashlib.sha256()
    began = time.perf_counter()
    with trio.fail_after(_bound(size)):
        async with await trio.open_tcp_stream(host, port) as stream:
            await stream.send_all(request)
            status, length, body = await _response_head(stream)
            if status != 200:
                raise SuiteError(f"GET /v1/files/{file_id}/content: {status} {body[:300]!r}")
            digest.update(body)
            received = len(body)
            while received < length:
                data = await stream.receive_some(_RECEIVE)
                if not data:
                    break  # a short body: `received` says so
                digest.update(data)
                received += len(data)
    return received, digest.hexdigest(), time.perf_counter() - began


async def _response_head(stream: trio.SocketStream) -> tuple[int, int, bytes]:
    """(status, Content-Length, the body bytes that came with the head)."""
    buffer = bytearray()
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        data = await stream.receive_some(_RECEIVE)
        if not data or len(buffer) > _MAX_HEAD:
            raise SuiteError("GET content: no complete response head")
        buffer += data
    lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
    fields = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
    headers = {name.strip().lower(): value.strip() for name, value in fields.items()}
    length = headers.get("content-length", "")
    if not length.isdigit():
        raise SuiteError(f"GET content: no Content-Length in {lines[0]!r}")
    return int(lines[0].split()[1]), int(length), bytes(buffer[end + 4 :])


async def delete(client: httpx.AsyncClient, file_id: str) -> None:
    with trio.fail_after(60):
        response = await client.delete(f"/v1/files/{file_id}")
    if response.status_code != 200:
        raise SuiteError(f"DELETE /v1/files/{file_id}: {response.status_code}")


async def measure_one(
    client: httpx.AsyncClient, gauge: RssGauge, purpose: str, size: int, folder: Path
) -> FilesRow:
    content = Content.for_purpose(purpose, size)
    write_mb_s, read_mb_s = await trio.to_thread.run_sync(disk_baseline, content, folder)
    before = await gauge.settled_kb()
    gauge.reset()
    cpu = (gauge.cpu_s(), time.process_time())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gauge.run)
        sent = await upload(client, purpose, content)
        nursery.cancel_scope.cancel()
    file_id, up_s = sent.file_id, sent.seconds
    cpu_up = (gauge.cpu_s() - cpu[0], time.process_time() - cpu[1])
    peak_up, samples = gauge.peak_kb, gauge.samples
    after_up = await gauge.settled_kb()
    gauge.reset()
    cpu = (gauge.cpu_s(), time.process_time())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gauge.run)
        received, down_sha, down_s = await download(client, file_id, content.size)
        nursery.cancel_scope.cancel()
    cpu_down = (gauge.cpu_s() - cpu[0], time.process_time() - cpu[1])
    peak_down = gauge.peak_kb
    await delete(client, file_id)
    after = await gauge.settled_kb()
    return FilesRow(
        purpose=purpose,
        bytes=content.size,
        upload_mb_s=_rate(content.size, up_s),
        upload_tail_ms=sent.tail_s * 1000,
        download_mb_s=_rate(content.size, down_s),
        disk_write_mb_s=write_mb_s,
        disk_read_mb_s=read_mb_s,
        rss_before_mb=_mb(before),
        rss_peak_upload_mb=_mb(peak_up),
        rss_after_upload_mb=_mb(after_up),
        rss_peak_download_mb=_mb(peak_down),
        rss_after_mb=_mb(after),
        gateway_cpu_upload_pct=100 * cpu_up[0] / up_s,
        gateway_cpu_download_pct=100 * cpu_down[0] / down_s,
        client_cpu_upload_pct=100 * cpu_up[1] / up_s,
        client_cpu_download_pct=100 * cpu_down[1] / down_s,
        sha256=sent.sha256,
        download_sha256=down_sha,
        downloaded_bytes=received,
        samples=samples,
    )


async def _warm_up(client: httpx.AsyncClient, purposes: tuple[str, ...]) -> None:
    for purpose in purposes:
        sent = await upload(client, purpose, Content.for_purpose(purpose, _WARMUP_BYTES))
        await download(client, sent.file_id, _WARMUP_BYTES)
        await delete(client, sent.file_id)


def _say(options: FilesOptions, text: str) -> None:
    if options.progress:
        print(f"bench files: {text}", file=sys.stderr, flush=True)


def planned_sizes(options: FilesOptions, purpose: str) -> list[int]:
    """Bytes per upload: `sizes_mb` MB each, at most the file limit (the form around the file
    may add to it: the route's body limit leaves room)."""
    return [min(mb * 1_000_000, MAX_FILE) for mb in options.sizes_mb]


async def run_files(options: FilesOptions) -> list[FilesRow]:
    """Start a gateway, measure every size x purpose x round, stop it; the rows."""
    rows: list[FilesRow] = []
    async with transfer_gateway("files", options.sample_interval_s) as gw:
        await _warm_up(gw.client, options.purposes)
        for _ in range(options.rounds):
            for purpose in options.purposes:
                for size in planned_sizes(options, purpose):
                    _say(options, f"{purpose} {size / 1e6:.0f} MB")
                    rows.append(await measure_one(gw.client, gw.gauge, purpose, size, gw.workdir))
    return rows


_COLUMNS = (
    ("purpose", 10),
    ("MB", 6),
    ("upload MB/s", 12),
    ("commit ms", 10),
    ("download MB/s", 14),
    ("disk write+fsync MB/s", 22),
    ("disk read MB/s", 15),
    ("RSS before/peak up/peak down/after MiB", 40),
    ("CPU% gw up/down", 16),
    ("client", 8),
    ("sha256", 7),
)


def table(rows: list[FilesRow]) -> str:
    out = io.StringIO()
    out.write(" ".join(f"{name:>{width}}" for name, width in _COLUMNS).rstrip() + "\n")
    for row in rows:
        rss = (
            f"{row.rss_before_mb:.1f}/{row.rss_peak_upload_mb:.1f}/"
            f"{row.rss_peak_download_mb:.1f}/{row.rss_after_mb:.1f}"
        )
        cells = (
            row.purpose,
            f"{row.bytes / 1e6:.1f}",
            f"{row.upload_mb_s:.0f}",
            f"{row.upload_tail_ms:.0f}",
            f"{row.download_mb_s:.0f}",
            f"{row.disk_write_mb_s:.0f}",
            f"{row.disk_read_mb_s:.0f}",
            rss,
            f"{row.gateway_cpu_upload_pct:.0f}/{row.gateway_cpu_download_pct:.0f}",
            f"{row.client_cpu_upload_pct:.0f}/{row.client_cpu_download_pct:.0f}",
            "ok" if row.hash_ok else "MISMATCH",
        )
        out.write(" ".join(f"{c:>{w}}" for c, (_, w) in zip(cells, _COLUMNS, strict=True)) + "\n")
    for row in rows:
        out.write(
            f"{row.purpose} {row.bytes / 1e6:.0f} MB: upload {row.upload_mb_s:.0f} MB/s"
            f" ({row.upload_mb_s / row.disk_write_mb_s:.2f}x straight to disk), download"
            f" {row.download_mb_s:.0f} MB/s; gateway CPU"
            f" {row.gateway_cpu_ms_per_mb_upload:.1f} ms/MB up,"
            f" {row.gateway_cpu_ms_per_mb_download:.1f} down; gateway RSS grew"
            f" {row.rss_growth_mb:+.1f} MiB at peak, {row.rss_after_mb - row.rss_before_mb:+.1f}"
            " MiB after\n"
        )
    return out.getvalue()


def report_json(rows: list[FilesRow], options: FilesOptions) -> dict[str, object]:
    return {
        "scenario": "files",
        "sizes_mb": list(options.sizes_mb),
        "purposes": list(options.purposes),
        "rounds": options.rounds,
        "rss_sample_interval_s": options.sample_interval_s,
        "rows": [row.as_dict() for row in rows],
    }
