"""Top-ups interrupted at every await point, on both backends: by the client leaving (the
caller's scope cancelled) and by the top-up's own deadline. After each: the balance is the sum
of the ledger rows, what the processor kept is what was credited, and a retry with the same
Idempotency-Key succeeds once (no 409 lock, no second charge or credit)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest
import trio
import trio.lowlevel
import trio.testing

from actors.accountant import Accountant
from gateway.credits import topups
from protocol import errors
from protocol.billing import TOPUP
from protocol.timefmt import now_us
from services.payments import TestPaymentProcessor
from storage.open import Storage

MICROS = 10_000_000
BODY = b'{"amount_usd": 10}'
MAX_STEPS = 400


class StepTrigger(trio.abc.Instrument):
    """Calls `action` just before the watched task's `at`-th step."""

    def __init__(self, at: int, action: Callable[[], None]) -> None:
        self.at = at
        self.action = action
        self.task: trio.lowlevel.Task | None = None
        self.steps = 0

    @property
    def fired(self) -> bool:
        return self.steps >= self.at

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is not self.task:
            return
        self.steps += 1
        if self.steps == self.at:
            self.action()


async def run_top_up(
    storage: Storage, acc: Accountant, payments: TestPaymentProcessor, org: str, key: str
) -> topups.TopupOutcome:
    return await topups.top_up(
        storage,
        acc,
        payments,
        org_id=org,
        method=await payments.method(org, "pm_card_visa"),
        micros=MICROS,
        key=key,
        body=BODY,
    )


async def interrupted(
    storage: Storage,
    acc: Accountant,
    payments: TestPaymentProcessor,
    org: str,
    at: int,
    how: str,
    clock: trio.testing.MockClock,
) -> bool:
    """Run a top-up interrupted before its `at`-th step; True when the interruption fired."""
    outer = trio.CancelScope()

    def interrupt() -> None:
        if how == "client_leaves":
            outer.cancel()
        else:  # the top-up's own deadline runs out
            clock.jump(topups.FINISH_S + 1)

    trigger = StepTrigger(at, interrupt)

    async def attempt() -> None:
        trigger.task = trio.lowlevel.current_task()
        with outer:
            try:
                await run_top_up(storage, acc, payments, org, "k1")
            except errors.APIError as exc:
                assert exc.status == 503, exc  # timed out and undone

    trio.lowlevel.add_instrument(trigger)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(attempt)
    finally:
        trio.lowlevel.remove_instrument(trigger)
    return trigger.fired


async def check_money(storage: Storage, payments: TestPaymentProcessor, org: str) -> int:
    account = await storage.ledger.account(org)
    rows = await storage.ledger.sum_rows(org)
    assert account.balance_micros == rows
    topped, _ = await storage.ledger.list(org, type=TOPUP, limit=100, offset=0)
    assert len({t.id for t in topped}) == len(topped) <= 1  # credited at most once
    assert payments.net_micros(org) == sum(t.amount_micros for t in topped)  # kept = credited
    return rows


@pytest.mark.parametrize("how", ["client_leaves", "deadline"])
async def test_a_top_up_interrupted_anywhere_is_finished_or_undone_and_a_retry_succeeds(
    storage: Storage, how: str, mock_clock: trio.testing.MockClock
) -> None:
    payments = TestPaymentProcessor()
    acc = Accountant(storage.ledger, storage.orgs, payments=payments)
    for at in range(1, MAX_STEPS):
        org = (await storage.orgs.create(f"org{at}")).id
        fired = await interrupted(storage, acc, payments, org, at, how, mock_clock)
        credited = await check_money(storage, payments, org)
        if how == "client_leaves":  # shielded: it finished although its caller left
            assert credited == MICROS
        retry = await run_top_up(storage, acc, payments, org, "k1")
        assert retry.result.amount_usd == 10.0
        assert await check_money(storage, payments, org) == MICROS
        again = await run_top_up(storage, acc, payments, org, "k1")
        assert again.replayed and again.result == retry.result
        assert payments.net_micros(org) == MICROS
        if not fired:
            break
    else:
        pytest.fail(f"the top-up still had steps after {MAX_STEPS}")
    assert at > 3, "the interruption never reached the top-up's steps"


async def test_a_top_up_whose_process_died_is_finished_by_a_retry_minutes_later(
    storage: Storage,
) -> None:
    payments = TestPaymentProcessor()
    acc = Accountant(storage.ledger, storage.orgs, payments=payments)
    org = (await storage.orgs.create("acme")).id
    method = await payments.method(org, "pm_card_visa")
    fingerprint = hashlib.sha256(BODY).hexdigest()
    # What a process that died after charging left: a claim in progress and a charge.
    started = now_us() - topups.IN_PROGRESS_TTL_US - 1
    claim = await storage.idempotency.claim(
        org, "topup:k1", fingerprint, now_us=started, ttl_us=topups.IN_PROGRESS_TTL_US
    )
    assert claim.won
    await payments.charge(org, method, MICROS, f"topup:{org}:k1")
    outcome = await run_top_up(storage, acc, payments, org, "k1")
    assert not outcome.replayed and outcome.result.new_balance_usd == 10.0
    assert len(payments.charges) == 1  # the same charge, now credited
    assert await check_money(storage, payments, org) == MICROS
    # Completed: kept for a day, not for the in-progress time to live.
    row = await storage.db.fetchrow(
        "SELECT expires_at FROM idempotency_keys WHERE org_id = :org", {"org": org}
    )
    assert row is not None and row["expires_at"] > now_us() + topups.IDEMPOTENCY_TTL_US // 2


async def test_a_top_up_in_progress_elsewhere_is_409(storage: Storage) -> None:
    payments = TestPaymentProcessor()
    acc = Accountant(storage.ledger, storage.orgs, payments=payments)
    org = (await storage.orgs.create("acme")).id
    fingerprint = hashlib.sha256(BODY).hexdigest()
    await storage.idempotency.claim(
        org, "topup:k1", fingerprint, now_us=now_us(), ttl_us=topups.IN_PROGRESS_TTL_US
    )
    with pytest.raises(errors.APIError) as raised:
        await run_top_up(storage, acc, payments, org, "k1")
    assert raised.value.status == 409 and payments.attempts == 0
