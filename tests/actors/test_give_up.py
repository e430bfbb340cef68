"""Defaults that give up: an actor that crashes on every run is restarted with backoff, but
not forever: each kind's defaults (and the policy of a kind without settings) stop it after
`max_restarts` restarts within `restart_window_s`, the actor stays down as "failed" and the
instance reports not ready (/healthz 503). Settings under which that could never happen are
refused."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors import Supervisor
from actors.settings import DEFAULTS, ActorSettings
from gateway.operations.readiness import Readiness
from tests.actors.test_supervisor import Scripted, only_child, running


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.mark.parametrize("kind", sorted(set(DEFAULTS) - {"stream_relay"}))
async def test_an_actor_crashing_on_every_run_gives_up_with_its_kinds_defaults(
    autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """Each kind's defaults give up on a crash loop (finite max_restarts, their backoffs
    within restart_window_s) and the instance reports unhealthy, rather than restarting
    forever; a kind with no settings (a nested supervisor) too. stream_relay: temporary."""
    crashing = type("Crashing", (Scripted,), {"kind": kind})("crashing", [0] * 1000)
    async with running(Supervisor(settings=DEFAULTS)) as root:
        began = trio.current_time()
        await root.start(crashing)
        await trio.sleep(DEFAULTS[kind].restart_window_s + 1)
        node = only_child(root)
        assert (node.state, node.restarts) == ("failed", DEFAULTS[kind].max_restarts)
        assert trio.current_time() - began > DEFAULTS[kind].give_up_after_s()
        readiness = Readiness(root)
        assert readiness.reasons() == ["actors: failed for good: crashing"]


async def test_a_child_of_a_kind_without_settings_gives_up_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    crashing = Scripted("crashing", [0] * 1000)
    async with running(Supervisor()) as root:
        await root.start(crashing)
        await trio.sleep(ActorSettings().restart_window_s)
        assert only_child(root).state == "failed"
    assert len(crashing.starts) == ActorSettings().max_restarts + 1


def test_settings_that_could_never_give_up_are_refused() -> None:
    """The old defaults (10 restarts in 60 s, backoff 0.1 s doubling to 30 s): the 10
    backoffs take 81.1 s, so no 10 restarts ever fell within a 60 s window."""
    with pytest.raises(ValueError, match=r"take 81.1 s, so an actor that crashes on every run"):
        ActorSettings(max_restarts=10, restart_window_s=60.0)
    assert ActorSettings(max_restarts=8, restart_window_s=60.0).give_up_after_s() == 25.5
