"""`BatchWriter[T]`: batches by size and by interval on Trio's clock, a failed write retried
(in order, with `rewrite`), the final write on stop, and the inbox's overflow policies from its
settings. The write function is the writer's one dependency: here a list the test reads."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.batch_writer import BatchWriter
from actors.errors import InboxFull
from actors.settings import ActorSettings


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class Sink:
    """Where batches go: each write call's batch and the Trio time it came, retries apart."""

    def __init__(self, failures: int = 0) -> None:
        self.batches: list[list[int]] = []
        self.rewrites: list[list[int]] = []
        self.at: list[float] = []
        self.failures = failures

    async def write(self, batch: list[int]) -> None:
        await trio.lowlevel.checkpoint()
        if self.failures:
            self.failures -= 1
            raise OSError("database went away")
        self.batches.append(list(batch))
        self.at.append(trio.current_time())

    async def rewrite(self, batch: list[int]) -> None:
        self.rewrites.append(list(batch))
        await self.write(batch)


async def test_a_full_batch_is_written_at_once_and_the_rest_at_the_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sink = Sink()
    writer = BatchWriter[int]("w", sink.write, max_batch=10, flush_interval_s=5.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        start = trio.current_time()
        for n in range(10):
            assert writer.offer(n)
        await trio.sleep(1.0)
        assert sink.batches == [list(range(10))]  # the full batch, not waiting for 5 s
        assert sink.at[0] - start < 0.01
        for n in range(10, 13):
            assert writer.offer(n)
        await trio.sleep(5.0)
        assert sink.batches[1] == [10, 11, 12]  # the rest, at the interval
        assert 4.9 < sink.at[1] - start <= 5.0
        nursery.cancel_scope.cancel()
    stats = writer.statistics()
    assert stats["offered"] == 13 and stats["written"] == 13 and stats["flushes"] == 2
    assert stats["queued"] == 0 and stats["flush_failures"] == 0


async def test_a_failed_write_is_retried_in_order_with_rewrite(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sink = Sink(failures=1)
    writer = BatchWriter[int]("w", sink.write, rewrite=sink.rewrite, flush_interval_s=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.offer(1)
        writer.offer(2)
        await trio.sleep(1.5)  # the first write failed
        assert sink.batches == [] and writer.stats.flush_failures == 1
        assert writer.queued() == 2
        writer.offer(3)
        await trio.sleep(3.0)
        nursery.cancel_scope.cancel()
    assert sink.rewrites == [[1, 2, 3]]  # the failed batch first, then what came meanwhile
    assert sink.batches == [[1, 2, 3]]
    assert writer.stats.written == 3 and writer.stats.flushes == 1


async def test_stopping_writes_what_is_left(autojump_clock: trio.testing.MockClock) -> None:
    sink = Sink()
    writer = BatchWriter[int]("w", sink.write, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.offer(7)
        await trio.sleep(1.0)
        writer.offer(8)  # still in the inbox when the stop comes
        nursery.cancel_scope.cancel()
    assert sink.batches == [[7, 8]]
    assert writer.queued() == 0


async def test_urgent_items_are_written_without_waiting_for_the_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sink = Sink()
    writer = BatchWriter[int]("w", sink.write, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.offer(1)
        writer.offer(2, urgent=True)
        await trio.sleep(0.001)
        assert sink.batches == [[1, 2]]
        nursery.cancel_scope.cancel()


async def test_offer_never_waits_and_refuses_when_full_under_wait_or_reject() -> None:
    for overflow in ("wait", "reject"):
        sink = Sink()
        settings = ActorSettings(inbox_capacity=3, overflow=overflow)
        writer = BatchWriter[int]("w", sink.write, settings=settings)
        assert [writer.offer(n) for n in range(5)] == [True, True, True, False, False]
        assert writer.statistics()["dropped"] == 2 and writer.inbox_depth() == 3
        await writer.flush()  # a flush without the loop running (tests, a last write)
        assert sink.batches == [[0, 1, 2]]
        assert writer.offer(5)


async def test_drop_oldest_keeps_the_newest() -> None:
    sink = Sink()
    settings = ActorSettings(inbox_capacity=3, overflow="drop_oldest")
    writer = BatchWriter[int]("w", sink.write, settings=settings)
    assert all(writer.offer(n) for n in range(5))
    assert writer.stats.dropped == 2
    await writer.put(5)  # put applies the policy too
    await writer.flush()
    assert sink.batches == [[3, 4, 5]]
    inbox = writer.statistics()["inbox"]
    assert isinstance(inbox, dict) and inbox["dropped"] == 3 and inbox["overflow"] == "drop_oldest"


async def test_put_rejects_under_reject_and_waits_under_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sink = Sink()
    rejecting = BatchWriter[int](
        "w", sink.write, settings=ActorSettings(inbox_capacity=1, overflow="reject")
    )
    await rejecting.put(1)
    with pytest.raises(InboxFull):
        await rejecting.put(2)
    assert rejecting.stats.dropped == 1

    waiting = BatchWriter[int]("w", sink.write, settings=ActorSettings(inbox_capacity=1))
    await waiting.put(1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting.put, 2)
        await trio.sleep(1.0)
        assert waiting.inbox_depth() == 1  # the second put waits for room
        await waiting.flush()
        await trio.sleep(0.001)
    await waiting.flush()
    assert [n for batch in sink.batches for n in batch] == [1, 2]  # nothing lost


async def test_an_item_taken_by_the_loop_while_a_flush_swaps_the_buffer_is_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sink = Sink()
    writer = BatchWriter[int]("w", sink.write, flush_interval_s=3600.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for n in range(20):  # each one handed to the waiting loop, then an explicit flush
            writer.offer(n)
            await writer.flush()
            assert [i for batch in sink.batches for i in batch] == list(range(n + 1))
        nursery.cancel_scope.cancel()
    assert writer.stats.written == 20


async def test_keep_all_never_refuses_and_holds_back_admission(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sink = Sink(failures=3)  # the store is down for a while
    settings = ActorSettings(inbox_capacity=2, overflow="wait")
    writer = BatchWriter[int]("money", sink.write, settings=settings, keep_all=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        assert all(writer.offer(n) for n in range(5))  # past capacity: still kept
        assert writer.queued() == 5 and not writer.has_room()
        began = trio.current_time()
        await writer.room()  # waits for the writes that make room
        assert trio.current_time() > began and writer.has_room()
        nursery.cancel_scope.cancel()
    assert [i for batch in sink.batches for i in batch] == list(range(5))
    assert writer.stats.dropped == 0


async def test_keep_all_admission_is_refused_under_reject_or_when_the_store_stays_down(
    autojump_clock: trio.testing.MockClock,
) -> None:
    down = Sink(failures=10**6)
    for overflow in ("reject", "wait"):
        settings = ActorSettings(inbox_capacity=1, overflow=overflow)  # type: ignore[arg-type]
        writer = BatchWriter[int]("money", down.write, settings=settings, keep_all=True)
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            writer.offer(1)
            began = trio.current_time()
            with pytest.raises(InboxFull):
                await writer.room(within_s=30.0)
            assert trio.current_time() - began == (0 if overflow == "reject" else 30.0)
            nursery.cancel_scope.cancel()


def test_keep_all_refuses_drop_oldest() -> None:
    settings = ActorSettings(overflow="drop_oldest")
    with pytest.raises(ValueError, match="drop_oldest would lose"):
        BatchWriter[int]("money", Sink().write, settings=settings, keep_all=True)
