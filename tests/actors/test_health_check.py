"""The health-check actor (actors/health_check.py) on real storage (both backends) against the
simulated provider (bench/upstream, real sockets), two "instances" on one database: each its own
actor, balancer target and lease owner. Trio's MockClock drives time; it does not autojump
(a database call waits on a thread or a socket, and a jump there would move the lease and the
check's timeout while nothing is idle): the test calls each round (`tick`) itself and moves the
clock by the interval between rounds, as `run` would sleep.

Shown: only the lease holder checks (one request per interval, whatever the instances); a
deployment that fails `unhealthy_after` times in a row leaves every instance's rotation with
exactly one `endpoint.unhealthy` event per organization subscribed to it by name; it comes back
after `healthy_after` successes with one `endpoint.recovered`; a timeout and a malformed answer
count as failures; a stopped holder releases its lease to the other instance."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
import trio
import trio.testing

from actors.health_check import CheckSpec, HealthCheck, answer_problem, probe_request
from actors.upstream import UpstreamClient
from actors.webhooks.clock import WallClock
from bench.upstream import UpstreamBehavior, UpstreamServer, serve_upstream
from services.routing.balancer import Balancer, Target
from services.routing.breaker import Breaker
from storage.endpoint_health import RECOVERED, UNHEALTHY, Endpoint, EndpointHealthRepository
from storage.open import Storage
from storage.orgs import Org
from tests.storage.webhooks_support import hook

pytestmark = pytest.mark.storage

SPEC = CheckSpec(interval_s=10.0, timeout_s=2.0, unhealthy_after=3, healthy_after=2, kind="chat")
EAST = Endpoint("ha", "east", "sim-a", "127.0.0.1")


@dataclass
class Instance:
    actor: HealthCheck
    balancer: Balancer

    @property
    def east(self) -> Target:
        return self.balancer.targets[0]


_CLIENTS: list[UpstreamClient] = []


@pytest.fixture
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_upstream)
        while _CLIENTS:  # the clients the test made
            await _CLIENTS.pop().aclose()
        nursery.cancel_scope.cancel()


def client_of(upstream: UpstreamServer, kind: str = "openai") -> UpstreamClient:
    client = UpstreamClient(
        "east",
        kind,
        f"{upstream.url}/v1",
        "sk-test",
        max_connections=4,
        max_keepalive_connections=4,
        connect_timeout_s=2,
        read_timeout_s=30,
        max_response_bytes=1 << 20,
    )
    _CLIENTS.append(client)
    return client


def instance(
    storage: Storage,
    upstream: UpstreamServer,
    owner: str,
    clock: WallClock,
    spec: CheckSpec = SPEC,
    kind: str = "openai",
    endpoint: Endpoint = EAST,
) -> Instance:
    def target(index: int, name: str) -> Target:
        breaker = Breaker(trip_failures=3, trip_window=5, cooldown_s=30.0, max_cooldown_s=60.0)
        return Target(index, name, breaker)

    balancer = Balancer([target(0, "east/sim-a"), target(1, "west/sim-b")])
    repo = EndpointHealthRepository(storage.db)
    actor = HealthCheck(
        repo,
        balancer.targets[0],
        endpoint,
        client_of(upstream, kind),
        spec,
        owner=owner,
        clock=clock,
    )
    return Instance(actor, balancer)


def checks(upstream: UpstreamServer) -> list[Any]:
    """The health-check requests the provider received (a 1-token "ping")."""
    return [r.json() for r in upstream.requests if r.body and b'"ping"' in r.body]


async def round_(clock: trio.testing.MockClock, *instances: Instance) -> None:
    """One interval: the clock moves by it, then each instance's round runs."""
    clock.jump(SPEC.interval_s)
    for one in instances:
        await one.actor.tick()


async def events_of(storage: Storage, org: Org, event_type: str) -> list[dict[str, Any]]:
    return [e.data for e in await storage.events.list_for_org(org.id) if e.type == event_type]


async def test_one_holder_checks_and_a_transition_is_one_event_on_every_instance(
    storage: Storage, upstream: UpstreamServer, mock_clock: trio.testing.MockClock
) -> None:
    named = await storage.orgs.create("named")  # subscribed to the endpoint events by name
    await hook(storage, named, (UNHEALTHY, RECOVERED))
    await hook(storage, named, (UNHEALTHY, "key.created"))  # a second subscription: one row
    everything = await storage.orgs.create("everything")  # "*" alone does not opt in
    await hook(storage, everything, ("*",))
    disabled = await storage.orgs.create("disabled")
    await hook(storage, disabled, (UNHEALTHY, RECOVERED), enabled=False)
    clock = WallClock()
    a = instance(storage, upstream, "a", clock)
    b = instance(storage, upstream, "b", clock)

    await round_(mock_clock, a, b)
    await round_(mock_clock, a, b)
    assert (a.actor.holder, b.actor.holder) == (True, False)
    assert len(checks(upstream)) == 2  # one per interval, not one per instance
    [body] = checks(upstream)[:1]
    assert body == {
        "model": "sim-a",
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
    }

    upstream.behavior = UpstreamBehavior(fail_status=503)
    for failures in (1, 2):
        await round_(mock_clock, a, b)
        assert a.east.healthy and b.east.healthy, failures  # not yet: unhealthy_after is 3
    await round_(mock_clock, a, b)
    went_down = clock.now_us()
    assert not a.east.healthy and not b.east.healthy
    now = trio.current_time()
    assert [t.name for t in b.balancer.order(now)] == ["west/sim-b"]  # out of rotation
    for _ in range(3):  # still failing: no second event
        await round_(mock_clock, a, b)
    assert len(checks(upstream)) == 8
    [down] = await events_of(storage, named, UNHEALTHY)
    assert down == {
        "model": "ha",
        "provider": "east",
        "upstream": "sim-a",
        "host": "127.0.0.1",
        "consecutive_failures": 3,
        "last_error": "status 503",
        "since": down["since"],
    }
    assert abs(_parsed(down["since"]) - went_down / 1e6) < 1.5
    assert await events_of(storage, everything, UNHEALTHY) == []
    assert await events_of(storage, disabled, UNHEALTHY) == []
    assert a.actor.statistics()["consecutive_failures"] == 6

    upstream.behavior = UpstreamBehavior()
    await round_(mock_clock, a, b)
    assert not a.east.healthy and not b.east.healthy  # healthy_after is 2
    await round_(mock_clock, a, b)
    assert a.east.healthy and b.east.healthy
    assert {t.name for t in b.balancer.order(trio.current_time())} == {"east/sim-a", "west/sim-b"}
    for _ in range(2):
        await round_(mock_clock, a, b)
    [up] = await events_of(storage, named, RECOVERED)
    assert up["consecutive_successes"] == 2 and up["unhealthy_since"] == down["since"]
    assert set(up) == {
        "model",
        "provider",
        "upstream",
        "host",
        "consecutive_successes",
        "unhealthy_since",
        "since",
    }
    assert len(await events_of(storage, named, UNHEALTHY)) == 1
    assert await events_of(storage, everything, RECOVERED) == []
    assert len(checks(upstream)) == 12  # 12 intervals, 12 checks
    assert (a.actor.transitions, b.actor.transitions, b.actor.checks) == (2, 0, 0)


def _parsed(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


async def test_a_timeout_counts_and_a_hung_check_is_cut_at_timeout_s(
    storage: Storage, upstream: UpstreamServer, mock_clock: trio.testing.MockClock
) -> None:
    spec = CheckSpec(
        interval_s=10.0, timeout_s=2.0, unhealthy_after=1, healthy_after=1, kind="chat"
    )
    one = instance(storage, upstream, "a", WallClock(), spec)
    upstream.behavior = UpstreamBehavior(hang=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(one.actor.tick)
        await _real_until(lambda: len(checks(upstream)) == 1)
        mock_clock.jump(spec.timeout_s)
    assert not one.east.healthy
    assert one.actor.state is not None
    assert one.actor.state.last_error == "timed out after 2 s"


async def test_a_stopped_holder_hands_the_lease_over_at_once(
    storage: Storage, upstream: UpstreamServer, mock_clock: trio.testing.MockClock
) -> None:
    clock = WallClock()
    a = instance(storage, upstream, "a", clock)
    b = instance(storage, upstream, "b", clock)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.actor.run)  # its first round at once, then it sleeps
        await _real_until(lambda: a.actor.state is not None)
        await b.actor.tick()
        assert (a.actor.holder, b.actor.holder) == (True, False)
        nursery.cancel_scope.cancel()  # stopped: it releases its lease
    await b.actor.tick()  # well within the lease's TTL
    assert b.actor.holder and b.actor.checks == 1


async def test_anthropic_and_embeddings_checks_and_malformed_answers() -> None:
    path, body = probe_request("chat", "anthropic", "claude-haiku")
    assert path == "messages"
    assert b'"max_tokens":1' in body and b'"model":"claude-haiku"' in body
    path, body = probe_request("embeddings", "openai", "sim-embed")
    assert (path, body) == ("embeddings", b'{"model":"sim-embed","input":["ping"]}')
    assert answer_problem("chat", "openai", b"<html>") == "malformed answer: not JSON"
    assert answer_problem("chat", "openai", b'{"choices": []}') == "malformed answer: no choices"
    assert answer_problem("chat", "anthropic", b'{"content": [{"type": "text"}]}') is None
    assert answer_problem("embeddings", "openai", b'{"data": [{"embedding": [0.1]}]}') is None


async def test_anthropic_and_embeddings_checks_pass_on_the_simulated_provider(
    storage: Storage, upstream: UpstreamServer, mock_clock: trio.testing.MockClock
) -> None:
    spec = CheckSpec(
        interval_s=10.0, timeout_s=2.0, unhealthy_after=1, healthy_after=1, kind="chat"
    )
    claude = instance(storage, upstream, "a", WallClock(), spec, kind="anthropic")
    await claude.actor.tick()
    embed_spec = CheckSpec(10.0, 2.0, 1, 1, "embeddings")
    embed_endpoint = Endpoint("embed", "east", "sim-embed", "127.0.0.1")
    embed = instance(storage, upstream, "b", WallClock(), embed_spec, endpoint=embed_endpoint)
    await embed.actor.tick()
    assert claude.actor.failures == 0 and claude.actor.checks == 1
    paths = [r.path for r in upstream.requests]
    assert paths == ["/v1/messages", "/v1/embeddings"]


async def _real_until(predicate: Callable[[], bool]) -> None:
    """Let sockets and threads progress, in real time, without moving the MockClock."""
    limit = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < limit, "condition never met"
        await trio.to_thread.run_sync(time.sleep, 0.002)
