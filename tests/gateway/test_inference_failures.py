"""Upstream failures and client disconnects on the inference path."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.gateway.keys_client import error_of
from tests.inference import Rig, chunks, inference_rig, open_raw_stream, sse_frames
from tests.waiting import wait_until

MESSAGES = [{"role": "user", "content": "hi"}]
STREAM = {"model": "small", "messages": MESSAGES, "stream": True}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path, read_timeout_s=0.5) as r:
        yield r


async def test_unknown_model_is_404_before_any_upstream_call(rig: Rig) -> None:
    for model in ("nope", "sim", "nosuchprovider/x"):
        r = await rig.chat({"model": model, "messages": MESSAGES})
        assert r.status_code == 404
        error = error_of(r)
        assert error["code"] == "model_not_found" and error["param"] == "model"
    assert rig.upstream.requests == []


async def test_model_without_a_price_is_400(rig: Rig) -> None:
    r = await rig.chat({"model": "sim/unpriced", "messages": MESSAGES})
    assert r.status_code == 400 and error_of(r)["code"] == "model_price_unknown"
    assert rig.upstream.requests == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": MESSAGES}, "model"),
        ({"model": "small"}, "messages"),
        ({"model": "small", "messages": []}, "messages"),
        ({"model": 3, "messages": MESSAGES}, "model"),
    ],
)
async def test_invalid_chat_body_is_400(rig: Rig, body: dict[str, object], param: str) -> None:
    r = await rig.chat(body)
    assert r.status_code == 400 and error_of(r)["param"] == param


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_429_keeps_retry_after(rig: Rig, stream: bool) -> None:
    rig.upstream.behavior.fail_status = 429
    rig.upstream.behavior.retry_after = "7"
    r = await rig.chat({"model": "small", "messages": MESSAGES, "stream": stream})
    assert r.status_code == 429
    assert r.headers["retry-after"] == "7"
    assert error_of(r)["code"] == "upstream_rate_limited"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [500, 503])
async def test_upstream_5xx_is_502(rig: Rig, stream: bool, status: int) -> None:
    rig.upstream.behavior.fail_status = status
    r = await rig.chat({"model": "small", "messages": MESSAGES, "stream": stream})
    assert r.status_code == 502 and error_of(r)["type"] == "upstream_error"


async def test_upstream_silence_is_504(rig: Rig) -> None:
    rig.upstream.behavior.hang = True
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert r.status_code == 504 and error_of(r)["code"] == "upstream_timeout"


@pytest.mark.parametrize("stream", [False, True])
async def test_unreachable_upstream_is_502(rig: Rig, stream: bool) -> None:
    r = await rig.chat({"model": "gone", "messages": MESSAGES, "stream": stream})
    assert r.status_code == 502 and error_of(r)["code"] == "upstream_unavailable"


async def test_stream_broken_midway_ends_with_error_then_done(rig: Rig) -> None:
    rig.upstream.behavior.break_after_chunks = 3
    with trio.fail_after(10):
        r = await rig.chat(STREAM)
    assert r.status_code == 200
    frames = sse_frames(r.text)
    assert frames[-1] == "[DONE]"
    error = json.loads(frames[-2])["error"]
    assert error["type"] == "upstream_error"
    content = [c for c in chunks(r.text)[:-1] if c["choices"][0]["delta"].get("content")]
    assert len(content) == 3


async def test_upstream_silence_midstream_ends_the_stream(rig: Rig) -> None:
    rig.upstream.behavior.keepalive_gap_s = 5.0  # longer than the 0.5 s read timeout
    with trio.fail_after(10):
        r = await rig.chat(STREAM)
    frames = sse_frames(r.text)
    assert frames[-1] == "[DONE]"
    assert json.loads(frames[-2])["error"]["code"] == "upstream_timeout"


async def test_keepalive_comment_during_upstream_silence(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(database_url, tmp_path, keepalive_s=0.05) as rig:
        rig.upstream.behavior.keepalive_gap_s = 0.3
        r = await rig.chat({**STREAM, "max_tokens": 3})
        assert ": keepalive\n\n" in r.text
        assert sse_frames(r.text)[-1] == "[DONE]"


async def test_client_disconnect_closes_the_upstream_and_logs_499(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="gateway.access")
    rig.upstream.behavior.chunk_interval_s = 0.05
    rig.upstream.behavior.completion_tokens = 1000
    gw = rig.gateway
    stream = await open_raw_stream(rig, STREAM, frames=3)
    await stream.aclose()
    with trio.fail_after(10):
        await rig.upstream.wait_streams_idle()
    assert rig.upstream.statistics()["streams_client_closed"] == 1

    def logged() -> list[dict[str, object]]:
        return [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]

    await wait_until(lambda: any(e["route"] == "/v1/chat/completions" for e in logged()))
    entry = next(e for e in logged() if e["route"] == "/v1/chat/completions")
    assert entry["status"] == 499
    assert isinstance(entry["completion_tokens"], int) and entry["completion_tokens"] >= 2
    assert entry["cost_usd"] is not None and entry["cost_usd"] > 0
    relays = gw.runtime.relays.statistics()
    assert relays["active"] == 0 and relays["cancelled"] == 1
