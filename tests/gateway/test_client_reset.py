"""A client that resets its connection (SO_LINGER 0, then close: an RST, not a FIN) while its
chat completion is running, over real loopback HTTP with the bench upstream: the request is
logged 499, its `completion.error` event says the client closed the request, and nothing is
logged as an unhandled error (the write that met the reset is "client left", not a bug)."""

from __future__ import annotations

import json
import logging
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from storage.events import Event
from tests.inference import Rig, inference_rig, open_raw_stream, send_raw_chat
from tests.waiting import wait_until, wait_until_async

BODY = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path, read_timeout_s=5) as r:
        yield r


async def reset(stream: trio.SocketStream) -> None:
    """Close with SO_LINGER 0: the kernel sends an RST and drops what was unsent."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def completion_errors(rig: Rig) -> list[Event]:
    await rig.gateway.runtime.accountant.flush()
    await rig.gateway.runtime.event_writer.flush()
    stored = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id, limit=100)
    return [e for e in stored if e.type == "completion.error"]


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]
    return [line for line in lines if line["route"] == "/v1/chat/completions"]


def unhandled(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unhandled" in r.getMessage()]


async def assert_one_499(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    async def written() -> bool:
        return bool(await completion_errors(rig))

    await wait_until_async(written)
    await wait_until(lambda: bool(access_lines(caplog)))
    (event,) = await completion_errors(rig)
    assert event.data["status"] == 499
    assert event.data["error"]["code"] == "client_disconnected"
    assert [line["status"] for line in access_lines(caplog)] == [499]
    assert unhandled(caplog) == []


async def test_a_reset_mid_stream_is_a_499_not_an_unhandled_error(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rig.upstream.behavior.chunk_interval_s = 0.02
    rig.upstream.behavior.completion_tokens = 1000
    stream = await open_raw_stream(rig, {**BODY, "stream": True}, frames=3)
    await reset(stream)
    await assert_one_499(rig, caplog)


async def test_a_reset_before_a_json_answer_is_a_499_not_an_unhandled_error(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rig.upstream.behavior.latency_s = 0.3
    stream = await send_raw_chat(rig, BODY)
    await wait_until(lambda: bool(rig.upstream.requests))  # the request is at the upstream
    await reset(stream)
    await assert_one_499(rig, caplog)
