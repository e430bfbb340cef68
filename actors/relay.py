"""Stream relays: one task per streamed request (`StreamRelay`, a temporary child of the
`stream-relays` supervisor), opening the upstream stream, reading its SSE body, translating it
into the client's `chat.completion.chunk` frames, and handing them over a bounded channel (the
frames of one upstream read travel together: one message, one task switch per read).

Back-pressure: when the client reads slowly the channel fills, the relay stops reading the
upstream, and TCP slows the provider — memory per stream stays at the channel's capacity.
A stream that breaks (transport error, malformed frame, upstream ending before its finish)
ends with an error frame and `[DONE]` (a `FailingSource` ends it its own way); it never hangs.
The request leaving its stream (`StreamRelays.open`'s block: the client left, or the end was
written) cancels the relay's scope, which closes the upstream response at once. A relay is
never restarted (a broken stream cannot resume); one that crashes closes its channel, so its
client's stream ends, and is not a failure of the instance. `StreamRelays.cut()` (the
graceful drain is running out, gateway/server/serve.py) ends every stream still relaying the
way a broken one ends, with the code `server_shutting_down`, so its client gets a whole
response rather than a cut connection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import trio

from actors.base import Actor
from actors.http1_pool import Response
from actors.supervisor import RestartPolicy, Supervisor
from actors.upstream import UpstreamClient, mapped_errors
from protocol.errors import UpstreamError, UpstreamMalformed, UpstreamTimeout
from protocol.openai_chat import ChunkRelay, error_frame
from protocol.sse import DONE, SSEDecoder, SSEEvent
from protocol.usage import Usage

CHANNEL_CAPACITY = 16
SHUTDOWN_TYPE = "server_error"
SHUTDOWN_CODE = "server_shutting_down"
SHUTDOWN_MESSAGE = (
    "The server is shutting down and ended this stream before its end; retry the request."
)


class FrameSource(Protocol):
    """Turns upstream SSE events into client frames (OpenAI pass-through or a translation)."""

    @property
    def usage(self) -> Usage | None: ...

    @property
    def finished(self) -> bool: ...

    def feed(self, event: SSEEvent) -> list[bytes]: ...

    def finish(self) -> list[bytes]: ...


@runtime_checkable
class FailingSource(Protocol):
    """A FrameSource that ends a broken stream its own way (the Responses stream's
    `response.failed`); other sources end it with the chat error frame and `[DONE]`."""

    def fail(self, message: str, *, code: str) -> list[bytes]: ...


class OpenAIFrames:
    """An OpenAI-compatible upstream: normalize its chunks (see ChunkRelay)."""

    def __init__(self, relay: ChunkRelay) -> None:
        self._relay = relay

    @property
    def usage(self) -> Usage | None:
        return self._relay.usage

    @property
    def finished(self) -> bool:
        return self._relay.finished

    def feed(self, event: SSEEvent) -> list[bytes]:
        if event.data == "[DONE]":
            return []
        return self._relay.feed(event.data)

    def finish(self) -> list[bytes]:
        return self._relay.finish()


@dataclass
class RelayStats:
    active: int = 0
    completed: int = 0
    broken: int = 0
    cancelled: int = 0
    cut: int = 0  # ended by `cut()`: the server was shutting down
    frames: int = 0


class StreamRelays:
    """The registry of this instance's stream relays (a plain object): counts them, cuts them
    at shutdown, and opens each as a temporary child of its supervisor `stream-relays` (the
    actor, started by the runtime): one task per live stream, shown in `/v1/admin/actors` as
    kind `stream_relay` with its bytes, chunks and age, never restarted (a broken stream
    cannot resume) and never counted as a failure of the instance."""

    def __init__(self) -> None:
        self.supervisor = _RelaySupervisor(self)
        self.stats = RelayStats()
        self._reading: set[trio.CancelScope] = set()
        self._cutting = False
        self._numbered = 0

    def cut(self) -> None:
        """End every stream still relaying, and any that starts from now on, with an error
        frame (code `server_shutting_down`) and `[DONE]`: the server is shutting down."""
        self._cutting = True
        for scope in self._reading:
            scope.cancel()

    def statistics(self) -> dict[str, object]:
        s = self.stats
        return {
            "active": s.active,
            "completed": s.completed,
            "broken": s.broken,
            "cancelled": s.cancelled,
            "cut": s.cut,
            "frames": s.frames,
        }

    @asynccontextmanager
    async def open(
        self,
        client: UpstreamClient,
        path: str,
        body: bytes,
        frames: FrameSource,
        *,
        api_key: str | None = None,
        on_cut: Callable[[], None] | None = None,
        model: str | None = None,
    ) -> AsyncIterator[trio.MemoryReceiveChannel[bytes]]:
        """Start a relay of `path`'s stream under the supervisor and yield the channel of its
        frames once the upstream's head arrived (2xx). Before that, upstream failures are
        raised (the caller answers them as JSON errors), and cancelling the caller cancels the
        relay. Leaving the block (the stream was written, or the client left) cancels the
        relay if it still runs, which closes the upstream response, and waits for its end.
        `api_key`: the org's own key (bring-your-own-key); `on_cut` is called when `cut()`
        ended the stream; `model` labels the relay in the actor tree."""
        self._numbered += 1
        send, receive = trio.open_memory_channel[bytes](CHANNEL_CAPACITY)
        relay = StreamRelay(
            f"stream-{self._numbered}", self, client, path, body, frames, send, api_key, on_cut
        )
        relay.model = model
        try:
            await self.supervisor.start(relay, policy=_TEMPORARY)
        except BaseException:
            receive.close()
            raise
        try:
            yield receive
        finally:
            if not relay.ended.is_set():
                relay.scope.cancel()
                with trio.CancelScope(shield=True) as wait:
                    wait.deadline = trio.current_time() + _END_WAIT_S
                    await relay.ended.wait()


_TEMPORARY = RestartPolicy(temporary=True)
_END_WAIT_S = 5.0  # a cancelled relay closes its upstream connection at once


class _RelaySupervisor(Supervisor):
    """`stream-relays`: the supervisor of the live streams, with the relays' counts."""

    kind = "supervisor"

    def __init__(self, relays: StreamRelays) -> None:
        super().__init__("stream-relays")
        self._relays = relays

    def statistics(self) -> dict[str, object]:
        return {**super().statistics(), **self._relays.statistics()}


class StreamRelay(Actor):
    """One live stream: opens the upstream stream, reads its SSE body, translates it into the
    client's frames and hands them over a bounded channel (the frames of one upstream read
    travel together, one message per read)."""

    kind = "stream_relay"

    def __init__(
        self,
        name: str,
        relays: StreamRelays,
        client: UpstreamClient,
        path: str,
        body: bytes,
        frames: FrameSource,
        out: trio.MemorySendChannel[bytes],
        api_key: str | None,
        on_cut: Callable[[], None] | None,
    ) -> None:
        self.name = name
        self.relays = relays
        self.client = client
        self.path = path
        self.body = body
        self.frames = frames
        self.out = out
        self.api_key = api_key
        self.on_cut = on_cut
        self.model: str | None = None
        self.bytes = 0
        self.chunks = 0
        self.began = trio.current_time()
        self.scope = trio.CancelScope()  # cancelled when the request is done with the stream
        self.ended = trio.Event()

    def statistics(self) -> dict[str, object]:
        return {
            "bytes": self.bytes,
            "chunks": self.chunks,
            "age_s": round(trio.current_time() - self.began, 3),
            "model": self.model,
            "provider": self.client.name,
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Report `started()` once the upstream's head arrived (2xx), then relay the stream to
        its end and close the channel. After `started()`, upstream failures end the stream
        with an error frame and `[DONE]`. Being cancelled (the client left) closes the
        upstream response at once."""
        stats = self.relays.stats
        try:
            with self.scope:
                async with self.client.stream(
                    self.path, self.body, api_key=self.api_key
                ) as response:
                    task_status.started()
                    stats.active += 1
                    try:
                        await self._run(response)
                    except trio.Cancelled:
                        stats.cancelled += 1
                        raise
                    finally:
                        stats.active -= 1
        finally:
            # Closed without a checkpoint, so that the request's reader, when it sees the
            # channel end, finds the relay ended too (no cancel, no wait: the common case).
            self.out.close()
            self.ended.set()

    async def _run(self, response: Response) -> None:
        relays = self.relays
        stats = relays.stats
        frames = self.frames
        out = self.out
        decoder = SSEDecoder()
        batch: list[bytes] = []  # frames not yet handed over
        closing: list[bytes] = []
        with trio.CancelScope() as reading:
            relays._reading.add(reading)
            if relays._cutting:
                reading.cancel()
            try:
                with mapped_errors(self.client.name):
                    while raw := await response.next_chunk():
                        # Everything one upstream read yields goes over as one item:
                        # one task switch and one client write per read, not per frame.
                        batch = [f for event in decoder.feed(raw) for f in frames.feed(event)]
                        stats.frames += len(batch)
                        if response.complete:
                            break  # the end rides with the last frames (one write)
                        if batch:
                            data = b"".join(batch)
                            self.chunks += len(batch)
                            self.bytes += len(data)
                            await out.send(data)  # cancelled: not sent
                            batch = []
                if not frames.finished:
                    raise UpstreamMalformed("the upstream stream ended early")
                closing = batch + frames.finish()
            except UpstreamError as exc:
                stats.broken += 1
                code = "upstream_timeout" if isinstance(exc, UpstreamTimeout) else "upstream_error"
                closing = [*batch, *_broken(frames, _describe(exc), code)]
            else:
                stats.completed += 1
            finally:
                relays._reading.discard(reading)
        if reading.cancelled_caught:
            stats.cut += 1
            shutdown = _broken(frames, SHUTDOWN_MESSAGE, SHUTDOWN_CODE, type=SHUTDOWN_TYPE)
            closing = [*batch, *shutdown]
            if self.on_cut is not None:
                self.on_cut()  # before the end leaves: the request is known as cut when it ends
        if closing:
            data = b"".join(closing)
            self.chunks += len(closing)
            self.bytes += len(data)
            await out.send(data)


def _broken(
    frames: FrameSource, message: str, code: str, *, type: str = "upstream_error"
) -> list[bytes]:
    if isinstance(frames, FailingSource):
        return frames.fail(message, code=code)
    return [error_frame(message, code=code, type=type), DONE]


def _describe(exc: UpstreamError) -> str:
    return f"The upstream provider {exc.provider!r} failed mid-stream; retry the request."
