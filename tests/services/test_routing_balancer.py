"""The balancer (services/routing/balancer.py): each strategy's choice, weights' exact shares,
tiers, deployments resting or over their own caps left out."""

from __future__ import annotations

import random
from collections import Counter

from services.routing.balancer import Balancer, Strategy, Target
from services.routing.breaker import Breaker


def _target(index: int, **kw: object) -> Target:
    breaker = Breaker(trip_failures=3, trip_window=5, cooldown_s=10.0, max_cooldown_s=60.0)
    return Target(index, f"p{index}/m", breaker, **kw)  # type: ignore[arg-type]


def _firsts(balancer: Balancer, n: int, now: float = 0.0) -> Counter[int]:
    return Counter(balancer.order(now)[0].index for _ in range(n))


def test_weighted_shares_are_exact_over_2000_requests() -> None:
    targets = [_target(0, weight=1.0), _target(1, weight=3.0), _target(2, weight=6.0)]
    counts = _firsts(Balancer(targets, "weighted"), 2000)
    assert counts == {0: 200, 1: 600, 2: 1200}


def test_weighted_spreads_picks_rather_than_bunching_them() -> None:
    targets = [_target(0, weight=1.0), _target(1, weight=1.0)]
    balancer = Balancer(targets, "weighted")
    picks = [balancer.order(0.0)[0].index for _ in range(6)]
    assert picks in ([0, 1, 0, 1, 0, 1], [1, 0, 1, 0, 1, 0])


def test_priority_never_touches_tier_two_while_tier_one_is_usable() -> None:
    targets = [
        _target(0, priority=0, weight=1.0),
        _target(1, priority=0, weight=3.0),
        _target(2, priority=1, weight=100.0),
    ]
    balancer = Balancer(targets, "priority")
    assert _firsts(balancer, 2000) == {0: 500, 1: 1500}
    order = balancer.order(0.0)
    assert order[-1].index == 2  # tried last, after both of tier one
    targets[0].breaker.trip(0.0)
    targets[1].breaker.trip(0.0)
    assert [t.index for t in balancer.order(1.0)] == [2]  # tier one resting: tier two serves
    assert balancer.order(10.0)[0].priority == 0  # rested: tier one is back (half-open probe)


def test_resting_and_unhealthy_deployments_are_left_out() -> None:
    targets = [_target(0), _target(1), _target(2)]
    targets[0].breaker.trip(0.0)
    targets[1].healthy = False
    assert [t.index for t in Balancer(targets, "weighted").order(5.0)] == [2]


def test_least_busy_takes_the_fewest_in_flight() -> None:
    targets = [_target(0), _target(1)]
    balancer = Balancer(targets, "least_busy")
    targets[0].started(0.0)
    targets[0].started(0.0)
    targets[1].started(0.0)
    assert [t.index for t in balancer.order(0.0)] == [1, 0]


def test_latency_prefers_the_faster_at_least_90_percent_after_warm_up() -> None:
    targets = [_target(0), _target(1)]
    balancer = Balancer(targets, "latency", rng=random.Random(7))
    assert balancer.order(0.0)[0].ttfb_ewma is None  # not measured yet: tried first
    for _ in range(20):  # warm-up: both measured
        targets[0].answered(0.200)
        targets[1].answered(0.050)
    counts = _firsts(balancer, 2000)
    assert counts[1] >= 0.9 * 2000 and counts[0] > 0  # and the slower one is still explored


def test_cost_takes_the_cheapest_and_splits_ties_by_weight() -> None:
    targets = [_target(0, cost=0.75), _target(1, cost=0.30), _target(2, cost=0.30, weight=3.0)]
    counts = _firsts(Balancer(targets, "cost"), 400)
    assert counts == {1: 100, 2: 300}


def test_a_deployment_over_its_own_rpm_rests_until_the_next_minute() -> None:
    targets = [_target(0, rpm=2), _target(1, weight=0.001)]
    balancer = Balancer(targets, "weighted")
    for _ in range(2):
        targets[0].started(0.0)
    assert [t.index for t in balancer.order(1.0)] == [1]
    assert targets[0] in balancer.order(61.0)


def test_a_deployment_over_its_tpm_rests_until_the_next_minute() -> None:
    target = _target(0, tpm=1000)
    target.started(0.0)
    target.used_tokens(1000)
    assert not target.usable(30.0)
    assert target.usable(60.0)


def test_one_deployment_needs_no_choice() -> None:
    strategies: tuple[Strategy, ...] = ("priority", "weighted", "least_busy", "latency", "cost")
    for strategy in strategies:
        assert [t.index for t in Balancer([_target(0)], strategy).order(0.0)] == [0]
