"""The simulated upstream's audio endpoints over real HTTP: speech as a paced byte stream (and
a client leaving it counted), transcriptions in every format, the form recorded."""

from __future__ import annotations

from functools import partial
from typing import Any

import httpx
import pytest
import trio

from bench.upstream import UpstreamServer, serve_upstream
from bench.upstream.audio_routes import audio_duration, parse_form, speech_bytes, wav_header

AUTH = {"authorization": "Bearer k"}


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> UpstreamServer:
    started: UpstreamServer = await nursery.start(serve_upstream)
    return started


def multipart(fields: dict[str, str], data: bytes, name: str = "a.wav") -> dict[str, Any]:
    return {"data": fields, "files": {"file": (name, data, "audio/wav")}}


async def test_speech_streams_paced_bytes_and_counts_a_client_leaving(
    upstream: UpstreamServer,
) -> None:
    async with httpx.AsyncClient(base_url=upstream.url) as client:
        r = await client.post(
            "/v1/audio/speech",
            json={"model": "tts-1", "input": "hello", "voice": "alloy", "response_format": "wav"},
            headers=AUTH,
        )
        assert r.headers["content-type"] == "audio/wav"
        assert r.content == speech_bytes("hello", "wav") and r.content[:4] == b"RIFF"
        assert audio_duration(r.content) == 500 / 32000
    upstream.behavior.chunk_interval_s = 0.5
    host, port = upstream.url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    body = b'{"model":"tts-1","input":"%s","voice":"alloy"}' % (b"x" * 160)
    await stream.send_all(
        b"POST /v1/audio/speech HTTP/1.1\r\nhost: u\r\nauthorization: Bearer k\r\n"
        + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
        + body
    )
    received = b""
    with trio.fail_after(5):
        while len(received) < 1600:
            received += await stream.receive_some()
    assert received.startswith(b"HTTP/1.1 200") and b"content-type: audio/mpeg" in received
    assert upstream.statistics()["streams_active"] == 1
    await stream.aclose()
    with trio.fail_after(2):
        await upstream.wait_streams_idle()
    stats = upstream.statistics()
    assert stats["streams_client_closed"] == 1 and stats["streams_completed"] == 1
    async with httpx.AsyncClient(base_url=upstream.url) as client:
        r2 = await client.post(
            "/v1/audio/speech",
            json={"model": "m", "input": "x", "voice": "v", "response_format": "ogg"},
        )
    assert r2.status_code == 400


async def test_transcriptions_in_every_format_and_the_form_recorded(
    upstream: UpstreamServer,
) -> None:
    audio = wav_header(96000) + bytes(96000)  # 3 s
    async with httpx.AsyncClient(base_url=upstream.url) as client:
        post = partial(client.post, "/v1/audio/transcriptions", headers=AUTH)
        verbose = (
            await post(
                **multipart(
                    {
                        "model": "whisper-1",
                        "response_format": "verbose_json",
                        "timestamp_granularities[]": "word",
                    },
                    audio,
                )
            )
        ).json()
        assert verbose["duration"] == 3.0 and len(verbose["words"]) == 3
        assert verbose["segments"][0]["id"] == 0
        text = await post(**multipart({"model": "whisper-1", "response_format": "text"}, audio))
        assert text.headers["content-type"].startswith("text/plain")
        assert text.text.strip() == verbose["text"]
        plain = await post(**multipart({"model": "whisper-1"}, audio))
        assert plain.json() == {"text": verbose["text"]}
        translated = await client.post(
            "/v1/audio/translations",
            headers=AUTH,
            **multipart(
                {"model": "whisper-1", "response_format": "verbose_json"}, b"\xff" * 32000, "a.mp3"
            ),
        )
        assert translated.json()["task"] == "translate" and translated.json()["duration"] == 2.0
        upstream.behavior.report_audio_duration = False
        bare = await post(
            **multipart({"model": "whisper-1", "response_format": "verbose_json"}, audio)
        )
        assert "duration" not in bare.json()
        missing = await post(data={"model": "whisper-1"}, files={"x": ("a", b"1")})
        assert missing.status_code == 400
        upstream.behavior.fail_status = 503
        assert (await post(**multipart({"model": "whisper-1"}, audio))).status_code == 503
    recorded = upstream.requests[0]
    form = parse_form(recorded.headers["content-type"], recorded.body)
    assert form is not None and form.file == audio and form.filename == "a.wav"
    assert form.value("model") == "whisper-1"
