"""Which of a model's deployments a request tries, and in what order after a failure.

Strategies (`[[models]] strategy`, docs/routing.md):

- `priority` (default): the lowest `priority` tier that has a usable deployment; inside a tier,
  traffic split by `weight`. Lower tiers are tried first on retries too.
- `weighted`: traffic split by `weight` across every deployment.
- `least_busy`: the fewest requests in flight on this instance.
- `latency`: the lowest moving average of time to first byte on this instance; one request
  in `explore` (5 %) tries another, so a deployment that got faster is noticed. A deployment
  not measured yet is tried first.
- `cost`: the cheapest (input + output price per million tokens); ties split by weight.

Weights are applied by smooth weighted round-robin (nginx's): exact shares over any run of
requests, no randomness. A deployment is usable when its breaker lets a request through
(breaker.py), it is healthy (health checks), and it is under its own `rpm` / `tpm` on this
instance. No I/O; times are the caller's clock (Trio's).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from services.routing.breaker import Breaker

Strategy = Literal["priority", "weighted", "least_busy", "latency", "cost"]
EWMA_ALPHA = 0.2  # weight of the newest time to first byte in the moving average
EXPLORE = 0.05  # share of `latency` requests that try another deployment first
_MINUTE = 60.0


@dataclass(eq=False, slots=True)
class Target:
    """One deployment as the balancer sees it; `index` is its place in the model's list."""

    index: int
    name: str  # `<provider>/<upstream>`
    breaker: Breaker
    priority: int = 0
    weight: float = 1.0
    cost: float = 0.0
    rpm: int | None = None
    tpm: int | None = None
    healthy: bool = True
    in_flight: int = 0
    ttfb_ewma: float | None = None
    _current: float = 0.0  # smooth weighted round-robin's running weight
    _window: float = field(default=-_MINUTE)  # start of the current minute (rpm, tpm)
    _requests: int = 0
    _tokens: int = 0

    def usable(self, now: float) -> bool:
        if not self.healthy:
            return False
        if self.rpm is not None or self.tpm is not None:
            self._roll(now)
            if self.rpm is not None and self._requests >= self.rpm:
                return False
            if self.tpm is not None and self._tokens >= self.tpm:
                return False
        return self.breaker.available(now)

    def _roll(self, now: float) -> None:
        if now - self._window >= _MINUTE:
            self._window, self._requests, self._tokens = now, 0, 0

    def started(self, now: float) -> None:
        self.in_flight += 1
        self.breaker.begin()
        if self.rpm is not None or self.tpm is not None:
            self._roll(now)
            self._requests += 1

    def answered(self, ttfb_s: float) -> None:
        """The deployment answered (its first byte came `ttfb_s` after the request)."""
        old = self.ttfb_ewma
        self.ttfb_ewma = ttfb_s if old is None else old + EWMA_ALPHA * (ttfb_s - old)

    def used_tokens(self, tokens: int) -> None:
        if self.tpm is not None:
            self._tokens += tokens


class Balancer:
    def __init__(
        self,
        targets: Sequence[Target],
        strategy: Strategy = "priority",
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.targets = tuple(targets)
        self.strategy: Strategy = strategy
        self._rng = rng or random.Random()

    def order(self, now: float) -> list[Target]:
        """The usable deployments, the one to try first first, then the rest in the order to
        retry them. Calling it is choosing: the round-robin moves on."""
        usable = [t for t in self.targets if t.usable(now)]
        if len(usable) < 2:
            return usable
        strategy = self.strategy
        if strategy == "priority":
            tiers = sorted({t.priority for t in usable})
            first = _pick_weighted([t for t in usable if t.priority == tiers[0]])
            rest = sorted((t for t in usable if t is not first), key=_by_tier_then_weight)
            return [first, *rest]
        if strategy == "weighted":
            first = _pick_weighted(usable)
            return [first, *sorted((t for t in usable if t is not first), key=_by_weight)]
        if strategy == "least_busy":
            return sorted(usable, key=lambda t: (t.in_flight, -t.weight, t.index))
        if strategy == "latency":
            ranked = sorted(usable, key=_by_latency)
            if ranked[0].ttfb_ewma is not None and self._rng.random() < EXPLORE:
                other = ranked.pop(self._rng.randrange(1, len(ranked)))
                ranked.insert(0, other)
            return ranked
        cheapest = min(t.cost for t in usable)
        first = _pick_weighted([t for t in usable if t.cost == cheapest])
        return [first, *sorted((t for t in usable if t is not first), key=_by_cost)]


def _pick_weighted(targets: list[Target]) -> Target:
    """Smooth weighted round-robin: each pick adds every weight to its running weight, takes
    the largest, and takes the total off it."""
    total = 0.0
    best: Target | None = None
    for t in targets:
        t._current += t.weight
        total += t.weight
        if best is None or t._current > best._current:
            best = t
    assert best is not None
    best._current -= total
    return best


def _by_tier_then_weight(t: Target) -> tuple[int, float, int]:
    return (t.priority, -t.weight, t.index)


def _by_weight(t: Target) -> tuple[float, int]:
    return (-t.weight, t.index)


def _by_latency(t: Target) -> tuple[bool, float, int]:
    return (t.ttfb_ewma is not None, t.ttfb_ewma or 0.0, t.index)


def _by_cost(t: Target) -> tuple[float, float, int]:
    return (t.cost, -t.weight, t.index)
