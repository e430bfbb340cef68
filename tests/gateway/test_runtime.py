"""The root of an instance: cancelling it stops every actor promptly, and they flush."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
import trio

from actors.base import Actor
from gateway.area import Area, Areas
from gateway.files import FileStore
from gateway.files.area import FilesArea
from gateway.fine_tuning.area import FineTuningArea
from gateway.runtime import open_runtime
from gateway.web import Routes
from protocol.credentials import CredentialKind
from storage.instance_slot import hold_slot
from tests.harness import gateway_config


class Lingering(Actor):
    """Holds on until cancelled, then needs a moment of its own to clean up."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cleaned_up = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.01)
            self.cleaned_up = True


async def test_cancelling_the_root_stops_every_actor(database_url: str, tmp_path: Path) -> None:
    config = gateway_config(database_url, tmp_path)
    actors = [Lingering(f"lingering-{i}") for i in range(3)]
    with trio.fail_after(5):  # far inside the default 30 s grace period
        with trio.CancelScope() as root:
            async with open_runtime(config) as runtime:
                for actor in actors:
                    await runtime.supervisor.start(actor)
                storage = runtime.storage
                org = await storage.orgs.create("o")
                cred = runtime.hasher.generate(CredentialKind.SECRET)
                key = await storage.keys.create(org.id, cred, {"name": "k"})
                runtime.last_used.note(key.id, 1234)
                assert runtime.supervisor.all_running()
                root.cancel()
                await trio.sleep_forever()
    assert all(a.cleaned_up for a in actors)
    assert not runtime.supervisor.all_running()
    # The last-used note made it to storage on the way down; reopen to check.
    async with open_runtime(config) as again:
        stored = await again.storage.keys.get(org.id, key.id)
        assert stored is not None and stored.last_used_at == 1234


async def test_the_runtime_holds_the_master_key_once_and_never_shows_it(
    database_url: str, tmp_path: Path
) -> None:
    config = gateway_config(database_url, tmp_path)
    async with open_runtime(config) as runtime:
        assert config.master_key is not None and runtime.master_key == config.master_key
        shown = repr(runtime)
        assert runtime.master_key.hex() not in shown and repr(runtime.master_key) not in shown


class SlotProbe(Actor):
    """On its way down, tries to take an instance slot of the data dir: which one it gets says
    whether the files area still holds its own (slot 0) at that moment."""

    name = "slot-probe"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.owner_on_stop: str | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            with hold_slot(self.data_dir) as owner:
                self.owner_on_stop = owner


async def test_an_areas_resources_outlive_every_actor(database_url: str, tmp_path: Path) -> None:
    """The files area's blob store and instance slot are left only once the actors (which may
    use them while they stop) have stopped."""
    config = gateway_config(database_url, tmp_path)
    probe = SlotProbe(config.data_dir)
    async with open_runtime(config) as runtime:
        files = runtime.area(FilesArea)
        assert files.store.owner is not None and files.store.owner.endswith("-0")
        await runtime.supervisor.start(probe)
        assert "FilesArea" in repr(runtime.areas)
    assert probe.owner_on_stop is not None and probe.owner_on_stop.endswith("-1")
    with hold_slot(config.data_dir) as owner:  # released now
        assert owner.endswith("-0")


def test_an_area_is_found_by_its_own_type() -> None:
    files = FilesArea(routes=Routes(), store=cast(FileStore, None))
    areas = Areas((Area(routes=Routes()), files, Area(routes=Routes())))
    assert areas.get(FilesArea) is files
    with pytest.raises(LookupError):
        areas.get(Area)  # two plain areas: which one is meant is not said
    with pytest.raises(LookupError):
        areas.get(FineTuningArea)
