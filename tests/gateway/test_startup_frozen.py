"""While an instance serves, what existed when it opened is out of the collector's reach
(gc.freeze: its full collections walk only what requests make); once it stopped, it is given
back, so a process that runs many instances (this test suite) keeps nothing of them."""

from __future__ import annotations

import gc
from pathlib import Path

from tests.harness import gateway_config, running_gateway


async def test_the_startup_heap_is_frozen_while_serving_and_given_back(
    database_url: str, tmp_path: Path
) -> None:
    gc.unfreeze()  # whatever an earlier test left (none should)
    async with running_gateway(gateway_config(database_url, tmp_path)) as gw:
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the modules, config, routes, actors of the instance
        assert (await gw.client.get("/healthz")).status_code == 200
    assert gc.get_freeze_count() == 0
