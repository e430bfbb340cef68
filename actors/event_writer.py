"""The event writer: hot-path events (`completion.*`) written to the outbox in batches, one
transaction per write (every `flush_interval_s`, at `batch_size` events, and on stop), so that
an inference request never waits for, nor adds, a database commit. A `BatchWriter`
(actors/batch_writer.py) of `NewEvent`s.

`offer` never blocks: a full inbox drops the event and counts it (`statistics()["dropped"]`).
A crash loses at most the events not yet written, as the accountant's usage rows; a write that
fails keeps its batch (in order, ahead of newer events) and retries it, skipping the events that
turn out stored, so none is written twice. Events that report a change of state (keys, budgets,
provider keys) do not come here: they are written in the change's own transaction.
"""

from __future__ import annotations

import msgspec

from actors.batch_writer import BatchWriter
from actors.settings import DEFAULTS, ActorSettings
from storage.events import EventRepository, NewEvent


class EventWriter(BatchWriter[NewEvent]):
    def __init__(
        self,
        events: EventRepository,
        *,
        settings: ActorSettings | None = None,
        flush_interval_s: float = 0.1,
        batch_size: int = 500,
        capacity: int | None = None,
    ) -> None:
        settings = settings or DEFAULTS["batch_writer"]
        if capacity is not None:
            settings = msgspec.structs.replace(settings, inbox_capacity=capacity)

        async def write(batch: list[NewEvent]) -> int:
            return await events.write_batch(batch, skip_stored=False)

        async def rewrite(batch: list[NewEvent]) -> int:  # its outcome was unknown
            return await events.write_batch(batch, skip_stored=True)

        super().__init__(
            "event-writer",
            write,
            rewrite=rewrite,
            settings=settings,
            max_batch=batch_size,
            flush_interval_s=flush_interval_s,
        )
