"""Relaying one upstream stream to the client as SSE, shared by chat completions and
responses: the relay (actors/relay.py) reads and translates the upstream, a `Pump` writes the
frames, and a client that leaves cancels both. An upstream failure before any byte was sent is
the client's JSON error; after that the frame source ends the stream its own way. A stream the
relays cut because the server is shutting down (actors/relay.py) is noted on the request: its
log line and `completion.error` say 503 `server_shutting_down`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import trio

from actors.relay import (
    CHANNEL_CAPACITY,
    SHUTDOWN_CODE,
    SHUTDOWN_MESSAGE,
    SHUTDOWN_TYPE,
    FrameSource,
)
from actors.upstream import UpstreamClient
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.sse_response import Pump, cancel_on_disconnect, start_sse
from gateway.web.context import RequestContext
from protocol.errors import UpstreamError


async def relay_to_client(
    call: Call,
    deps: InferenceDeps,
    client: UpstreamClient,
    path: str,
    upstream_body: bytes,
    frames: FrameSource,
    pump: Pump,
    *,
    before_last: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Stream `path`'s answer to the client through `frames` and `pump` (the caller's, so
    that `pump.frames_sent` stays readable for accounting whatever happens). With
    `before_last`, the relay's last batch (the stream's closing frames) waits until it has
    run. Raises the UpstreamError of an upstream that failed before the stream started (the
    boundary answers it as JSON)."""
    http = call.request
    failure: UpstreamError | None = None
    async with trio.open_nursery() as streams:
        streams.start_soon(cancel_on_disconnect, http.receive, streams.cancel_scope)
        opened = deps.relays.open(
            client,
            path,
            upstream_body,
            frames,
            api_key=call.own_key,
            on_cut=partial(_cut, call.ctx),
            model=call.ctx.model,
        )
        try:
            async with opened as relayed:
                http.started = True
                await start_sse(http.scope, http.send, http.headers)
                if before_last is not None:
                    held_ch, relayed_held = trio.open_memory_channel[bytes](CHANNEL_CAPACITY)
                    streams.start_soon(_hold_last, relayed, held_ch, before_last)
                    relayed = relayed_held
                await pump.run(relayed)
        except UpstreamError as exc:
            if http.started:
                raise
            failure = exc  # before any byte was sent: a JSON error
        streams.cancel_scope.cancel()
    if failure is not None:
        raise failure  # outside the nursery: not in an exception group


def _cut(ctx: RequestContext) -> None:
    """The stream was ended because the server is shutting down: logged as such (503, the
    code of the error frame the client got), whatever was sent on the wire."""
    ctx.note_error(SHUTDOWN_TYPE, SHUTDOWN_CODE, SHUTDOWN_MESSAGE)
    ctx.logged_status = 503


async def _hold_last(
    source: trio.MemoryReceiveChannel[bytes],
    sink: trio.MemorySendChannel[bytes],
    before_last: Callable[[], Awaitable[None]],
) -> None:
    """Forward every batch, holding back the last one until `before_last` is done (the relay
    sends a stream's closing frames as its last batch)."""
    async with source, sink:
        held: bytes | None = None
        async for batch in source:
            if held is not None:
                await sink.send(held)
            held = batch
        await before_last()
        if held is not None:
            await sink.send(held)
