"""Delivery counters shared by every delivery actor of one dispatcher (for /metrics)."""

from __future__ import annotations

from collections import Counter

# What an attempt came to: delivered (2xx), retry (will be tried again), failed (a permanent
# status, the event is given up), dropped (the last retry failed; the subscription disabled).
RESULTS = ("delivered", "retry", "failed", "dropped")


class DeliveryMetrics:
    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter({result: 0 for result in RESULTS})
        self.attempt_seconds = 0.0  # total time spent in attempts

    def record(self, result: str, seconds: float) -> None:
        self.attempts[result] += 1
        self.attempt_seconds += seconds

    def snapshot(self) -> dict[str, float]:
        return {**{r: float(self.attempts[r]) for r in RESULTS}, "seconds": self.attempt_seconds}
