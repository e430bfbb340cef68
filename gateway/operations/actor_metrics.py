"""The supervision tree on /metrics, per actor kind (per-key actors can be thousands, so
nothing is labelled by actor name except restarts, which only long-lived actors accumulate).

    gateway_actors{kind,state}                 actors of each kind in each state
    gateway_actor_restarts_total{kind}         restarts since start (a counter: never lower)
    gateway_actor_restart_count{actor,state}   restarts of each supervised actor (lifetime)
    gateway_actor_restarts_by_kind{kind}       the same summed per kind, over the live actors
    gateway_actor_inbox_depth{kind}            messages waiting, summed over the kind
    gateway_actor_inbox_capacity{kind}         the inbox capacity of one actor of the kind
    gateway_actor_messages_handled{kind}       messages handled since start, summed
    gateway_actor_handling_p99_seconds{kind}   the worst p99 handling time among the kind
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator

from actors.supervisor import ActorSnapshot, Supervisor
from gateway.operations.metrics import Metrics

Samples = list[tuple[dict[str, str], float]]


def _nodes(supervisor: Supervisor) -> Iterator[ActorSnapshot]:
    stack = [supervisor.snapshot()]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)


def _per_kind(supervisor: Supervisor, read: Callable[[ActorSnapshot], float | None]) -> Samples:
    totals: dict[str, float] = defaultdict(float)
    for node in _nodes(supervisor):
        value = read(node)
        if value is not None:
            totals[node.kind] += value
    return [({"kind": kind}, value) for kind, value in sorted(totals.items())]


def _worst_p99(supervisor: Supervisor) -> Samples:
    worst: dict[str, float] = {}
    for node in _nodes(supervisor):
        if node.handling_p99_s is not None:
            worst[node.kind] = max(worst.get(node.kind, 0.0), node.handling_p99_s)
    return [({"kind": kind}, value) for kind, value in sorted(worst.items())]


def _capacity(supervisor: Supervisor) -> Samples:
    found: dict[str, float] = {}
    for node in _nodes(supervisor):
        if node.inbox_capacity is not None:
            found[node.kind] = float(node.inbox_capacity)
    return [({"kind": kind}, value) for kind, value in sorted(found.items())]


def _states(supervisor: Supervisor) -> Samples:
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for node in _nodes(supervisor):
        counts[node.kind, node.state] += 1
    return [({"kind": k, "state": s}, float(n)) for (k, s), n in sorted(counts.items())]


def _restarts(supervisor: Supervisor) -> Samples:
    return [
        ({"actor": node.name, "state": node.state}, float(node.restarts))
        for node in _nodes(supervisor)
        if node.kind not in _PER_KEY_KINDS or node.restarts
    ]


# Kinds with one actor per key or per stream: listed by name only once they restarted.
_PER_KEY_KINDS = frozenset({"rate_limiter", "stream_relay"})


def register_actor_gauges(metrics: Metrics, supervisor: Supervisor) -> None:
    gauges: list[tuple[str, str, Callable[[], Samples]]] = [
        ("gateway_actors", "Supervised actors by kind and state.", lambda: _states(supervisor)),
        (
            "gateway_actor_restart_count",
            "Restarts of each supervised actor still known to its supervisor.",
            lambda: _restarts(supervisor),
        ),
        (
            "gateway_actor_restarts_by_kind",
            "Restarts of the actors of each kind.",
            lambda: _per_kind(supervisor, lambda n: float(n.restarts)),
        ),
        (
            "gateway_actor_inbox_depth",
            "Messages waiting in the inboxes of each actor kind.",
            lambda: _per_kind(supervisor, lambda n: float(n.inbox_depth)),
        ),
        (
            "gateway_actor_inbox_capacity",
            "Inbox capacity of one actor of each kind ([actors.<kind>] inbox_capacity).",
            lambda: _capacity(supervisor),
        ),
        (
            "gateway_actor_messages_handled",
            "Messages handled by the actors of each kind since the instance started.",
            lambda: _per_kind(supervisor, lambda n: float(n.messages_handled)),
        ),
        (
            "gateway_actor_handling_p99_seconds",
            "The worst 99th-percentile message handling time among the actors of each kind.",
            lambda: _worst_p99(supervisor),
        ),
    ]
    for name, help, read in gauges:
        metrics.gauge(name, help, read)
    metrics.counter(
        "gateway_actor_restarts",
        "Actors restarted after a crash, by kind, since the process started.",
        lambda: _restart_counts(supervisor),
    )


def _restart_counts(supervisor: Supervisor) -> Samples:
    """Every kind in the tree (0 until one restarts) and every kind that ever restarted."""
    counts = dict.fromkeys((node.kind for node in _nodes(supervisor)), 0)
    counts.update(supervisor.restart_counts)
    return [({"kind": kind}, float(n)) for kind, n in sorted(counts.items())]
