"""Supervisor behaviour: restarts and backoff on the mock clock, retirement, stop, cancellation."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from actors import Actor, ActorSnapshot, Inbox, RestartPolicy, Supervisor
from actors.settings import ActorSettings


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


@asynccontextmanager
async def running(sup: Supervisor) -> AsyncIterator[Supervisor]:
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        yield sup
        nursery.cancel_scope.cancel()


class Scripted(Actor):
    """Run i gets ready, lives ``lifetimes[i]`` seconds, then crashes; later runs live forever."""

    def __init__(self, name: str, lifetimes: list[float], *, message: str = "boom") -> None:
        self.name = name
        self.lifetimes = lifetimes
        self.message = message
        self.starts: list[float] = []
        self.crashes: list[float] = []
        self.exits = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        n = len(self.starts)
        self.starts.append(trio.current_time())
        try:
            task_status.started()
            if n >= len(self.lifetimes):
                await trio.sleep_forever()
            await trio.sleep(self.lifetimes[n])
            self.crashes.append(trio.current_time())
            raise ValueError(f"{self.message} {n + 1}")
        finally:
            self.exits += 1

    def statistics(self) -> dict[str, object]:
        return {"runs": len(self.starts)}


def gaps(actor: Scripted) -> list[float]:
    """Seconds between each crash and the next run: the backoff actually slept."""
    return [start - crash for crash, start in zip(actor.crashes, actor.starts[1:], strict=False)]


def only_child(sup: Supervisor) -> ActorSnapshot:
    (child,) = sup.snapshot().children
    return child


# -- restarts and backoff ---------------------------------------------------------------------


async def test_crashing_actor_is_restarted_with_doubling_backoff(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    actor = Scripted("crasher", [0, 0, 0, 0])
    with caplog.at_level(logging.WARNING, logger="gateway.actors"):
        async with running(Supervisor()) as root:
            await root.start(actor)
            await trio.sleep(10)
            assert gaps(actor) == pytest.approx([0.1, 0.2, 0.4, 0.8])
            assert len(actor.starts) == 5
            child = only_child(root)
            assert (child.state, child.restarts) == ("running", 4)
            assert child.last_error == "ValueError: boom 4"
            assert child.statistics == {"runs": 5}
            assert root.statistics() == {"children": 1, "failed": 0, "restarts": 4}
    messages = [r.getMessage() for r in caplog.records if r.name == "gateway.actors"]
    assert len(messages) == 4
    assert all("crasher" in m and "ValueError" in m for m in messages)
    assert "restart 4" in messages[-1]


async def test_backoff_is_capped_at_max_backoff(autojump_clock: trio.testing.MockClock) -> None:
    actor = Scripted("crasher", [0, 0, 0, 0, 0])
    async with running(Supervisor()) as root:
        await root.start(actor, policy=RestartPolicy(max_backoff=0.3))
        await trio.sleep(10)
    assert gaps(actor) == pytest.approx([0.1, 0.2, 0.3, 0.3, 0.3])


async def test_long_healthy_run_resets_backoff(autojump_clock: trio.testing.MockClock) -> None:
    actor = Scripted("crasher", [0, 0, 120, 0, 0])  # 120 s: the default restart_window_s
    async with running(Supervisor()) as root:
        await root.start(actor)
        await trio.sleep(200)
        assert only_child(root).restarts == 5
    assert gaps(actor) == pytest.approx([0.1, 0.2, 0.1, 0.2, 0.4])


async def test_exception_group_of_exceptions_is_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs = 0

    class Grouped(Actor):
        name = "grouped"

        async def run(
            self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
        ) -> None:
            nonlocal runs
            runs += 1
            task_status.started()
            if runs == 1:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(fail_soon)
            await trio.sleep_forever()

    async def fail_soon() -> None:
        await trio.sleep(1)
        raise KeyError("inner")

    async with running(Supervisor()) as root:
        await root.start(Grouped())
        await trio.sleep(5)
        child = only_child(root)
        assert (runs, child.restarts, child.state) == (2, 1, "running")
        assert child.last_error == "KeyError: 'inner'"  # unwrapped from the ExceptionGroup


async def test_last_error_is_truncated(autojump_clock: trio.testing.MockClock) -> None:
    actor = Scripted("verbose", [0], message="x" * 500)
    async with running(Supervisor()) as root:
        await root.start(actor)
        await trio.sleep(1)
        error = only_child(root).last_error
    assert error is not None
    assert len(error) == 200
    assert error.startswith("ValueError: xxx")


async def test_exceeding_max_restarts_marks_the_actor_failed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    actor = Scripted("flaky", [0] * 10)
    async with running(Supervisor()) as root:
        await root.start(actor, policy=RestartPolicy(max_restarts=2))
        await trio.sleep(10)
        assert len(actor.starts) == 3
        child = only_child(root)
        assert (child.state, child.restarts, child.last_error) == (
            "failed",
            2,
            "ValueError: boom 3",
        )
        assert root.get("flaky") is None
        assert root.children() == []
        assert not root.all_running()
        assert root.statistics()["failed"] == 1

        # The tombstone may be replaced by a fresh actor of the same name.
        fresh = Scripted("flaky", [])
        await root.start(fresh)
        assert root.get("flaky") is fresh
        assert root.all_running()


async def test_a_temporary_child_that_crashes_is_logged_and_removed_not_restarted(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    actor = Scripted("relay-1", [1])
    with caplog.at_level(logging.WARNING, logger="gateway.actors"):
        async with running(Supervisor()) as root:
            await root.start(actor, policy=RestartPolicy(temporary=True))
            await trio.sleep(10)
            assert len(actor.starts) == 1  # never run again
            assert root.snapshot().children == () and root.failed() == []
            assert root.all_running() and root.statistics()["restarts"] == 0
    (message,) = [r.getMessage() for r in caplog.records if r.name == "gateway.actors"]
    assert "relay-1" in message and "not restarted" in message


async def test_max_restarts_counts_consecutive_crashes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Crash, restart; live 60s (resets the count), crash, restart; crash -> over the limit.
    actor = Scripted("flaky", [0, 60, 0, 0])
    async with running(Supervisor()) as root:
        await root.start(actor, policy=RestartPolicy(max_restarts=1))
        await trio.sleep(100)
        child = only_child(root)
        assert (len(actor.starts), child.restarts, child.state) == (3, 2, "failed")


async def test_stop_removes_a_failed_actor(autojump_clock: trio.testing.MockClock) -> None:
    async with running(Supervisor()) as root:
        await root.start(Scripted("flaky", [0]), policy=RestartPolicy(max_restarts=0))
        await trio.sleep(1)
        assert only_child(root).state == "failed"
        await root.stop("flaky")
        assert root.snapshot().children == ()
        assert root.all_running()


# -- lifecycle --------------------------------------------------------------------------------


class Retiring(Actor):
    def __init__(self, name: str, after: float) -> None:
        self.name = name
        self.after = after
        self.runs = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.runs += 1
        task_status.started()
        await trio.sleep(self.after)


async def test_actor_returning_normally_is_removed_not_restarted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    actor = Retiring("idle", after=5)
    async with running(Supervisor()) as root:
        await root.start(actor)
        assert root.get("idle") is actor
        assert only_child(root).state == "running"
        await trio.sleep(6)
        assert root.get("idle") is None
        assert root.snapshot().children == ()
        await trio.sleep(60)
        assert actor.runs == 1


class FailsBeforeReady(Actor):
    def __init__(self, name: str, failures: int) -> None:
        self.name = name
        self.failures = failures
        self.runs = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.runs += 1
        if self.runs <= self.failures:
            raise OSError("no config")
        task_status.started()
        await trio.sleep_forever()


async def test_first_start_failure_propagates_from_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    actor = FailsBeforeReady("broken", failures=1)
    async with running(Supervisor()) as root:
        with pytest.raises(OSError, match="no config"), trio.fail_after(30):
            await root.start(actor)
        assert root.get("broken") is None
        assert root.snapshot().children == ()
        await trio.sleep(60)
        assert actor.runs == 1
        await root.start(actor)  # the name is free again
        assert root.get("broken") is actor


async def test_start_soon_treats_a_failing_first_run_as_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    actor = FailsBeforeReady("late", failures=2)
    async with running(Supervisor()) as root:
        root.start_soon(actor)
        assert root.get("late") is actor
        await trio.sleep(1)
        child = only_child(root)
        assert (actor.runs, child.restarts, child.state) == (3, 2, "running")


async def test_duplicate_names_are_rejected() -> None:
    first, second = Scripted("dup", []), Scripted("dup", [])
    async with running(Supervisor()) as root:
        await root.start(first)
        with pytest.raises(ValueError, match="dup"):
            await root.start(second)
        with pytest.raises(ValueError, match="dup"):
            root.start_soon(second)
        assert root.get("dup") is first
        assert second.starts == []


async def test_start_requires_a_running_supervisor() -> None:
    root = Supervisor()
    with pytest.raises(RuntimeError, match="not running"):
        await root.start(Scripted("a", []))
    with pytest.raises(RuntimeError, match="not running"):
        root.start_soon(Scripted("a", []))
    assert not root.all_running()


async def test_stop_cancels_waits_and_removes(caplog: pytest.LogCaptureFixture) -> None:
    actor = Scripted("victim", [])
    async with running(Supervisor()) as root:
        await root.start(actor)
        await root.stop("victim")
        assert actor.exits == 1  # stop() returned only after the actor's finally ran
        assert root.get("victim") is None
        assert root.snapshot().children == ()
        await root.stop("victim")  # unknown names are a no-op
    assert len(actor.starts) == 1
    assert not [r for r in caplog.records if r.name == "gateway.actors"]


async def test_cancelled_stop_still_stops_the_child() -> None:
    actor = Scripted("victim", [])
    async with running(Supervisor()) as root:
        await root.start(actor)
        with trio.CancelScope() as scope:
            scope.cancel()
            await root.stop("victim")
        await trio.testing.wait_all_tasks_blocked()
        assert actor.exits == 1
        assert root.get("victim") is None
    assert len(actor.starts) == 1


# -- cancellation -----------------------------------------------------------------------------


class WithNursery(Actor):
    """Holds a helper task in its own nursery, so cancellation arrives from inside a nursery."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.runs = 0
        self.cleaned_up = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.runs += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.cleaned_up = True


async def test_cancelling_the_root_stops_every_child_without_restarts(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    root, sub = Supervisor(), Supervisor("sub")
    plain, nested, grandchild = Scripted("plain", []), WithNursery("nested"), WithNursery("gc")
    with trio.move_on_after(10) as outer:
        async with running(root):
            await root.start(plain)
            await root.start(nested)
            await root.start(sub)
            await sub.start(grandchild)
            await trio.sleep(5)
            await root.stop("nested")  # Cancelled arrives from inside a nursery: no restart
            assert nested.cleaned_up
            replacement = WithNursery("nested")
            await root.start(replacement)
            outer.cancel()
            await trio.sleep_forever()
    assert outer.cancelled_caught  # Cancelled reached the scope that owned it
    assert plain.exits == 1 and replacement.cleaned_up and grandchild.cleaned_up
    assert (len(plain.starts), nested.runs, replacement.runs, grandchild.runs) == (1, 1, 1, 1)
    assert root.snapshot().state == "stopped"
    assert root.snapshot().children == () and sub.snapshot().children == ()
    assert not root.all_running()
    assert not [r for r in caplog.records if r.name == "gateway.actors"]


class Fatal(BaseException):
    """Stands in for KeyboardInterrupt/SystemExit: not an Exception, so never a crash."""


class DiesHard(Actor):
    def __init__(self, mixed: bool) -> None:
        self.name = "hard"
        self.mixed = mixed
        self.runs = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.runs += 1
        task_status.started()
        await trio.sleep(1)
        if not self.mixed:
            raise Fatal
        async with trio.open_nursery() as nursery:  # BaseExceptionGroup[ValueError, Fatal]
            nursery.start_soon(raise_value_error)
            nursery.start_soon(raise_fatal)


async def raise_value_error() -> None:
    raise ValueError("ordinary")


async def raise_fatal() -> None:
    raise Fatal


@pytest.mark.parametrize("mixed", [False, True], ids=["bare", "in-group"])
async def test_base_exceptions_propagate_and_are_not_restarted(
    autojump_clock: trio.testing.MockClock, mixed: bool
) -> None:
    actor = DiesHard(mixed)
    bystander = WithNursery("bystander")
    with pytest.raises(BaseExceptionGroup) as info:
        async with running(Supervisor()) as root:
            await root.start(actor)
            await root.start(bystander)
            await trio.sleep(60)
    assert info.group_contains(Fatal)
    assert actor.runs == 1
    assert bystander.cleaned_up


# -- the tree ---------------------------------------------------------------------------------


async def test_nested_supervisor_appears_in_snapshot_tree(
    autojump_clock: trio.testing.MockClock,
) -> None:
    root, sub = Supervisor(), Supervisor("sub")
    async with running(root):
        await root.start(sub)
        await sub.start(Scripted("leaf", [1]))
        assert root.all_running()

        await trio.sleep(1.05)  # the leaf crashed at t=1 and is backing off
        tree = root.snapshot()
        assert (tree.name, tree.type, tree.state) == ("root", "Supervisor", "running")
        (sub_node,) = tree.children
        assert (sub_node.name, sub_node.type, sub_node.state) == ("sub", "Supervisor", "running")
        (leaf,) = sub_node.children
        assert (leaf.name, leaf.kind, leaf.type, leaf.state, leaf.restarts) == (
            "leaf",
            "background",
            "Scripted",
            "backoff",
            1,
        )
        assert not root.all_running()
        assert not sub.all_running()

        await trio.sleep(0.1)
        assert root.all_running()
        data = root.snapshot().to_json()
        assert json.loads(json.dumps(data)) == data
        assert data["children"] == [
            {
                "name": "sub",
                "kind": "supervisor",
                "type": "Supervisor",
                "state": "running",
                "restarts": 0,
                "inbox_depth": 0,
                "inbox_capacity": None,
                "messages_handled": 0,
                "handling_p99_s": None,
                "backoff_s": None,
                "last_error": None,
                "statistics": {"children": 1, "failed": 0, "restarts": 1},
                "children": [
                    {
                        "name": "leaf",
                        "kind": "background",
                        "type": "Scripted",
                        "state": "running",
                        "restarts": 1,
                        "inbox_depth": 0,
                        "inbox_capacity": None,
                        "messages_handled": 0,
                        "handling_p99_s": None,
                        "backoff_s": None,
                        "last_error": "ValueError: boom 1",
                        "statistics": {"runs": 2},
                        "children": [],
                    }
                ],
            }
        ]


async def test_all_running_is_false_while_a_child_backs_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running(Supervisor()) as root:
        assert root.all_running()  # no children yet
        await root.start(Scripted("a", [1]))
        await trio.sleep(0.5)
        assert root.all_running()
        await trio.sleep(0.55)
        assert only_child(root).state == "backoff"
        assert only_child(root).backoff_s == 0.1  # the wait shown while it runs
        assert not root.all_running()
        await trio.sleep(0.1)
        assert root.all_running()
        assert only_child(root).backoff_s is None


def test_repr_shows_kind_name_and_inbox() -> None:
    assert repr(Supervisor("root")) == "<Supervisor name='root'>"
    assert repr(Scripted("x", [])) == "<Scripted name='x'>"


# -- tuning from [actors.<kind>] --------------------------------------------------------------


class Tuned(Scripted):
    kind = "accountant"


async def test_a_childs_kind_settings_give_its_backoff_and_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """initial_backoff_s, max_backoff_s and max_restarts of the child's kind apply; other
    kinds keep the defaults."""
    tuned = ActorSettings(initial_backoff_s=2.0, max_backoff_s=5.0, max_restarts=3)
    actor, other = Tuned("tuned", [0] * 10), Scripted("other", [0, 0])
    async with running(Supervisor(settings={"accountant": tuned})) as root:
        await root.start(actor)
        await root.start(other)
        await trio.sleep(60)
        states = {c.name: c.state for c in root.snapshot().children}
    assert gaps(actor) == pytest.approx([2.0, 4.0, 5.0])
    assert states == {"tuned": "failed", "other": "running"}
    assert gaps(other) == pytest.approx([0.1, 0.2])


async def test_nested_supervisors_inherit_the_kind_settings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tuned = ActorSettings(initial_backoff_s=1.5, max_backoff_s=1.5)
    root, sub = Supervisor(settings={"accountant": tuned}), Supervisor("sub")
    actor = Tuned("tuned", [0])
    async with running(root):
        await root.start(sub)
        await sub.start(actor)
        await trio.sleep(10)
    assert gaps(actor) == pytest.approx([1.5])


async def test_max_restarts_counts_within_a_sliding_window(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Crashes spread wider than restart_window_s never give up; as many within it do."""
    spread = Tuned("spread", [4.0] * 8)  # a crash every ~4 s
    settings = ActorSettings(
        initial_backoff_s=0.5, max_backoff_s=0.5, max_restarts=2, restart_window_s=9.0
    )
    async with running(Supervisor(settings={"accountant": settings})) as root:
        await root.start(spread)
        await trio.sleep(100)
        (node,) = root.snapshot().children
    # A crash every 4.5 s: the one 9 s back has left the window, so never more than two.
    assert (node.state, node.restarts) == ("running", 8)
    burst = Tuned("burst", [0.1] * 8)
    async with running(Supervisor(settings={"accountant": settings})) as root:
        await root.start(burst)
        await trio.sleep(100)
        (node,) = root.snapshot().children
    assert (node.state, node.restarts) == ("failed", 2)


async def test_give_up_escalates_to_the_parent_when_asked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """on_give_up = "escalate": the child's supervisor crashes, its parent restarts it."""
    escalating = ActorSettings(max_restarts=1, on_give_up="escalate")
    root = Supervisor()
    sub = Supervisor("sub", settings={"accountant": escalating})
    async with running(root):
        await root.start(sub)
        await sub.start(Tuned("flaky", [0, 0, 0]))
        await trio.sleep(5)
        (sub_node,) = root.snapshot().children
        assert sub_node.restarts == 1
        assert sub_node.last_error is not None and "GaveUp" in sub_node.last_error
        assert sub_node.children == ()  # a restarted supervisor comes back empty
        assert root.all_running()


async def test_give_up_marks_the_child_failed_by_default(
    autojump_clock: trio.testing.MockClock,
) -> None:
    settings = ActorSettings(max_restarts=0)
    async with running(Supervisor(settings={"accountant": settings})) as root:
        await root.start(Tuned("once", [0, 0]))
        await trio.sleep(5)
        assert only_child(root).state == "failed"
        assert root.failed() != []


async def test_a_temporary_child_is_never_restarted_nor_failed(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    actor = Scripted("stream", [1.0])
    async with running(Supervisor()) as root:
        await root.start(actor, policy=RestartPolicy(temporary=True))
        await trio.sleep(5)
        assert root.snapshot().children == ()
        assert root.failed() == [] and root.all_running()
    assert len(actor.starts) == 1
    assert any("not restarted" in r.getMessage() for r in caplog.records)


async def test_the_tree_shows_inbox_capacity_and_handling_times(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Worker(Actor):
        kind = "batch_writer"

        def __init__(self) -> None:
            self.name = "worker"
            self.inbox: Inbox[float] = Inbox(8)

        async def run(
            self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
        ) -> None:
            task_status.started()
            async for seconds in self.inbox:
                began = trio.current_time()
                await trio.sleep(seconds)
                self.inbox.handled(trio.current_time() - began)

        def inbox_depth(self) -> int:
            return self.inbox.depth()

        def inbox_capacity(self) -> int:
            return self.inbox.capacity

        def handling(self) -> tuple[int, float | None]:
            return self.inbox.handling()

    worker = Worker()
    async with running(Supervisor()) as root:
        await root.start(worker)
        for n in range(100):
            await worker.inbox.send(0.01 if n else 1.0)
        await trio.sleep(10)
        node = only_child(root)
    assert (node.kind, node.inbox_capacity, node.messages_handled) == ("batch_writer", 8, 100)
    assert node.handling_p99_s == pytest.approx(0.01)  # the one slow message is the p100
