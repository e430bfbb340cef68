"""A job's events as an SSE stream, read from storage (so it works on every instance, whoever
watches the job): every event so far, oldest first, then new ones as they are written (looked
for every `events_poll_s`), until the job is in a terminal state and its last event was sent;
then `data: [DONE]`. `: keepalive` after `sse_keepalive_s` of silence. A client that leaves
stops the stream at once (as chat streams: gateway/inference/sse_response.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

import msgspec
import trio

from gateway.fine_tuning.views import event_view
from gateway.inference.sse_response import cancel_on_disconnect, start_sse
from gateway.web import Request
from protocol.fine_tuning.provider import TERMINAL
from protocol.sse import DONE, KEEPALIVE, data_event
from storage.fine_tuning import FineTuningRepository

_PAGE = 100


async def event_stream(
    jobs: FineTuningRepository, job_id: str, *, poll_s: float, keepalive_s: float
) -> AsyncGenerator[bytes, None]:
    seq = 0
    last_sent = trio.current_time()
    while True:
        job = await jobs.by_id(job_id)  # first: a terminal status's event is then visible
        finished = job is None or job.status in TERMINAL
        while True:
            batch = await jobs.events_after(job_id, seq, limit=_PAGE)
            for event in batch:
                seq = event.seq
                yield data_event(msgspec.json.encode(event_view(event)))
            if batch:
                last_sent = trio.current_time()
            if len(batch) < _PAGE:
                break
        if finished:
            yield DONE
            return
        await trio.sleep(poll_s)
        if trio.current_time() - last_sent >= keepalive_s:
            last_sent = trio.current_time()
            yield KEEPALIVE


async def send_event_stream(
    request: Request,
    jobs: FineTuningRepository,
    job_id: str,
    *,
    poll_s: float,
    keepalive_s: float,
) -> None:
    """Answer `request` with the stream (the handler then returns None)."""
    send = request.send
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_on_disconnect, request.receive, nursery.cancel_scope)
        request.started = True
        await start_sse(request.scope, send, request.headers)
        frames = event_stream(jobs, job_id, poll_s=poll_s, keepalive_s=keepalive_s)
        async with aclosing(frames):  # closed here, not by the garbage collector, on cancel
            async for frame in frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        nursery.cancel_scope.cancel()
