"""The circuit breaker (services/routing/breaker.py): trips on N failures of the last M or on
a 429, rests doubling cooldowns, lets one probe through when half-open."""

from __future__ import annotations

from services.routing.breaker import Breaker


def _breaker(**kw: float) -> Breaker:
    settings = {"trip_failures": 3, "trip_window": 5, "cooldown_s": 10.0, "max_cooldown_s": 35.0}
    settings.update(kw)
    return Breaker(
        trip_failures=int(settings["trip_failures"]),
        trip_window=int(settings["trip_window"]),
        cooldown_s=settings["cooldown_s"],
        max_cooldown_s=settings["max_cooldown_s"],
    )


def test_trips_on_n_failures_of_the_last_m() -> None:
    b = _breaker()
    for outcome in (True, False, True, False):  # 2 failures in the window: still closed
        b.failure(0.0) if outcome else b.success()
    assert b.state == "closed" and b.available(0.0)
    assert b.failure(1.0)  # the third failure of the last five
    assert b.state == "open" and not b.available(1.0) and b.open_until == 11.0


def test_old_failures_leave_the_window() -> None:
    b = _breaker()
    b.failure(0.0)
    b.failure(0.0)
    for _ in range(5):
        b.success()
    assert not b.failure(0.0) and b.state == "closed"


def test_a_429_trips_at_once_and_retry_after_lengthens_the_rest() -> None:
    b = _breaker()
    assert b.failure(0.0, rate_limited=True, rest_s=25.0)
    assert b.open_until == 25.0
    assert not b.available(24.9) and b.available(25.0)


def test_half_open_lets_one_probe_and_its_failure_doubles_the_rest() -> None:
    b = _breaker()
    b.trip(0.0)
    assert b.open_until == 10.0
    assert b.available(10.0) and b.state == "half_open"
    b.begin()  # the probe
    assert not b.available(10.5)  # no second request while it runs
    assert b.failure(11.0)  # the probe failed: rest again, twice as long
    assert b.open_until == 31.0
    assert b.available(31.0)
    b.begin()
    b.failure(31.0)
    assert b.open_until == 31.0 + 35.0  # 40 s capped at max_cooldown_s


def test_a_successful_probe_closes_and_the_doubling_starts_over() -> None:
    b = _breaker()
    b.trip(0.0)
    b.trip(10.0)  # a second trip: 20 s
    assert b.open_until == 30.0
    assert b.available(30.0)
    b.begin()
    b.success()
    assert b.state == "closed" and b.trips == 0
    b.trip(40.0)
    assert b.open_until == 50.0


def test_a_probe_without_a_verdict_is_released() -> None:
    b = _breaker()
    b.trip(0.0)
    assert b.available(10.0)
    b.begin()
    assert not b.available(10.0)
    b.release()  # cancelled: another request may probe
    assert b.available(10.0)
