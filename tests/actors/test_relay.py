"""Stream relays: back-pressure, breakage, keep-alives, cancellation and supervision (one
temporary child per live stream under `stream-relays`), against a scripted upstream body and
a sink that stands for the client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
import trio.lowlevel
import trio.testing

from actors.relay import OpenAIFrames, StreamRelays
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

    async def next_chunk_or_silence(self, idle_s: float) -> bytes | None:
        await trio.lowlevel.checkpoint()
        self.reads += 1
        return _frame(self.reads)

    def interrupt(self) -> None:
        pass


class ScriptedBody:
    """Its parts in turn; a float is that many seconds of silence."""

    def __init__(self, parts: list[bytes | Exception | float]) -> None:
        self._parts = parts
        self._waiting: trio.CancelScope | None = None

    @property
    def complete(self) -> bool:
        return False  # its end shows as b"" (or an error), as a close-delimited body does

    async def next_chunk_or_silence(self, idle_s: float) -> bytes | None:
        await trio.lowlevel.checkpoint()
        if not self._parts:
            return b""
        part = self._parts[0]
        if isinstance(part, float):
            with trio.move_on_after(min(part, idle_s)) as self._waiting:
                await trio.sleep_forever()
            self._parts[0] = part - idle_s
            if self._parts[0] <= 0:
                self._parts.pop(0)
            return None
        self._parts.pop(0)
        if isinstance(part, Exception):
            raise part
        return part

    def interrupt(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()


class Client:
    """The sink a relay writes to: what it received; with `allowed` set, it takes that many
    writes more, then stops reading (a write waits) until `allow(n)`."""

    def __init__(self, allowed: int | None = None) -> None:
        self.data = b""
        self.writes = 0
        self.allowed = allowed
        self.gone = False
        self._more = trio.Event()

    async def open(self) -> bool:
        return not self.gone

    async def write(self, data: bytes) -> bool:
        while self.allowed == 0:
            await self._more.wait()
        await trio.lowlevel.checkpoint()
        if self.allowed is not None:
            self.allowed -= 1
        self.writes += 1
        self.data += data
        return not self.gone

    def allow(self, writes: int) -> None:
        self.allowed = writes
        self._more.set()
        self._more = trio.Event()


class FakeClient:
    """Stands where the upstream client does: its stream() yields the scripted body."""

    name = "sim"

    def __init__(self, body: object) -> None:
        self._body = body
        self.api_keys: list[str | None] = []
        self.traces: list[bytes] = []

    @asynccontextmanager
    async def stream(
        self, path: str, body: bytes, *, api_key: str | None = None, trace: bytes = b""
    ) -> AsyncIterator[object]:
        self.api_keys.append(api_key)
        self.traces.append(trace)
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


async def relayed(
    relays: StreamRelays, upstream: object, frames: object, *, idle_s: float = 15.0
) -> bytes:
    sink = Client()
    await relays.relay(upstream, "p", b"", frames, sink, idle_s=idle_s)  # type: ignore[arg-type]
    return sink.data


def relay_nodes(relays: StreamRelays) -> list[ActorSnapshot]:
    return list(relays.supervisor.snapshot().children)


async def test_a_client_that_does_not_read_stops_the_upstream_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = StreamRelays()
    body = EndlessBody()
    sink = Client(allowed=0)
    async with running(relays), trio.open_nursery() as requests:
        requests.start_soon(
            partial(relays.relay, FakeClient(body), "p", b"", _frames(), sink, idle_s=15.0)  # type: ignore[arg-type]
        )
        await trio.sleep(60)
        stalled_at = body.reads
        assert stalled_at == 1  # waiting on its first write: no more reading
        await trio.sleep(60)
        assert body.reads == stalled_at
        sink.allow(5)  # the client reads a little: the relay reads as much more
        await trio.sleep(1)
        assert body.reads == stalled_at + 5 and sink.writes == 5
        assert relays.statistics()["active"] == 1
        requests.cancel_scope.cancel()  # the request leaves (the client went away)
    stats = relays.statistics()
    assert stats["active"] == 0 and stats["cancelled"] == 1 and stats["completed"] == 0
    assert relay_nodes(relays) == []


async def test_a_live_stream_is_a_child_of_the_relay_supervisor_until_it_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = StreamRelays()
    body = EndlessBody()
    client = FakeClient(body)
    sink = Client(allowed=1)
    async with running(relays), trio.open_nursery() as requests:
        requests.start_soon(
            partial(relays.relay, client, "p", b"", _frames(), sink, idle_s=15.0, model="sim/x")  # type: ignore[arg-type]
        )
        await trio.sleep(2)
        (node,) = relay_nodes(relays)
        assert node.kind == "stream_relay" and node.state == "running"
        first = dict(node.statistics)
        assert first["model"] == "sim/x" and first["provider"] == "sim"
        assert first["age_s"] == 2 and int(first["chunks"]) >= 1  # type: ignore[call-overload]
        sink.allow(3)
        await trio.sleep(1)
        (node,) = relay_nodes(relays)
        assert int(node.statistics["bytes"]) > int(first["bytes"])  # type: ignore[call-overload]
        assert node.statistics["age_s"] == 3
        requests.cancel_scope.cancel()
    assert relay_nodes(relays) == []  # gone with its stream
    tree = relays.supervisor.snapshot()
    assert tree.name == "stream-relays" and tree.statistics["cancelled"] == 1


async def test_upstream_silence_writes_keepalives_then_the_stream_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = StreamRelays()
    body = ScriptedBody([_frame(0), 30.0, _frame(1)])  # silent for 30 s between two frames
    async with running(relays):
        out = await relayed(relays, FakeClient(body), _frames(), idle_s=15.0)
    assert out.count(b": keepalive\n\n") == 2  # after 15 s and 30 s of silence
    before, after = out.split(b": keepalive\n\n", 1)
    assert b"t0" in before and b"t1" in after


async def test_a_client_that_left_ends_the_relay() -> None:
    relays = StreamRelays()
    sink = Client()
    sink.gone = True  # its first write finds it gone
    async with running(relays):
        await relays.relay(FakeClient(EndlessBody()), "p", b"", _frames(), sink, idle_s=15.0)  # type: ignore[arg-type]
    assert relays.statistics()["cancelled"] == 1 and relay_nodes(relays) == []


async def test_cut_ends_a_stream_waiting_for_its_upstream_with_the_shutdown_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relays = StreamRelays()
    body = ScriptedBody([_frame(0), 3600.0])
    cuts: list[bool] = []
    sink = Client()
    async with running(relays), trio.open_nursery() as requests:
        requests.start_soon(
            partial(
                relays.relay,
                FakeClient(body),
                "p",
                b"",
                _frames(),
                sink,  # type: ignore[arg-type]
                idle_s=3600.0,
                on_cut=lambda: cuts.append(True),
            )
        )
        await trio.sleep(5)
        relays.cut()
    assert cuts == [True] and relays.statistics()["cut"] == 1
    assert sink.data.endswith(b"data: [DONE]\n\n") and b"server_shutting_down" in sink.data


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
        assert out == b""  # nothing written: the request ends the client's response
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
        await relays.relay(default, "p", b"", _frames(), Client(), idle_s=15.0)  # type: ignore[arg-type]
        await relays.relay(byok, "p", b"", _frames(), Client(), idle_s=15.0, api_key="sk-org-own")  # type: ignore[arg-type]
    assert default.api_keys == [None] and byok.api_keys == ["sk-org-own"]


async def test_a_source_with_its_own_failure_ends_a_broken_stream_its_way() -> None:
    from actors.errors import ConnectionBroken
    from protocol.responses.objects import ResponseObject
    from protocol.responses.stream import ResponseStream

    scripts: list[list[bytes | Exception | float]] = [
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
