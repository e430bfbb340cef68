"""Relaying one upstream stream to the client as SSE, shared by chat completions and
responses: the relay (actors/relay.py) reads and translates the upstream and writes the frames
into the client's response (a `ClientStream`); a client that leaves cancels it. An upstream
failure before any byte was sent is the client's JSON error; after that the frame source ends
the stream its own way. A stream the relays cut because the server is shutting down
(actors/relay.py) is noted on the request: its log line and `completion.error` say 503
`server_shutting_down`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import trio

from actors.relay import (
    SHUTDOWN_CODE,
    SHUTDOWN_MESSAGE,
    SHUTDOWN_TYPE,
    FrameSource,
    ResumeFrom,
)
from actors.upstream import UpstreamClient
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.sse_response import ClientStream, cancel_on_disconnect
from gateway.web.context import RequestContext
from protocol.errors import UpstreamError
from services.plugins.stream_guard import GuardedStream


async def relay_to_client(
    call: Call,
    deps: InferenceDeps,
    client: UpstreamClient,
    path: str,
    upstream_body: bytes,
    frames: FrameSource,
    sink: ClientStream | GuardedStream,
    *,
    before_last: Callable[[], Awaitable[None]] | None = None,
    resume: ResumeFrom | None = None,
) -> None:
    """Stream `path`'s answer to the client through `frames` into `sink` (the caller's, so
    that `sink.frames_sent` stays readable for accounting whatever happens). With
    `before_last` (and a sink that holds its last write), the stream's closing frames wait
    until it has run. Raises the UpstreamError of an upstream that failed before the stream
    started (the boundary answers it as JSON); `resume`: where a stream that broke after its
    first byte goes on (stream failover)."""
    http = call.request
    failure: UpstreamError | None = None
    async with trio.open_nursery() as streams:
        streams.start_soon(cancel_on_disconnect, http.receive, streams.cancel_scope)
        try:
            await deps.relays.relay(
                client,
                path,
                upstream_body,
                frames,
                sink,
                idle_s=deps.sse_keepalive_s,
                api_key=call.own_key,
                on_cut=partial(_cut, call.ctx),
                model=call.ctx.model,
                resume=resume,
                trace=call.trace_headers,
            )
        except UpstreamError as exc:
            if http.started:
                raise
            failure = exc  # before any byte was sent: a JSON error
        else:
            await sink.finish(before_last)
        streams.cancel_scope.cancel()
    if failure is not None:
        raise failure  # outside the nursery: not in an exception group


def _cut(ctx: RequestContext) -> None:
    """The stream was ended because the server is shutting down: logged as such (503, the
    code of the error frame the client got), whatever was sent on the wire."""
    ctx.note_error(SHUTDOWN_TYPE, SHUTDOWN_CODE, SHUTDOWN_MESSAGE)
    ctx.logged_status = 503
