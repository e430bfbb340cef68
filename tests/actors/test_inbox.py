"""Inbox back-pressure and counters, Reply's one-shot rule, and ask() against a real actor."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio
import trio.testing

from actors import Actor, Inbox, Reply, Supervisor, ask
from actors.errors import InboxFull


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


# -- Inbox ------------------------------------------------------------------------------------


def test_capacity_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Inbox[int](-1)


async def test_send_nowait_raises_would_block_when_full() -> None:
    inbox: Inbox[int] = Inbox(2)
    inbox.send_nowait(1)
    inbox.send_nowait(2)
    with pytest.raises(trio.WouldBlock):
        inbox.send_nowait(3)
    assert inbox.depth() == 2
    assert (
        inbox.statistics().items() >= {"depth": 2, "capacity": 2, "sent": 2, "received": 0}.items()
    )


async def test_send_blocks_while_full_and_resumes_when_space_frees() -> None:
    inbox: Inbox[int] = Inbox(1)
    inbox.send_nowait(1)
    delivered = trio.Event()

    async def sender() -> None:
        await inbox.send(2)
        delivered.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        assert not delivered.is_set()
        assert inbox.statistics()["sent"] == 1

        assert await inbox.receive() == 1
        await trio.testing.wait_all_tasks_blocked()
        assert delivered.is_set()
        assert inbox.depth() == 1
        assert await inbox.receive() == 2
    assert (
        inbox.statistics().items() >= {"depth": 0, "capacity": 1, "sent": 2, "received": 2}.items()
    )


async def test_cancelled_send_delivers_nothing(autojump_clock: trio.testing.MockClock) -> None:
    inbox: Inbox[str] = Inbox(1)
    inbox.send_nowait("first")
    with trio.move_on_after(5) as scope:
        await inbox.send("second")
    assert scope.cancelled_caught
    assert inbox.depth() == 1
    assert inbox.statistics()["sent"] == 1
    assert await inbox.receive() == "first"
    assert inbox.depth() == 0  # "second" was never queued


async def test_close_lets_receivers_drain_then_ends_iteration() -> None:
    inbox: Inbox[int] = Inbox(4)
    for i in range(3):
        await inbox.send(i)
    inbox.close()
    assert inbox.closed
    with pytest.raises(trio.ClosedResourceError):
        await inbox.send(99)
    with pytest.raises(trio.ClosedResourceError):
        inbox.send_nowait(99)

    assert [msg async for msg in inbox] == [0, 1, 2]
    with pytest.raises(trio.EndOfChannel):
        await inbox.receive()
    assert (
        inbox.statistics().items() >= {"depth": 0, "capacity": 4, "sent": 3, "received": 3}.items()
    )


async def test_close_wakes_a_waiting_receiver() -> None:
    inbox: Inbox[int] = Inbox(1)
    seen: list[int] = []

    async def consume() -> None:
        async for msg in inbox:
            seen.append(msg)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await inbox.send(7)
        await trio.testing.wait_all_tasks_blocked()
        inbox.close()  # the consumer must leave its loop, or this nursery never exits
    assert seen == [7]


# -- Reply ------------------------------------------------------------------------------------


async def test_reply_wait_returns_the_value_once_set() -> None:
    reply: Reply[int] = Reply()
    got: list[int] = []

    async def requester() -> None:
        got.append(await reply.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(requester)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        assert not reply.done
        reply.set(42)
    assert got == [42]
    assert reply.done


async def test_reply_none_is_a_valid_answer() -> None:
    reply: Reply[int | None] = Reply()
    reply.set(None)
    assert await reply.wait() is None


async def test_reply_fail_raises_in_the_requester() -> None:
    reply: Reply[int] = Reply()
    reply.fail(LookupError("no such key"))
    with pytest.raises(LookupError, match="no such key"):
        await reply.wait()


@pytest.mark.parametrize(
    ("first", "second"),
    [("set", "set"), ("set", "fail"), ("fail", "set"), ("fail", "fail")],
)
def test_reply_can_be_answered_only_once(first: str, second: str) -> None:
    reply: Reply[int] = Reply()

    def answer(how: str, value: int) -> None:
        if how == "set":
            reply.set(value)
        else:
            reply.fail(ValueError(str(value)))

    answer(first, 1)
    with pytest.raises(RuntimeError, match="already answered"):
        answer(second, 2)


# -- ask() with a tiny actor ------------------------------------------------------------------


@dataclass
class EchoRequest:
    text: str
    reply: Reply[str]


class Echo(Actor):
    def __init__(self, name: str = "echo", capacity: int = 4) -> None:
        self.name = name
        self.inbox: Inbox[EchoRequest] = Inbox(capacity)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async for request in self.inbox:
            if request.text == "fail":
                request.reply.fail(ValueError("asked to fail"))
            else:
                request.reply.set(request.text.upper())

    def inbox_depth(self) -> int:
        return self.inbox.depth()

    def inbox_capacity(self) -> int | None:
        return self.inbox.capacity

    def statistics(self) -> dict[str, object]:
        return self.inbox.statistics()


async def test_ask_round_trip_with_echo_actor() -> None:
    root = Supervisor()
    echo = Echo()
    async with trio.open_nursery() as nursery:
        await nursery.start(root.run)
        await root.start(echo)

        assert await ask(echo.inbox, lambda reply: EchoRequest("hi", reply)) == "HI"
        with pytest.raises(ValueError, match="asked to fail"):
            await ask(echo.inbox, lambda reply: EchoRequest("fail", reply))
        # A failed request is an answer, not a crash: the actor keeps serving.
        assert await ask(echo.inbox, lambda reply: EchoRequest("again", reply)) == "AGAIN"

        stats = root.snapshot().children[0].statistics
        assert stats.items() >= {"depth": 0, "capacity": 4, "sent": 3, "received": 3}.items()
        assert repr(echo) == "<Echo name='echo' inbox=0/4>"

        # Closing the inbox ends the actor's loop; returning normally retires it.
        echo.inbox.close()
        await trio.testing.wait_all_tasks_blocked()
        assert root.get("echo") is None
        nursery.cancel_scope.cancel()


async def test_ask_waits_for_room_in_a_full_inbox() -> None:
    echo = Echo(capacity=1)
    echo.inbox.send_nowait(EchoRequest("queued", Reply()))
    answers: list[str] = []

    async def requester() -> None:
        answers.append(await ask(echo.inbox, lambda reply: EchoRequest("late", reply)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(requester)
        await trio.testing.wait_all_tasks_blocked()
        assert echo.inbox.statistics()["sent"] == 1  # the ask is held back by the full inbox
        await nursery.start(echo.run)
        await trio.testing.wait_all_tasks_blocked()
        assert answers == ["LATE"]
        nursery.cancel_scope.cancel()


# -- overflow policies ------------------------------------------------------------------------


async def test_put_with_wait_waits_for_room(autojump_clock: trio.testing.MockClock) -> None:
    inbox: Inbox[int] = Inbox(1, overflow="wait")
    await inbox.put(1)
    with trio.move_on_after(5) as waited:
        await inbox.put(2)
    assert waited.cancelled_caught  # still full: the sender waited
    assert inbox.receive_nowait() == 1
    await inbox.put(2)
    assert inbox.receive_nowait() == 2


async def test_put_with_reject_raises_inbox_full_and_counts() -> None:
    inbox: Inbox[int] = Inbox(2, overflow="reject", name="rate_limiter")
    await inbox.put(1)
    await inbox.put(2)
    with pytest.raises(InboxFull) as refused:
        await inbox.put(3)
    assert refused.value.inbox == "rate_limiter"
    assert refused.value.capacity == 2
    assert inbox.statistics()["rejected"] == 1
    assert [inbox.receive_nowait(), inbox.receive_nowait()] == [1, 2]  # nothing lost or added


async def test_put_with_drop_oldest_keeps_the_newest() -> None:
    inbox: Inbox[int] = Inbox(2, overflow="drop_oldest")
    for n in range(5):
        await inbox.put(n)
    assert inbox.statistics()["dropped"] == 3
    assert [inbox.receive_nowait(), inbox.receive_nowait()] == [3, 4]


def test_drop_oldest_needs_room_for_one() -> None:
    with pytest.raises(ValueError, match="drop_oldest"):
        Inbox(0, overflow="drop_oldest")
