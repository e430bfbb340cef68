"""A reservation that needs I/O is a message to the running accountant, answered through its
inbox (one with no I/O to do stays a plain call: docs/decisions.md): while the accountant is
down (restarting after a crash) reservations wait in its inbox, visible in the admin tree's
statistics, and are answered once it is back. A requester that gives up while waiting holds
nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import coredis
import pytest
import trio

from actors.accountant import Accountant, InsufficientCredits
from actors.shared_holds import SharedHolds
from actors.supervisor import RestartPolicy, Supervisor
from protocol.billing import TOPUP
from protocol.ids import random_token
from storage.ledger import LedgerRepository
from storage.open import Storage
from tests.backends import REDIS_URL
from tests.charges import usage_charge
from tests.waiting import wait_until


async def funded(storage: Storage, micros: int) -> str:
    org = (await storage.orgs.create("acme")).id
    await storage.ledger.apply(org, TOPUP, micros, "top-up")
    return org


class GatedLedger(LedgerRepository):
    """Reading an account waits for the test to open the gate (a slow database)."""

    gate = trio.Event()

    async def account(self, org_id: str):  # type: ignore[no-untyped-def]
        await self.gate.wait()
        return await super().account(org_id)


async def test_a_reservation_needing_io_is_answered_through_the_inbox(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    ledger = GatedLedger(storage.db)
    ledger.gate = trio.Event()
    acc = Accountant(ledger, storage.orgs, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(acc.run)
        answers: list[object] = []

        async def reserve(micros: int) -> None:
            try:
                answers.append(await acc.reserve(org, micros))
            except InsufficientCredits as exc:
                answers.append(exc)

        nursery.start_soon(reserve, 600)
        nursery.start_soon(reserve, 600)
        await wait_until(lambda: acc.statistics()["reserving"] == 2)  # both wait for the read
        inbox = acc.statistics()["inbox"]
        assert isinstance(inbox, dict) and inbox["received"] == 2
        ledger.gate.set()
        await wait_until(lambda: len(answers) == 2)
        # One fits, the other is refused: the check and the hold are still one step.
        assert sorted(type(a).__name__ for a in answers) == ["InsufficientCredits", "Reservation"]
        assert acc.reserve_now(org, 400) is not None  # the view is in memory now: no message
        assert acc.statistics()["inbox"] == {**inbox, "received": 2, "sent": 2}
        nursery.cancel_scope.cancel()


async def test_a_requester_that_gives_up_holds_nothing(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    ledger = GatedLedger(storage.db)
    ledger.gate = trio.Event()
    acc = Accountant(ledger, storage.orgs, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(acc.run)
        with trio.move_on_after(0.05):
            await acc.reserve(org, 1_000)  # gives up while its reservation waits
        ledger.gate.set()
        await wait_until(lambda: acc.statistics()["reserving"] == 0)
        reservation = await acc.reserve(org, 1_000)  # all of it: the abandoned one was let go
        acc.settle(reservation, usage_charge(org, 1_000))
        await acc.flush()
        nursery.cancel_scope.cancel()
    assert (await storage.ledger.account(org)).balance_micros == 0


class CrashingOnce(SharedHolds):
    """Its first heartbeat fails with a bug (not a Redis failure): the accountant crashes."""

    crashed = False

    async def heartbeat(self) -> None:
        if not self.crashed:
            self.crashed = True
            raise RuntimeError("a bug in the heartbeat")
        await super().heartbeat()


@pytest.fixture
async def redis() -> AsyncIterator[tuple[coredis.Redis[bytes], str]]:
    if REDIS_URL is None:
        pytest.skip("GATEWAY_TEST_REDIS_URL is not set: no Redis to test against")
    prefix = f"test:{random_token(12)}:"
    async with coredis.Redis.from_url(REDIS_URL) as client:
        yield client, prefix
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(keys)


async def test_a_crashed_accountant_is_restarted_and_answers_what_waited(
    storage: Storage, redis: tuple[coredis.Redis[bytes], str]
) -> None:
    client, prefix = redis
    org = await funded(storage, 1_000)
    shared = CrashingOnce(client, prefix=prefix)
    acc = Accountant(storage.ledger, storage.orgs, shared=shared, flush_interval_s=3600)
    supervisor = Supervisor("root")
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        await supervisor.start(acc, policy=RestartPolicy(initial_backoff=0.5))
        await wait_until(lambda: supervisor.snapshot().children[0].state == "backoff")
        answers = []

        async def reserve() -> None:
            answers.append(await acc.reserve(org, 300))

        nursery.start_soon(reserve)
        # Down: the reservation waits in the inbox, and the admin tree shows it.
        await wait_until(lambda: supervisor.snapshot().children[0].inbox_depth == 1)
        assert answers == []
        await wait_until(lambda: len(answers) == 1)  # restarted, and answered
        child = supervisor.snapshot().children[0]
        assert child.state == "running" and child.restarts == 1 and child.inbox_depth == 0
        second = await acc.reserve(org, 700)  # and later ones too
        for reservation in (answers[0], second):
            acc.settle(reservation, usage_charge(org, reservation.micros))
        await acc.flush()
        nursery.cancel_scope.cancel()
    assert (await storage.ledger.account(org)).balance_micros == 0
