"""Requests an actor answers in tasks of its own, through its inbox: `Asking[Q, R]`.

`ask` puts a request in the actor's inbox (the inbox's overflow applies) and waits for the
answer; the actor's `serve` loop starts one task per request (`answer`), so one slow request
does not hold the others, and the inbox holds what arrives while the actor is down
(restarting after a crash), to be answered once it is back. A requester that stops waiting
(cancelled, timed out) abandons its request: an answer made for it, or made later, is handed
to `release` (e.g. a reservation let go), never kept. `refuse_waiting` answers what is left
when the actor stops for good; a requester waits at most `answer_within_s` (an actor its
supervisor gave up on answers nothing), then gets `ActorBroken`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import trio

from actors.errors import ActorBroken
from actors.inbox import Inbox, Reply
from actors.settings import ActorSettings

Q = TypeVar("Q")
R = TypeVar("R")


@dataclass(eq=False)
class _Request(Generic[Q, R]):
    question: Q
    reply: Reply[R] = field(default_factory=Reply)
    answer: R | None = None  # set once answered, for `release` if the requester gave up
    abandoned: bool = False


class Asking(Generic[Q, R]):
    def __init__(
        self,
        name: str,
        settings: ActorSettings,
        answer: Callable[[Q], Awaitable[R]],
        release: Callable[[R], None],
        *,
        answer_within_s: float = 30.0,
    ) -> None:
        self.inbox: Inbox[_Request[Q, R]] = Inbox(
            settings.inbox_capacity, overflow=settings.overflow, name=name
        )
        self._name = name
        self._answer = answer
        self._release = release
        self._answer_within_s = answer_within_s
        self.answering = 0  # requests being answered now

    async def ask(self, question: Q) -> R:
        request: _Request[Q, R] = _Request(question)
        await self.inbox.put(request)
        try:
            with trio.fail_after(self._answer_within_s):
                return await request.reply.wait()
        except trio.TooSlowError:
            request.abandoned = True
            if request.answer is not None:
                self._release(request.answer)
            raise ActorBroken(
                f"the {self._name} did not answer within {self._answer_within_s} s"
            ) from None
        except BaseException:
            request.abandoned = True  # what was or will be answered is let go
            if request.answer is not None:
                self._release(request.answer)
            raise

    async def serve(self, tasks: trio.Nursery) -> None:
        """The actor's loop: one task in `tasks` per request, until cancelled."""
        while True:
            request = await self.inbox.receive()
            if not request.abandoned:
                self.answering += 1
                tasks.start_soon(self._answer_one, request)

    async def _answer_one(self, request: _Request[Q, R]) -> None:
        began = trio.current_time()
        try:
            answer = await self._answer(request.question)
            self.inbox.handled(trio.current_time() - began)
        except Exception as exc:  # a refusal or a failure: the requester's answer
            request.reply.fail(exc)
            return
        except BaseException:  # stopped or crashed before answering
            request.reply.fail(ActorBroken(f"the {self._name} stopped before answering"))
            raise
        finally:
            self.answering -= 1
        if request.abandoned:
            self._release(answer)
            return
        request.answer = answer
        request.reply.set(answer)

    def refuse_waiting(self) -> None:
        """Stopped for good: fail what waits in the inbox (its requesters would wait forever)."""
        while True:
            try:
                request = self.inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return
            request.reply.fail(ActorBroken(f"the {self._name} stopped before answering"))
