"""Stream relays: one task per streamed request (`StreamRelay`, a temporary child of the
`stream-relays` supervisor), opening the upstream stream, reading its SSE body, translating it
into the client's `chat.completion.chunk` frames and writing them to the client (a
`FrameSink`, the gateway's response): the frames of one upstream read go in one write. After
`idle_s` of upstream silence it writes a `: keepalive` comment.

Back-pressure: the relay awaits each write, so when the client reads slowly the relay stops
reading the upstream, and TCP slows the provider — memory per stream stays at one read.
(Until issue #21 the relay handed its frames to the request's task over a channel: a task
switch and a channel message per upstream read, measured in docs/decisions.md.)
A stream that breaks (transport error, malformed frame, upstream ending before its finish)
ends with an error frame and `[DONE]` (a `FailingSource` ends it its own way); it never hangs.
The request leaving `StreamRelays.relay` (the client left) cancels the relay, which closes the
upstream response at once. A relay is never restarted (a broken stream cannot resume); one
that crashes ends, its client's response is ended by the request, and it is not a failure of
the instance. `StreamRelays.cut()` (the graceful drain is running out,
gateway/server/serve.py) ends every stream still relaying the way a broken one ends, with the
code `server_shutting_down`, so its client gets a whole response rather than a cut
connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import trio

from actors.base import Actor
from actors.http1_pool import Response
from actors.supervisor import RestartPolicy, Supervisor
from actors.upstream import UpstreamClient, mapped_errors
from protocol.errors import UpstreamError, UpstreamMalformed, UpstreamTimeout
from protocol.openai_chat import ChunkRelay, error_frame
from protocol.sse import DONE, KEEPALIVE, SSEDecoder, SSEEvent
from protocol.usage import Usage

SHUTDOWN_TYPE = "server_error"
SHUTDOWN_CODE = "server_shutting_down"
SHUTDOWN_MESSAGE = (
    "The server is shutting down and ended this stream before its end; retry the request."
)


class FrameSink(Protocol):
    """Where a relay writes: the client's response. Called from the relay's task only, one
    call at a time."""

    async def open(self) -> bool:
        """The upstream's head arrived (2xx): send the client's head. False: the client left."""
        ...

    async def write(self, data: bytes) -> bool:
        """Send frames (or a keep-alive) to the client. False: the client left, stop."""
        ...


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

    @property
    def finish_reason(self) -> str | None:
        return self._relay.finish_reason

    def feed(self, event: SSEEvent) -> list[bytes]:
        if event.data == "[DONE]":
            return []
        return self._relay.feed(event.data)

    def finish(self) -> list[bytes]:
        return self._relay.finish()

    # Stream failover: what a continuation needs (see ChunkRelay.resume).
    def keep_text(self) -> None:
        self._relay.keep_text = True

    def partial_text(self) -> str:
        return "".join(self._relay.text)

    def resume(self, carried: int) -> None:
        self._relay.resume(carried)


@dataclass(frozen=True)
class Resume:
    """Where a broken stream goes on: another upstream's stream of the same answer."""

    client: UpstreamClient
    path: str
    body: bytes
    api_key: str | None
    carried: int = 0  # completion tokens the legs before produced (for the client's usage)
    trace: bytes = b""  # header lines sent with it (the attempt's traceparent, as the first leg)


ResumeFrom = Callable[[UpstreamError], Awaitable["Resume | None"]]
"""Given the failure that broke a stream after its first byte, the stream to continue it on
(a continuation request to another deployment), or None: end it with the error frame."""


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
        self._live: set[StreamRelay] = set()  # relaying a body (what `cut()` interrupts)
        self._cutting = False
        self._numbered = 0

    def cut(self) -> None:
        """End every stream still relaying, and any that starts from now on, with an error
        frame (code `server_shutting_down`) and `[DONE]`: the server is shutting down."""
        self._cutting = True
        for relay in self._live:
            relay.interrupt()

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

    async def relay(
        self,
        client: UpstreamClient,
        path: str,
        body: bytes,
        frames: FrameSource,
        sink: FrameSink,
        *,
        idle_s: float,
        api_key: str | None = None,
        on_cut: Callable[[], None] | None = None,
        model: str | None = None,
        resume: ResumeFrom | None = None,
        trace: bytes = b"",
    ) -> None:
        """Relay `path`'s stream into `sink` under the supervisor; return once it ended.
        Before the upstream's head arrived (2xx), upstream failures are raised (the caller
        answers them as JSON errors); after it, they end the stream in it. Being cancelled
        (the client left) cancels the relay, which closes the upstream response, and waits
        for its end. `idle_s`: upstream silence before a keep-alive; `api_key`: the org's own
        key (bring-your-own-key); `on_cut` is called when `cut()` ended the stream; `model`
        labels the relay in the actor tree; `resume`: where a stream that broke after its
        first byte goes on (stream failover), instead of ending with the error frame; `trace`:
        header lines sent upstream with the first leg (its `traceparent`: the relay's task does
        not share the request's context, so the caller hands it over)."""
        self._numbered += 1
        relay = StreamRelay(
            f"stream-{self._numbered}", self, client, path, body, frames, sink, api_key, on_cut
        )
        relay.model = model
        relay.resume = resume
        relay.idle_s = idle_s
        relay.trace = trace
        child = await self.supervisor.start(relay, policy=_TEMPORARY)
        try:
            await child.exited.wait()
        finally:
            if not child.exited.is_set():
                child.scope.cancel()
                with trio.CancelScope(shield=True) as wait:
                    wait.deadline = trio.current_time() + _END_WAIT_S
                    await child.exited.wait()


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
    client's frames and writes them to its sink (the frames of one upstream read in one
    write)."""

    kind = "stream_relay"

    def __init__(
        self,
        name: str,
        relays: StreamRelays,
        client: UpstreamClient,
        path: str,
        body: bytes,
        frames: FrameSource,
        sink: FrameSink,
        api_key: str | None,
        on_cut: Callable[[], None] | None,
    ) -> None:
        self.name = name
        self.relays = relays
        self.client = client
        self.path = path
        self.body = body
        self.frames = frames
        self.sink = sink
        self.idle_s = 15.0  # upstream silence before a keep-alive
        self._response: Response | None = None  # while relaying its body
        self.api_key = api_key
        self.on_cut = on_cut
        self.model: str | None = None
        self.resume: ResumeFrom | None = None
        self.trace = b""  # the first leg's trace header lines
        self.legs = 1  # upstream streams this answer took (more after a failover)
        self.bytes = 0
        self.chunks = 0
        self.began = trio.current_time()

    def statistics(self) -> dict[str, object]:
        return {
            "bytes": self.bytes,
            "chunks": self.chunks,
            "age_s": round(trio.current_time() - self.began, 3),
            "model": self.model,
            "provider": self.client.name,
            "legs": self.legs,
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Report `started()` once the upstream's head arrived (2xx), then relay the stream to
        its end. After `started()`, upstream failures end the stream with an error frame and
        `[DONE]`. Being cancelled (the client left) closes the upstream response at once."""
        stats = self.relays.stats
        async with self.client.stream(
            self.path, self.body, api_key=self.api_key, trace=self.trace
        ) as response:
            task_status.started()
            stats.active += 1
            try:
                if not (await self.sink.open() and await self._run(response)):
                    stats.cancelled += 1  # the client left
            except trio.Cancelled:
                stats.cancelled += 1
                raise
            finally:
                stats.active -= 1

    async def _write(self, batch: list[bytes]) -> bool:
        data = batch[0] if len(batch) == 1 else b"".join(batch)
        self.chunks += len(batch)
        self.bytes += len(data)
        return await self.sink.write(data)

    async def _run(self, response: Response) -> bool:
        """Relay to the end; False if the client left first."""
        relays = self.relays
        stats = relays.stats
        frames = self.frames
        sink = self.sink
        idle_s = self.idle_s
        decoder = SSEDecoder()
        batch: list[bytes] = []  # frames not yet written
        cut = False
        failed: UpstreamError | None = None
        closing: list[bytes] = []
        self._response = response
        relays._live.add(self)
        try:
            with mapped_errors(self.client.name):
                while not (cut := relays._cutting):
                    raw = await response.next_chunk_or_silence(idle_s)
                    if raw is None:  # silence (or `cut()` interrupted the read)
                        if relays._cutting:
                            continue
                        if not await sink.write(KEEPALIVE):  # we're still here
                            return False
                        continue
                    if not raw:
                        break
                    # Everything one upstream read yields goes in one write.
                    batch = [f for event in decoder.feed(raw) for f in frames.feed(event)]
                    stats.frames += len(batch)
                    if response.complete:
                        break  # the end rides with the last frames (one write)
                    if batch:
                        if not await self._write(batch):
                            return False
                        batch = []
                if not cut:
                    if not frames.finished:
                        raise UpstreamMalformed("the upstream stream ended early")
                    closing = batch + frames.finish()
                    stats.completed += 1
        except UpstreamError as exc:
            stats.broken += 1
            failed = exc
        finally:
            relays._live.discard(self)
            self._response = None
        if failed is not None and not cut:
            if batch and not await self._write(batch):
                return False
            batch = []
            continued = await self._continue(failed)
            if continued is not None:
                return continued
            code = "upstream_timeout" if isinstance(failed, UpstreamTimeout) else "upstream_error"
            closing = _broken(frames, _describe(failed), code)
        if cut:
            stats.cut += 1
            closing = [
                *batch,
                *_broken(frames, SHUTDOWN_MESSAGE, SHUTDOWN_CODE, type=SHUTDOWN_TYPE),
            ]
            if self.on_cut is not None:
                self.on_cut()  # before the end leaves: the request is known as cut when it ends
        return not closing or await self._write(closing)

    async def _continue(self, failed: UpstreamError) -> bool | None:
        """Go on with the stream that broke (`failed`) from where `resume` says, until one
        continuation ends; its result (False: the client left), or None when there is none
        (the caller ends the stream with the error frame)."""
        frames = self.frames
        while self.resume is not None and isinstance(frames, OpenAIFrames):
            there = await self.resume(failed)
            if there is None:
                return None
            self.client = there.client
            self.legs += 1
            frames.resume(there.carried)
            try:
                async with there.client.stream(
                    there.path, there.body, api_key=there.api_key, trace=there.trace
                ) as response:
                    return await self._run(response)
            except UpstreamError as exc:  # the continuation failed before its first byte
                self.relays.stats.broken += 1
                failed = exc
        return None

    def interrupt(self) -> None:
        """`cut()`: stop waiting for the upstream (a write to the client is not interrupted:
        a cancelled write would leave the client's stream cut mid-frame)."""
        if self._response is not None:
            self._response.interrupt()


def _broken(
    frames: FrameSource, message: str, code: str, *, type: str = "upstream_error"
) -> list[bytes]:
    if isinstance(frames, FailingSource):
        return frames.fail(message, code=code)
    return [error_frame(message, code=code, type=type), DONE]


def _describe(exc: UpstreamError) -> str:
    return f"The upstream provider {exc.provider!r} failed mid-stream; retry the request."
