"""Every actor kind an operator can tune: the real actor classes declare their kind, and a
crashing actor of each kind is restarted with that kind's configured backoff (the root
supervisor holds the `[actors.<kind>]` settings)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors import Actor, Supervisor
from actors.accountant import Accountant
from actors.auto_replenish import AutoReplenish
from actors.batch_writer import BatchWriter
from actors.credentials import LastUsedRecorder
from actors.event_writer import EventWriter
from actors.files_janitor import FilesJanitor
from actors.ratelimit import KeyLimiter
from actors.settings import DEFAULTS, ActorSettings
from actors.webhooks.delivery import WebhookDelivery


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        (KeyLimiter, "rate_limiter"),
        (Accountant, "accountant"),
        (AutoReplenish, "auto_replenish"),
        (BatchWriter, "batch_writer"),
        (EventWriter, "batch_writer"),
        (LastUsedRecorder, "batch_writer"),
        (WebhookDelivery, "webhook_delivery"),
        (FilesJanitor, "background"),
    ],
)
def test_the_actor_classes_declare_their_kind(cls: type[Actor], kind: str) -> None:
    assert cls.kind == kind
    assert kind in DEFAULTS


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class _Crashing(Actor):
    def __init__(self, name: str, kind: str, crashes: int) -> None:
        self.name = name
        self.kind = kind  # type: ignore[misc]
        self.left = crashes
        self.starts: list[float] = []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.starts.append(trio.current_time())
        task_status.started()
        if self.left:
            self.left -= 1
            raise RuntimeError("crash on purpose")
        await trio.sleep_forever()


@pytest.mark.parametrize("kind", sorted(k for k in DEFAULTS if k != "stream_relay"))
async def test_each_kind_is_restarted_with_its_configured_backoff(
    kind: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The kind's own initial_backoff_s / max_backoff_s apply; every other kind is tuned
    differently, so a mix-up would show in the restart times."""
    settings = {
        name: ActorSettings(initial_backoff_s=1.0 + i, max_backoff_s=1.5 + i)
        for i, name in enumerate(sorted(DEFAULTS))
    }
    mine = settings[kind]
    actor = _Crashing(f"crashing-{kind}", kind, crashes=3)
    async with trio.open_nursery() as nursery:
        root = Supervisor(settings=settings)
        await nursery.start(root.run)
        await root.start(actor)
        await trio.sleep(3 * mine.max_backoff_s + 1)
        nursery.cancel_scope.cancel()
    gaps = [b - a for a, b in zip(actor.starts, actor.starts[1:], strict=False)]
    expected = [mine.initial_backoff_s, mine.max_backoff_s, mine.max_backoff_s]
    assert gaps == pytest.approx(expected)
