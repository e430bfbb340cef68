"""The provider-key report throttle: one `provider_key.invalid` report per key per interval,
decided without I/O (services/provider_keys.py, `ReportThrottle`)."""

from __future__ import annotations

from services.provider_keys import ReportThrottle

KEY = ("pk_1", "sealed-a")


def test_first_report_is_claimed_then_held_for_the_interval() -> None:
    throttle = ReportThrottle(interval=60.0)
    assert throttle.claim(KEY, now=100.0)
    assert not throttle.claim(KEY, now=100.0)
    assert not throttle.claim(KEY, now=159.9)
    assert throttle.claim(KEY, now=160.0)


def test_keys_and_their_sealed_values_are_throttled_apart() -> None:
    throttle = ReportThrottle(interval=60.0)
    assert throttle.claim(KEY, now=0.0)
    assert throttle.claim(("pk_2", "sealed-a"), now=0.0)
    assert throttle.claim(("pk_1", "sealed-b"), now=0.0)  # the key was set again: a new value


def test_a_released_claim_can_be_claimed_again() -> None:
    throttle = ReportThrottle(interval=60.0)
    assert throttle.claim(KEY, now=0.0)
    throttle.release(KEY)  # the write did not happen (cancelled, failed)
    assert throttle.claim(KEY, now=1.0)


def test_memory_is_bounded() -> None:
    throttle = ReportThrottle(interval=60.0, max_entries=3)
    for i in range(3):
        assert throttle.claim((f"pk_{i}", "s"), now=0.0)
    assert throttle.claim(("pk_3", "s"), now=0.0)  # full: forgotten, at worst one extra report
    assert len(throttle) <= 3
