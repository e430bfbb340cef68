"""Bounded mailboxes and one-shot replies: how callers talk to actors.

`Inbox` wraps a `trio.open_memory_channel` so that a full mailbox pushes back on senders and the
admin tree can show depth and counters. `Reply` is the slot a request carries so the actor can
answer exactly once; `ask` glues the two together. Nothing here knows about supervision.

Errors are trio's own, with trio's meanings: `trio.ClosedResourceError` when sending to an inbox
we closed, `trio.EndOfChannel` when receiving from a closed inbox that has been drained,
`trio.WouldBlock` from `send_nowait` on a full inbox.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import Generic, TypeVar, cast

import trio

from actors.errors import InboxFull
from actors.settings import Overflow

T = TypeVar("T")
M = TypeVar("M")
R = TypeVar("R")


class Inbox(Generic[T]):
    """A bounded mailbox: ``trio.open_memory_channel(capacity)`` with depth and counters.

    The inbox belongs to the actor instance, not to one ``run()`` call, so messages queued while
    an actor crashes are still there for the restarted run.
    """

    def __init__(
        self, capacity: int, *, overflow: Overflow = "wait", name: str = "", unbounded: bool = False
    ) -> None:
        """`unbounded`: the channel itself never fills (sends never wait nor fail) and
        `capacity` is a bound the owner enforces elsewhere (a writer whose items must never be
        refused applies it to the admission of new work instead: `BatchWriter(keep_all=True)`)."""
        if capacity < 0:
            raise ValueError(f"inbox capacity must be >= 0, got {capacity}")
        if overflow == "drop_oldest" and capacity < 1:
            raise ValueError("drop_oldest needs an inbox capacity of at least 1")
        self._capacity = capacity
        self.overflow: Overflow = overflow
        self.name = name
        self.dropped = 0  # messages dropped by "drop_oldest"
        self._timings = HandlingTimes()
        self.rejected = 0  # sends refused by "reject"
        self._send, self._receive = trio.open_memory_channel[T](math.inf if unbounded else capacity)
        self._sent = 0
        self._received = 0
        self._closed = False

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def closed(self) -> bool:
        """True once `close` was called (messages may still be waiting to be received)."""
        return self._closed

    async def send(self, msg: T) -> None:
        """Put ``msg`` in the inbox, waiting while it is full (back-pressure).

        Cancellation while waiting leaves the inbox unchanged: the message was not sent.
        Raises `trio.ClosedResourceError` if the inbox was closed.
        """
        await self._send.send(msg)
        self._sent += 1

    def send_nowait(self, msg: T) -> None:
        """Put ``msg`` in the inbox or raise `trio.WouldBlock` if it is full."""
        self._send.send_nowait(msg)
        self._sent += 1

    async def put(self, msg: T) -> None:
        """Send ``msg`` the way this inbox's ``overflow`` says when it is full.

        "wait": like `send`. "reject": raise `InboxFull` at once. "drop_oldest": drop the
        oldest waiting message (counted in ``dropped``) to make room; never waits.
        """
        if self.overflow == "wait":
            await self.send(msg)
            return
        try:
            self.send_nowait(msg)
        except trio.WouldBlock:
            if self.overflow == "reject":
                self.rejected += 1
                raise InboxFull(self.name, self._capacity) from None
            self.drop_oldest()  # full, so there is one to drop
            self.send_nowait(msg)
        else:
            await trio.lowlevel.checkpoint()

    async def receive(self) -> T:
        """Take the oldest message, waiting while the inbox is empty.

        Cancellation while waiting takes nothing. Raises `trio.EndOfChannel` once the inbox is
        closed and drained.
        """
        msg = await self._receive.receive()
        self._received += 1
        return msg

    def receive_nowait(self) -> T:
        """Take the oldest message or raise `trio.WouldBlock` when empty (`trio.EndOfChannel`
        once closed and drained)."""
        msg = self._receive.receive_nowait()
        self._received += 1
        return msg

    def drop_oldest(self) -> T:
        """Take the oldest message out unhandled (counted in `dropped`); `trio.WouldBlock`
        when empty."""
        msg = self._receive.receive_nowait()
        self.dropped += 1
        return msg

    def __aiter__(self) -> Inbox[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def close(self) -> None:
        """Close the send side: later sends raise, receivers drain what is left and then stop."""
        self._closed = True
        self._send.close()

    def depth(self) -> int:
        """Messages sent and not yet received nor dropped; counts one handed to a receiver
        that has not resumed yet (which the channel's buffer no longer holds)."""
        return self._sent - self._received - self.dropped

    def in_transit(self) -> int:
        """Messages handed to a waiting receiver that has not resumed yet (0 or 1)."""
        return self.depth() - self._receive.statistics().current_buffer_used

    def handled(self, seconds: float, messages: int = 1) -> None:
        """Record that the actor handled `messages` messages (a batch) in `seconds` (Trio's
        clock): each of them took that long."""
        self._timings.record(seconds, messages)

    def handling(self) -> tuple[int, float | None]:
        """Messages handled and the p99 of their handling time (see `HandlingTimes`)."""
        return self._timings.count, self._timings.p99()

    def statistics(self) -> dict[str, object]:
        return {
            "depth": self.depth(),
            "capacity": self._capacity,
            "sent": self._sent,
            "received": self._received,
            "overflow": self.overflow,
            "dropped": self.dropped,
            "rejected": self.rejected,
        }

    def __repr__(self) -> str:
        return f"<Inbox {self.depth()}/{self._capacity} sent={self._sent}>"


class HandlingTimes:
    """How long an actor takes per message: a count and the last `keep` durations, from
    which the p99 is read on demand (the admin tree, /metrics), so recording costs an append."""

    def __init__(self, keep: int = 1024) -> None:
        self.count = 0
        self._keep = keep
        self._recent: deque[float] = deque(maxlen=keep)

    def record(self, seconds: float, messages: int = 1) -> None:
        self.count += messages
        if messages == 1:
            self._recent.append(seconds)
        else:  # one C call for a batch
            self._recent.extend(repeat(seconds, min(messages, self._keep)))

    def p99(self) -> float | None:
        if not self._recent:
            return None
        ordered = sorted(self._recent)
        return ordered[math.ceil(len(ordered) * 0.99) - 1]  # nearest rank


class Reply(Generic[T]):
    """One-shot reply slot carried by a request message.

    The actor calls `set` or `fail` exactly once; the requester awaits `wait`. A second
    `set`/`fail` raises `RuntimeError`, because two answers to one request is a bug in the actor.
    """

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None
        self._error: Exception | None = None

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def set(self, value: T) -> None:
        self._check_unanswered()
        self._value = value
        self._event.set()

    def fail(self, exc: Exception) -> None:
        self._check_unanswered()
        self._error = exc
        self._event.set()

    async def wait(self) -> T:
        """Wait for the answer: return the value, or raise the exception given to `fail`.

        Cancellation abandons the wait only; the actor may still answer, and nobody hears it.
        There is no built-in timeout: wrap the call in `trio.fail_after` if the actor may die.
        """
        await self._event.wait()
        if self._error is not None:
            raise self._error
        # cast, not `assert is not None`: None is a legitimate answer when T allows it.
        return cast(T, self._value)

    def _check_unanswered(self) -> None:
        if self._event.is_set():
            raise RuntimeError("reply already answered")


async def ask(inbox: Inbox[M], make: Callable[[Reply[R]], M]) -> R:
    """Send ``make(reply)`` to ``inbox`` with a fresh `Reply` and wait for the answer.

    Cancelled while sending: nothing was sent. Cancelled while waiting: the request was sent and
    its answer is dropped. Wrap in `trio.fail_after` to bound the wait.
    """
    reply: Reply[R] = Reply()
    await inbox.send(make(reply))
    return await reply.wait()
