"""Wall-clock time that moves with Trio's clock.

Stored times (lease expiry, `next_attempt_at`, attempt `started_at`) are wall-clock
microseconds, shared with other instances; sleeps are on Trio's clock. Anchoring the wall clock
once and advancing it by Trio time keeps the two in step, so a test's MockClock drives retries
and lease expiry, and a stored due time converts back to a Trio deadline exactly.
"""

from __future__ import annotations

import time

import trio


class WallClock:
    """`now_us()`: the wall time at the first call plus the Trio time elapsed since."""

    def __init__(self, wall_us_at_start: int | None = None) -> None:
        self._wall_start = wall_us_at_start
        self._trio_start: float | None = None

    def _anchor(self) -> tuple[int, float]:
        if self._trio_start is None:
            self._trio_start = trio.current_time()
            if self._wall_start is None:
                self._wall_start = time.time_ns() // 1000
        assert self._wall_start is not None
        return self._wall_start, self._trio_start

    def now_us(self) -> int:
        wall, started = self._anchor()
        return wall + round((trio.current_time() - started) * 1_000_000)

    def now_s(self) -> float:
        return self.now_us() / 1_000_000

    def trio_time_at(self, wall_us: int) -> float:
        """The Trio time at which `now_us()` reaches `wall_us`."""
        wall, started = self._anchor()
        return started + (wall_us - wall) / 1_000_000
