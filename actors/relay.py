"""Stream relays: one per streamed request, opening the upstream stream, reading its SSE body,
translating it into the client's `chat.completion.chunk` frames, and handing them over a
bounded channel (the frames of one upstream read travel together).

Back-pressure: when the client reads slowly the channel fills, the relay stops reading the
upstream, and TCP slows the provider — memory per stream stays at the channel's capacity.
A stream that breaks (transport error, malformed frame, upstream ending before its finish)
ends with an error frame and `[DONE]` (a `FailingSource` ends it its own way); it never hangs.
Cancelling the relay (the client left) stops it at once; the caller then closes the upstream
response. `StreamRelays.cut()` (the graceful drain is running out, gateway/server/serve.py)
ends every stream still relaying the way a broken one ends, with the code
`server_shutting_down`, so its client gets a whole response rather than a cut connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import trio

from actors.base import Actor
from actors.http1_pool import Response
from actors.upstream import UpstreamClient, mapped_errors
from protocol.errors import UpstreamError, UpstreamMalformed, UpstreamTimeout
from protocol.openai_chat import ChunkRelay, error_frame
from protocol.sse import DONE, SSEDecoder, SSEError, SSEEvent
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


class StreamRelays(Actor):
    """The home of every stream relay of this instance: counts them for the actor tree.
    Relays run in their request's own task group (their lifetime is the request's): the relay
    task starts before the upstream call, so the body is relayed as soon as it arrives."""

    kind = "stream_relay"

    def __init__(self) -> None:
        self.name = "stream-relays"
        self.stats = RelayStats()
        self._reading: set[trio.CancelScope] = set()
        self._cutting = False

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

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    async def relay(
        self,
        client: UpstreamClient,
        path: str,
        body: bytes,
        frames: FrameSource,
        out: trio.MemorySendChannel[bytes],
        *,
        api_key: str | None = None,
        on_cut: Callable[[], None] | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Open the upstream stream, report `started()` once its head arrived (2xx), then relay
        it to its end and close `out`. Before `started()`, upstream failures are raised (the
        caller answers them as JSON errors); after it, they end the stream with an error frame
        and `[DONE]`. The relay owns the upstream response: leaving, or being cancelled (the
        client left), closes it at once. `api_key`: the org's own key (bring-your-own-key).
        `on_cut` is called when `cut()` ended the stream."""
        stats = self.stats
        async with out, client.stream(path, body, api_key=api_key) as response:
            task_status.started()
            stats.active += 1
            try:
                await self._run(client.name, response, frames, out, on_cut)
            except trio.Cancelled:
                stats.cancelled += 1
                raise
            finally:
                stats.active -= 1

    async def _run(
        self,
        provider: str,
        response: Response,
        frames: FrameSource,
        out: trio.MemorySendChannel[bytes],
        on_cut: Callable[[], None] | None,
    ) -> None:
        stats = self.stats
        decoder = SSEDecoder()
        batch: list[bytes] = []  # frames not yet handed over
        closing: list[bytes] = []
        with trio.CancelScope() as reading:
            self._reading.add(reading)
            if self._cutting:
                reading.cancel()
            try:
                with mapped_errors(provider):
                    while raw := await response.next_chunk():
                        # Everything one upstream read yields goes over as one item:
                        # one task switch and one client write per read, not per frame.
                        batch = [f for event in decoder.feed(raw) for f in frames.feed(event)]
                        stats.frames += len(batch)
                        if response.complete:
                            break  # the end rides with the last frames (one write)
                        if batch:
                            await out.send(b"".join(batch))  # cancelled: not sent
                            batch = []
                if not frames.finished:
                    raise UpstreamMalformed("the upstream stream ended early")
                closing = batch + frames.finish()
            except (UpstreamError, SSEError) as exc:
                stats.broken += 1
                code = "upstream_timeout" if isinstance(exc, UpstreamTimeout) else "upstream_error"
                closing = [*batch, *_broken(frames, _describe(exc), code)]
            else:
                stats.completed += 1
            finally:
                self._reading.discard(reading)
        if reading.cancelled_caught:
            stats.cut += 1
            shutdown = _broken(frames, SHUTDOWN_MESSAGE, SHUTDOWN_CODE, type=SHUTDOWN_TYPE)
            closing = [*batch, *shutdown]
            if on_cut is not None:
                on_cut()  # before the end leaves: the request is known as cut when it ends
        if closing:
            await out.send(b"".join(closing))


def _broken(
    frames: FrameSource, message: str, code: str, *, type: str = "upstream_error"
) -> list[bytes]:
    if isinstance(frames, FailingSource):
        return frames.fail(message, code=code)
    return [error_frame(message, code=code, type=type), DONE]


def _describe(exc: Exception) -> str:
    if isinstance(exc, UpstreamError):
        return f"The upstream provider {exc.provider!r} failed mid-stream; retry the request."
    return f"The upstream stream was malformed or cut short: {exc}"
