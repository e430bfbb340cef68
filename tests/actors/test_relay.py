"""Stream relays: back-pressure, breakage, cancellation and supervision (one temporary child
per live stream under `stream-relays`), against a scripted upstream body."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.lowlevel
import trio.testing

from actors.relay import CHANNEL_CAPACITY, OpenAIFrames, StreamRelays
from actors.supervisor import ActorSnapshot
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


@asynccontextmanager
async def running(relays: StreamRelays) -> AsyncIterator[trio.Nursery]:
    """The relays' supervisor running, as the runtime runs it."""
    async with trio.open_nursery() as nursery:
        await nursery.start(relays.supervisor.run)
        yield nursery
        nursery.cancel_scope.cancel()


async def relayed(relays: StreamRelays, client: object, frames: object) -> bytes:
    async with relays.open(client, "p", b"", frames) as receive:  # type: ignore[arg-type]
        return b"".join([item async for item in receive])


def relay_nodes(relays: StreamRelays) -> list[ActorSnapshot]:
    return list(relays.supervisor.snapshot().children)


async def test_a_client_that_does_not_read_stops_the_upstream_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = StreamRelays()
    body = EndlessBody()
    async with running(relays), relays.open(FakeClient(body), "p", b"", _frames()) as receive:  # type: ignore[arg-type]
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
    stats = relays.statistics()
    assert stats["active"] == 0 and stats["cancelled"] == 1 and stats["completed"] == 0
    assert relay_nodes(relays) == []


async def test_a_live_stream_is_a_child_of_the_relay_supervisor_until_it_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = StreamRelays()
    body = EndlessBody()
    client = FakeClient(body)
    async with running(relays):
        async with relays.open(client, "p", b"", _frames(), model="sim/x") as receive:  # type: ignore[arg-type]
            await receive.receive()
            await trio.sleep(2)
            (node,) = relay_nodes(relays)
            assert node.kind == "stream_relay" and node.state == "running"
            first = dict(node.statistics)
            assert first["model"] == "sim/x" and first["provider"] == "sim"
            assert first["age_s"] == 2 and int(first["chunks"]) >= 1  # type: ignore[call-overload]
            for _ in range(3):
                await receive.receive()
            await trio.sleep(1)
            (node,) = relay_nodes(relays)
            assert int(node.statistics["bytes"]) > int(first["bytes"])  # type: ignore[call-overload]
            assert node.statistics["age_s"] == 3
        assert relay_nodes(relays) == []  # gone with its stream
        tree = relays.supervisor.snapshot()
        assert tree.name == "stream-relays" and tree.statistics["cancelled"] == 1


class CrashingFrames:
    """A frame source with a bug: the relay crashes on the first event."""

    usage = None
    finished = False

    def feed(self, event: object) -> list[bytes]:
        raise RuntimeError("bug in a translation")

    def finish(self) -> list[bytes]:
        return []


async def test_a_relay_that_crashes_is_not_restarted_nor_a_failure() -> None:
    relays = StreamRelays()
    async with running(relays):
        out = await relayed(relays, FakeClient(ScriptedBody([_frame(0)])), CrashingFrames())
        assert out == b""  # the client's stream ends (its channel closed)
        await trio.testing.wait_all_tasks_blocked()
        tree = relays.supervisor.snapshot()
        assert tree.children == () and relays.supervisor.failed() == []
        assert tree.statistics["restarts"] == 0 and relays.supervisor.all_running()


async def test_a_stream_cut_short_ends_with_an_error_frame_then_done() -> None:
    relays = StreamRelays()
    body = ScriptedBody([_frame(0) + _frame(1)])  # then the body ends without a finish
    async with running(relays):
        out = await relayed(relays, FakeClient(body), _frames())
    frames = [f for f in out.split(b"\n\n") if f]
    assert frames[-1] == b"data: [DONE]"
    assert json.loads(frames[-2][len(b"data: ") :])["error"]["type"] == "upstream_error"
    assert len(frames) == 4 and relays.statistics()["broken"] == 1


async def test_a_transport_failure_midway_is_reported_in_the_stream() -> None:
    from actors.errors import ConnectionBroken

    relays = StreamRelays()
    body = ScriptedBody([_frame(0), ConnectionBroken("reset")])
    async with running(relays):
        out = await relayed(relays, FakeClient(body), _frames())
    assert out.endswith(b"data: [DONE]\n\n") and b'"upstream_error"' in out


async def test_the_org_key_given_to_the_relay_is_used_for_the_upstream_stream() -> None:
    relays = StreamRelays()
    default, byok = FakeClient(ScriptedBody([])), FakeClient(ScriptedBody([]))
    async with running(relays):
        async with (
            relays.open(default, "p", b"", _frames()) as one,  # type: ignore[arg-type]
            relays.open(byok, "p", b"", _frames(), api_key="sk-org-own") as two,  # type: ignore[arg-type]
        ):
            _ = [item async for item in one] + [item async for item in two]
    assert default.api_keys == [None] and byok.api_keys == ["sk-org-own"]


async def test_a_source_with_its_own_failure_ends_a_broken_stream_its_way() -> None:
    from actors.errors import ConnectionBroken
    from protocol.responses.objects import ResponseObject
    from protocol.responses.stream import ResponseStream

    scripts: list[list[bytes | Exception]] = [
        [_frame(0), ConnectionBroken("reset")],  # the transport breaks
        [_frame(0) + _frame(1)],  # the body ends before its finish
    ]
    for parts in scripts:
        relays = StreamRelays()
        frames = ResponseStream(_frames(), ResponseObject(id="resp_1", created_at=1, model="m"))
        async with running(relays):
            out = await relayed(relays, FakeClient(ScriptedBody(parts)), frames)
        events = [f for f in out.split(b"\n\n") if f]
        assert events[-1] == b"data: [DONE]" and out.count(b"[DONE]") == 1
        assert events[-2].startswith(b"event: response.failed\n")
        assert b'"error":{"message"' not in out  # no chat error frame
        assert frames.response.status == "failed" and relays.statistics()["broken"] == 1
