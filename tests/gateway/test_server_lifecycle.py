"""Graceful stop: SIGTERM during a slow streaming response lets it finish, then the server
stops; new connections are refused once draining starts. Runs in-process (signals are
delivered to this process), with a streaming route of the test's own."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from msgspec.structs import replace

from gateway.server.serve import Served, run_until_signalled
from gateway.web import Auth, Operation, Request, Routes, StreamResponse
from tests.harness import gateway_config

CHUNKS = 8
INTERVAL = 0.1


def _slow_stream_routes() -> Routes:
    r = Routes()

    @r.operation(Operation("GET", "/v1/test/slow-stream", "streams slowly", "Test", auth=Auth.NONE))
    async def slow_stream(request: Request) -> StreamResponse:
        async def body() -> AsyncIterator[bytes]:
            for i in range(CHUNKS):
                yield f"data: {i}\n\n".encode()
                await trio.sleep(INTERVAL)
            yield b"data: [DONE]\n\n"

        return StreamResponse(body(), content_type=b"text/event-stream")

    return r


@pytest.mark.parametrize("backend", ["sqlite"])  # about signals, not storage
async def test_sigterm_lets_a_slow_stream_finish_then_stops(
    database_url: str, tmp_path: Path
) -> None:
    config = gateway_config(database_url, tmp_path)
    config = replace(config, server=replace(config.server, graceful_timeout_s=10.0))
    received: list[str] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            served: Served = await nursery.start(
                partial(run_until_signalled, config, extra_routes=[_slow_stream_routes()])
            )
            url = served.urls[0]
            async with httpx.AsyncClient(base_url=url) as client:
                async with client.stream("GET", "/v1/test/slow-stream") as response:
                    assert response.status_code == 200
                    async for line in response.aiter_lines():
                        if not line:
                            continue
                        received.append(line)
                        if len(received) == 1:
                            os.kill(os.getpid(), signal.SIGTERM)
                            await trio.sleep(INTERVAL / 2)
                            # Draining: no new connections are accepted.
                            with pytest.raises(httpx.ConnectError):
                                async with httpx.AsyncClient(base_url=url) as fresh:
                                    await fresh.get("/healthz")
            # run_until_signalled returns by itself once drained: the nursery exits.
    assert received == [f"data: {i}" for i in range(CHUNKS)] + ["data: [DONE]"]


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_stream_longer_than_the_grace_period_is_cut(
    database_url: str, tmp_path: Path
) -> None:
    config = gateway_config(database_url, tmp_path)
    config = replace(config, server=replace(config.server, graceful_timeout_s=INTERVAL * 2))
    received: list[str] = []
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        served: Served = await nursery.start(
            partial(run_until_signalled, config, extra_routes=[_slow_stream_routes()])
        )
        async with httpx.AsyncClient(base_url=served.urls[0]) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                async with client.stream("GET", "/v1/test/slow-stream") as response:
                    async for line in response.aiter_lines():
                        if line:
                            received.append(line)
                            if len(received) == 1:
                                os.kill(os.getpid(), signal.SIGTERM)
    assert 1 <= len(received) < CHUNKS
    assert trio.current_time() - started < CHUNKS * INTERVAL
