"""Fixtures for the simulated Stripe's tests: a sim on loopback (short webhook retry schedule,
a movable clock) and the SDK's async client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import stripe

from bench.stripe import StripeSim, running_stripe_sim
from tests.bench.stripe_sim.support import KEY, Clock, sdk_client


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def sim(clock: Clock) -> AsyncIterator[StripeSim]:
    async with running_stripe_sim(
        secret_key=KEY, retry_schedule_s=(0.01, 0.02, 0.04), attempt_timeout_s=2.0, now=clock
    ) as started:
        yield started


@pytest.fixture
async def client(sim: StripeSim) -> AsyncIterator[stripe.StripeClient]:
    made, http = sdk_client(sim)
    try:
        yield made
    finally:
        await http.close_async()
