"""The endpoint health repository (storage/endpoint_health.py) on both backends: one lease
holder at a time (an expired lease is taken over), a write without the lease changes nothing,
the transitions and their thresholds; the events' data has the shape of the webhook samples."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.webhook_samples import SAMPLES
from storage.endpoint_health import (
    RECOVERED,
    UNHEALTHY,
    Endpoint,
    EndpointHealthRepository,
    recovered_data,
    unhealthy_data,
)
from storage.open import Storage

pytestmark = pytest.mark.storage

T0 = 1_700_000_000_000_000
TTL = 10_000_000
EAST = Endpoint("ha", "east", "sim-a", "east.example.com")


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


async def test_one_holder_at_a_time_and_nothing_written_without_the_lease(
    storage: Storage,
) -> None:
    repo = EndpointHealthRepository(storage.db)
    await repo.ensure("ha", "east/sim-a", T0)
    await repo.ensure("ha", "east/sim-a", T0 + 5)  # a second instance: the row is kept
    assert await repo.claim("ha", "east/sim-a", "a", T0, TTL)
    assert not await repo.claim("ha", "east/sim-a", "b", T0 + 1, TTL)
    assert await repo.claim("ha", "east/sim-a", "a", T0 + 2, TTL)  # renewed
    assert (
        await repo.record(EAST, "b", T0 + 3, error="x", unhealthy_after=1, healthy_after=1) is None
    )
    state = await repo.get("ha", "east/sim-a")
    assert state is not None and state.healthy and state.consecutive_failures == 0
    assert state.since == T0
    assert await repo.claim("ha", "east/sim-a", "b", T0 + 2 + TTL, TTL)  # expired: taken over
    assert (
        await repo.record(EAST, "a", T0 + 3 + TTL, error="x", unhealthy_after=1, healthy_after=1)
        is None
    )
    await repo.release("ha", "east/sim-a", "a")  # not its lease: nothing changes
    assert not await repo.claim("ha", "east/sim-a", "a", T0 + 4 + TTL, TTL)
    await repo.release("ha", "east/sim-a", "b")
    assert await repo.claim("ha", "east/sim-a", "a", T0 + 5 + TTL, TTL)


async def test_thresholds_and_transitions(storage: Storage) -> None:
    repo = EndpointHealthRepository(storage.db)
    await repo.ensure("ha", "east/sim-a", T0)
    assert await repo.claim("ha", "east/sim-a", "a", T0, 10**12)
    outcomes = []
    for i, error in enumerate(["e1", None, "e2", "e3", "e4", None, "e5", None, None, None]):
        result = await repo.record(
            EAST, "a", T0 + i, error=error, unhealthy_after=2, healthy_after=2
        )
        assert result is not None
        state, event = result
        outcomes.append(
            (state.healthy, state.consecutive_failures, state.consecutive_successes, event)
        )
    assert outcomes == [
        (True, 1, 0, None),
        (True, 0, 1, None),  # a success in between: the failures start over
        (True, 1, 0, None),
        (False, 2, 0, UNHEALTHY),
        (False, 3, 0, None),
        (False, 0, 1, None),
        (False, 1, 0, None),
        (False, 0, 1, None),
        (True, 0, 2, RECOVERED),
        (True, 0, 3, None),
    ]
    state = await repo.get("ha", "east/sim-a")
    assert state is not None and state.since == T0 + 8 and state.last_checked_at == T0 + 9


async def test_event_data_has_the_samples_shape(storage: Storage) -> None:
    repo = EndpointHealthRepository(storage.db)
    await repo.ensure("ha", "east/sim-a", T0)
    state = await repo.get("ha", "east/sim-a")
    assert state is not None
    assert _shape(SAMPLES[UNHEALTHY]) == _shape(unhealthy_data(EAST, state))
    assert _shape(SAMPLES[RECOVERED]) == _shape(recovered_data(EAST, state, T0))
    assert unhealthy_data(EAST, state)["since"] == "2023-11-14T22:13:20Z"
