"""One deployment's circuit breaker: closed, open (cooling down), half-open (one probe).

A deployment trips when `trip_failures` of its last `trip_window` attempts failed, or when it
answered 429 (the provider says it is over its limit: trying it again at once only adds to
that). A tripped deployment rests `cooldown_s`, doubled on each trip that follows another
without a success between them, up to `max_cooldown_s` (and at least the provider's
`Retry-After` when it gave one). Once rested it is half-open: one request (the probe) may try
it; a success closes it (the doubling starts over), a failure trips it again. Times are the
caller's clock (Trio's); no I/O.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

State = Literal["closed", "open", "half_open"]


class Breaker:
    __slots__ = (
        "_cooldown_s",
        "_max_cooldown_s",
        "_probing",
        "_recent",
        "_trip_failures",
        "open_until",
        "state",
        "trips",
    )

    def __init__(
        self, *, trip_failures: int, trip_window: int, cooldown_s: float, max_cooldown_s: float
    ) -> None:
        self._trip_failures = trip_failures
        self._cooldown_s = cooldown_s
        self._max_cooldown_s = max_cooldown_s
        self._recent: deque[bool] = deque(maxlen=trip_window)  # True: a failure
        self._probing = False
        self.state: State = "closed"
        self.open_until = 0.0
        self.trips = 0  # trips since the last success (the doubling's exponent)

    def available(self, now: float) -> bool:
        """Whether a request may try the deployment now (a half-open one: its one probe)."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if now < self.open_until:
                return False
            self.state = "half_open"
            self._probing = False
        return not self._probing

    def begin(self) -> None:
        """A request tries it: in half-open, that is the probe (no other until it ends)."""
        if self.state == "half_open":
            self._probing = True

    def success(self) -> None:
        if self.state != "closed":
            self.state = "closed"
            self._recent.clear()
        self.trips = 0
        self._probing = False
        self._recent.append(False)

    def failure(self, now: float, *, rate_limited: bool = False, rest_s: float = 0.0) -> bool:
        """Record a failed attempt; True when it tripped the breaker. `rest_s`: the least the
        deployment must rest if it trips (the provider's Retry-After)."""
        self._recent.append(True)
        if self.state == "half_open" or rate_limited or sum(self._recent) >= self._trip_failures:
            self.trip(now, rest_s)
            return True
        return False

    def trip(self, now: float, rest_s: float = 0.0) -> None:
        cooldown = min(self._cooldown_s * 2**self.trips, self._max_cooldown_s)
        self.open_until = max(self.open_until, now + max(cooldown, rest_s))
        self.trips += 1
        self.state = "open"
        self._probing = False
        self._recent.clear()

    def rest_until(self, until: float) -> bool:
        """Rest until `until` at least (another instance tripped it: actors/cooldown_sync.py);
        True if that lengthened or began a rest. The trips count is this instance's own."""
        if self.state == "open" and self.open_until >= until - 0.01:  # (its own trip, read back)
            return False
        self.open_until = until
        self.state = "open"
        self._probing = False
        return True

    def release(self) -> None:
        """A request that tried it ended without a verdict on the deployment (cancelled, or
        the client's own error): a probe may be sent again."""
        self._probing = False
