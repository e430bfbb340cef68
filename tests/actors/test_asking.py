"""`Asking`: requests answered by tasks of an actor through its inbox; an abandoned request's
answer is released, a request nobody answers fails after its bound, and a stop refuses what
waits."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.asking import Asking
from actors.errors import ActorBroken
from actors.settings import ActorSettings


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class Holder:
    """Answers n with n after `delay` seconds; keeps what was released."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.released: list[int] = []

    async def answer(self, n: int) -> int:
        await trio.sleep(self.delay)
        if n < 0:
            raise ValueError("refused")
        return n

    def asking(self, **kw: float) -> Asking[int, int]:
        return Asking(
            "holder", ActorSettings(inbox_capacity=4), self.answer, self.released.append, **kw
        )


async def test_requests_are_answered_concurrently(autojump_clock: trio.testing.MockClock) -> None:
    holder = Holder(delay=1.0)
    asking = holder.asking()
    answers: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(asking.serve, nursery)
        start = trio.current_time()

        async def ask(n: int) -> None:
            answers.append(await asking.ask(n))

        async with trio.open_nursery() as requests:
            for n in range(3):
                requests.start_soon(ask, n)
        assert trio.current_time() - start == pytest.approx(1.0)  # not 3 s: one task each
        with pytest.raises(ValueError):
            await asking.ask(-1)  # a refusal is the requester's answer
        nursery.cancel_scope.cancel()
    assert sorted(answers) == [0, 1, 2] and asking.answering == 0


async def test_an_abandoned_request_has_its_answer_released(
    autojump_clock: trio.testing.MockClock,
) -> None:
    holder = Holder(delay=1.0)
    asking = holder.asking()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(asking.serve, nursery)
        with trio.move_on_after(0.5):
            await asking.ask(7)
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert holder.released == [7]


async def test_nobody_answering_fails_after_the_bound_and_a_stop_refuses_what_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    holder = Holder()
    asking = holder.asking(answer_within_s=5.0)
    with pytest.raises(ActorBroken):
        await asking.ask(1)  # nobody serves
    refused: list[BaseException] = []

    async def ask() -> None:
        try:
            await asking.ask(2)
        except ActorBroken as exc:
            refused.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.sleep(1.0)
        assert asking.inbox.depth() == 2  # the abandoned one is still there, and this one
        asking.refuse_waiting()
    assert len(refused) == 1
