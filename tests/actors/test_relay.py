"""Stream relays: back-pressure, breakage and cancellation, against a scripted upstream body."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
import trio.lowlevel
import trio.testing

from actors.relay import CHANNEL_CAPACITY, OpenAIFrames, StreamRelays
from protocol.openai_chat import ChunkRelay


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def _frame(i: int) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class EndlessBody:
    """An upstream that would stream forever; counts how often it was read."""

    complete = False  # never ends

    def __init__(self) -> None:
        self.reads = 0

    async def next_chunk(self) -> bytes:
        await trio.lowlevel.checkpoint()
        self.reads += 1
        return _frame(self.reads)


class ScriptedBody:
    def __init__(self, parts: list[bytes | Exception]) -> None:
        self._parts = parts

    @property
    def complete(self) -> bool:
        return False  # its end shows as b"" (or an error), as a close-delimited body does

    async def next_chunk(self) -> bytes:
        await trio.lowlevel.checkpoint()
        if not self._parts:
            return b""
        part = self._parts.pop(0)
        if isinstance(part, Exception):
            raise part
        return part


class FakeClient:
    """Stands where the upstream client does: its stream() yields the scripted body."""

    name = "sim"

    def __init__(self, body: object) -> None:
        self._body = body
        self.api_keys: list[str | None] = []

    @asynccontextmanager
    async def stream(
        self, path: str, body: bytes, *, api_key: str | None = None
    ) -> AsyncIterator[object]:
        self.api_keys.append(api_key)
        yield self._body


def _frames() -> OpenAIFrames:
    return OpenAIFrames(ChunkRelay(model="sim/x", include_usage=False))


async def test_a_client_that_does_not_read_stops_the_upstream_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = StreamRelays()
    body = EndlessBody()
    send, receive = trio.open_memory_channel[bytes](CHANNEL_CAPACITY)
    async with trio.open_nursery() as nursery:
        await nursery.start(relays.relay, FakeClient(body), "p", b"", _frames(), send)
        await trio.sleep(60)
        stalled_at = body.reads
        assert stalled_at <= CHANNEL_CAPACITY + 2  # the channel is full: no more reading
        await trio.sleep(60)
        assert body.reads == stalled_at
        for _ in range(5):  # the client reads a little: the relay reads as much more
            await receive.receive()
        await trio.sleep(1)
        assert body.reads == stalled_at + 5
        assert relays.statistics()["active"] == 1
        nursery.cancel_scope.cancel()
    stats = relays.statistics()
    assert stats["active"] == 0 and stats["cancelled"] == 1 and stats["completed"] == 0


async def test_a_stream_cut_short_ends_with_an_error_frame_then_done() -> None:
    relays = StreamRelays()
    body = ScriptedBody([_frame(0) + _frame(1)])  # then the body ends without a finish
    send, receive = trio.open_memory_channel[bytes](CHANNEL_CAPACITY)
    async with trio.open_nursery() as nursery:
        await nursery.start(relays.relay, FakeClient(body), "p", b"", _frames(), send)
        out = b"".join([item async for item in receive])
    frames = [f for f in out.split(b"\n\n") if f]
    assert frames[-1] == b"data: [DONE]"
    assert json.loads(frames[-2][len(b"data: ") :])["error"]["type"] == "upstream_error"
    assert len(frames) == 4 and relays.statistics()["broken"] == 1


async def test_a_transport_failure_midway_is_reported_in_the_stream() -> None:
    from actors.http1_pool import ConnectionBroken

    relays = StreamRelays()
    body = ScriptedBody([_frame(0), ConnectionBroken("reset")])
    send, receive = trio.open_memory_channel[bytes](CHANNEL_CAPACITY)
    async with trio.open_nursery() as nursery:
        await nursery.start(relays.relay, FakeClient(body), "p", b"", _frames(), send)
        out = b"".join([item async for item in receive])
    assert out.endswith(b"data: [DONE]\n\n") and b'"upstream_error"' in out


async def test_the_org_key_given_to_the_relay_is_used_for_the_upstream_stream() -> None:
    relays = StreamRelays()
    default, byok = FakeClient(ScriptedBody([])), FakeClient(ScriptedBody([]))
    send, receive = trio.open_memory_channel[bytes](CHANNEL_CAPACITY)
    async with trio.open_nursery() as nursery:
        await nursery.start(relays.relay, default, "p", b"", _frames(), send.clone())
        await nursery.start(
            partial(relays.relay, api_key="sk-org-own"), byok, "p", b"", _frames(), send
        )
        async with receive:
            _ = [item async for item in receive]
    assert default.api_keys == [None] and byok.api_keys == ["sk-org-own"]


async def test_a_source_with_its_own_failure_ends_a_broken_stream_its_way() -> None:
    from actors.http1_pool import ConnectionBroken
    from protocol.responses.objects import ResponseObject
    from protocol.responses.stream import ResponseStream

    scripts: list[list[bytes | Exception]] = [
        [_frame(0), ConnectionBroken("reset")],  # the transport breaks
        [_frame(0) + _frame(1)],  # the body ends before its finish
    ]
    for parts in scripts:
        relays = StreamRelays()
        frames = ResponseStream(_frames(), ResponseObject(id="resp_1", created_at=1, model="m"))
        send, receive = trio.open_memory_channel[bytes](CHANNEL_CAPACITY)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                relays.relay, FakeClient(ScriptedBody(parts)), "p", b"", frames, send
            )
            out = b"".join([item async for item in receive])
        events = [f for f in out.split(b"\n\n") if f]
        assert events[-1] == b"data: [DONE]" and out.count(b"[DONE]") == 1
        assert events[-2].startswith(b"event: response.failed\n")
        assert b'"error":{"message"' not in out  # no chat error frame
        assert frames.response.status == "failed" and relays.statistics()["broken"] == 1
