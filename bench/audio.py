"""`gateway bench audio`: transcription uploads of a large WAV file through a real gateway
process to the simulated upstream, with the gateway's memory: the upload is relayed as it
arrives (gateway/audio/transcription.py), so the gateway's RSS should stay flat whatever the
file's size.

Each round sends one `POST /v1/audio/transcriptions` (multipart: `model` then `file`, or with
`--file-first` the file then `model` as OpenAI's curl example orders them, which the gateway
holds in memory up to 1 MiB and past it in an encrypted temporary file until `model` arrives;
Content-Length declared, the body generated piece by piece by the client) and times it to the
response; the gateway's RSS (its process tree, from /proc) is sampled every 50 ms: settled
before, peak during, settled after. The gateway runs as `bench suite` starts it
(bench/suite.py `stack`, billing on), with an audio model added; one untimed 1 MB upload
first, so "before" excludes one-time imports and caches.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass

import httpx
import trio

from bench.processes import SuiteError
from bench.transfer import RssGauge, transfer_gateway
from bench.upstream.audio_routes import wav_header

AUDIO_TOML = """
[[models]]
id = "bench-whisper"
provider = "sim"
upstream = "whisper-1"
usd_per_minute = 0.006
"""
PIECE = 64 * 1024
_BOUNDARY = "gateway-bench-audio-boundary"


@dataclass(frozen=True)
class AudioOptions:
    size_mb: int = 24
    rounds: int = 3
    sample_interval_s: float = 0.05
    progress: bool = True
    file_first: bool = False  # the file part before `model` (held by the gateway)


@dataclass
class AudioRow:
    """One upload. Rates in MB/s (10^6 bytes), memory in MiB."""

    bytes: int
    seconds: float
    mb_s: float
    rss_before_mb: float
    rss_peak_mb: float
    rss_after_mb: float
    samples: int

    @property
    def rss_growth_mb(self) -> float:
        return self.rss_peak_mb - self.rss_before_mb

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "rss_growth_mb": self.rss_growth_mb}


def form(size: int, file_first: bool = False) -> tuple[bytes, bytes, bytes]:
    """The form's head (the fields before the file, and the file part's headers), the file's
    first piece (a WAV header; the rest is zeros) and the tail (the fields after it)."""
    fields = (
        f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\nbench-whisper\r\n'
        f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="response_format"\r\n\r\n'
        "text\r\n"
    )
    file_head = (
        f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="bench.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    )
    head = file_head if file_first else fields + file_head
    tail = "\r\n" + (fields if file_first else "") + f"--{_BOUNDARY}--\r\n"
    return head.encode(), wav_header(size - 44), tail.encode()


async def upload(client: httpx.AsyncClient, size: int, file_first: bool = False) -> float:
    """Seconds for one transcription of a `size`-byte WAV file."""
    head, first, tail = form(size, file_first)
    zeros = bytes(PIECE)

    async def body() -> AsyncIterator[bytes]:
        yield head + first
        left = size - len(first)
        while left > 0:
            yield zeros[: min(PIECE, left)]
            left -= PIECE
        yield tail

    headers = {
        "Content-Type": f"multipart/form-data; boundary={_BOUNDARY}",
        "Content-Length": str(len(head) + size + len(tail)),
    }
    began = time.perf_counter()
    with trio.fail_after(120):
        response = await client.post("/v1/audio/transcriptions", content=body(), headers=headers)
    seconds = time.perf_counter() - began
    if response.status_code != 200:
        raise SuiteError(f"POST /v1/audio/transcriptions: {response.status_code} {response.text}")
    return seconds


async def measure_one(
    client: httpx.AsyncClient, gauge: RssGauge, size: int, file_first: bool
) -> AudioRow:
    before = await gauge.settled_kb()
    gauge.reset()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gauge.run)
        seconds = await upload(client, size, file_first)
        nursery.cancel_scope.cancel()
    peak, samples = gauge.peak_kb, gauge.samples
    after = await gauge.settled_kb()
    return AudioRow(
        bytes=size,
        seconds=seconds,
        mb_s=size / seconds / 1e6,
        rss_before_mb=before / 1024,
        rss_peak_mb=peak / 1024,
        rss_after_mb=after / 1024,
        samples=samples,
    )


async def run_audio(options: AudioOptions) -> list[AudioRow]:
    rows: list[AudioRow] = []
    async with transfer_gateway("audio", options.sample_interval_s, extra_toml=AUDIO_TOML) as gw:
        await upload(gw.client, 1_000_000, options.file_first)  # warm-up
        for n in range(options.rounds):
            size = options.size_mb * 1_000_000
            row = await measure_one(gw.client, gw.gauge, size, options.file_first)
            if options.progress:
                print(f"bench audio: round {n + 1}: {row.mb_s:.0f} MB/s", file=sys.stderr)
            rows.append(row)
    return rows


def table(rows: list[AudioRow]) -> str:
    out = io.StringIO()
    out.write("    MB   seconds   MB/s   RSS before/peak/after MiB   growth MiB\n")
    for row in rows:
        rss = f"{row.rss_before_mb:.1f}/{row.rss_peak_mb:.1f}/{row.rss_after_mb:.1f}"
        out.write(
            f"{row.bytes / 1e6:6.1f} {row.seconds:9.3f} {row.mb_s:6.0f}   {rss:>25}"
            f"   {row.rss_growth_mb:10.1f}\n"
        )
    return out.getvalue()


def report_json(rows: list[AudioRow], options: AudioOptions) -> dict[str, object]:
    return {
        "scenario": "audio",
        "file_first": options.file_first,
        "size_mb": options.size_mb,
        "rounds": options.rounds,
        "rss_sample_interval_s": options.sample_interval_s,
        "rows": [row.as_dict() for row in rows],
    }
