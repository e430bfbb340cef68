"""A job's events as an SSE stream, read from storage (so it works on every instance, whoever
watches the job): every event so far, oldest first, then new ones as they are written (looked
for every `events_poll_s`), until the job is in a terminal state and its last event was sent;
then `data: [DONE]`. `: keepalive` after `sse_keepalive_s` of silence."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import trio

from gateway.fine_tuning.views import event_view
from protocol.fine_tuning.provider import TERMINAL
from protocol.sse import DONE, KEEPALIVE, data_event
from storage.fine_tuning import FineTuningRepository

_PAGE = 100


async def event_stream(
    jobs: FineTuningRepository, job_id: str, *, poll_s: float, keepalive_s: float
) -> AsyncIterator[bytes]:
    seq = 0
    quiet = 0.0
    while True:
        job = await jobs.by_id(job_id)  # first: a terminal status's event is then visible
        finished = job is None or job.status in TERMINAL
        while True:
            batch = await jobs.events_after(job_id, seq, limit=_PAGE)
            for event in batch:
                seq = event.seq
                yield data_event(msgspec.json.encode(event_view(event)))
            if batch:
                quiet = 0.0
            if len(batch) < _PAGE:
                break
        if finished:
            yield DONE
            return
        await trio.sleep(poll_s)
        quiet += poll_s
        if quiet >= keepalive_s:
            quiet = 0.0
            yield KEEPALIVE
