"""`[actors.<kind>]` reaching a running instance: the root supervisor restarts a crashing
actor of a tuned kind with that kind's backoff and limit, gives up as configured (and
/readyz says so), and the admin tree and /metrics show each actor's kind, inbox and
handling figures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from tests.gateway.test_health import Crashy
from tests.harness import OPERATOR_KEY, Gateway, gateway_config, running_gateway
from tests.waiting import wait_until_async

TUNED = """
[actors.accountant]
initial_backoff_s = 0.05
max_backoff_s = 0.05
max_restarts = 3
restart_window_s = 600.0
"""


class CrashingAccountant(Crashy):
    kind = "accountant"


@pytest.fixture
async def tuned(database_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    config = gateway_config(database_url, tmp_path, toml=TUNED)
    async with running_gateway(config) as gw:
        yield gw


async def test_a_tuned_kind_is_restarted_then_given_up_and_readyz_names_it(
    tuned: Gateway,
) -> None:
    crashy = CrashingAccountant("crashy-accountant")
    await tuned.runtime.supervisor.start(crashy)

    async def given_up() -> bool:
        return (await tuned.client.get("/readyz")).status_code == 503

    await wait_until_async(given_up)
    assert crashy.runs == 4  # the first run and max_restarts = 3 restarts
    body = (await tuned.client.get("/readyz")).json()
    assert "crashy-accountant" in str(body)
    r = await tuned.client.get("/v1/admin/actors", headers=tuned.auth(OPERATOR_KEY))
    (node,) = [c for c in r.json()["children"] if c["name"] == "crashy-accountant"]
    assert (node["kind"], node["state"], node["restarts"]) == ("accountant", "failed", 3)
    await tuned.runtime.supervisor.stop("crashy-accountant")
    assert (await tuned.client.get("/readyz")).status_code == 200


async def test_the_admin_tree_and_metrics_show_kinds_and_inboxes(gateway: Gateway) -> None:
    r = await gateway.client.get("/v1/admin/actors", headers=gateway.auth(OPERATOR_KEY))
    nodes = {c["name"]: c for c in r.json()["children"]}
    recorder = nodes["last-used-recorder"]
    assert recorder["kind"] == "batch_writer"
    for field in ("type", "inbox_depth", "inbox_capacity", "messages_handled", "handling_p99_s"):
        assert field in recorder
    assert nodes["accountant"]["kind"] == "accountant"
    text = (await gateway.client.get("/metrics")).text
    assert 'gateway_actors{kind="accountant",state="running"} 1' in text
    assert 'gateway_actor_restarts_by_kind{kind="batch_writer"} 0' in text
    assert 'gateway_actor_inbox_depth{kind="batch_writer"}' in text
    assert 'gateway_actor_messages_handled{kind="batch_writer"}' in text


@pytest.mark.parametrize("knob", ["inbox_capacity = 4", "max_restarts = 3"])
def test_no_stream_relay_knob_is_accepted(tmp_path: Path, knob: str) -> None:
    """A relay has no inbox and is never restarted: a knob set for it is refused at start."""
    path = tmp_path / "gateway.toml"
    path.write_text(f"[actors.stream_relay]\n{knob}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    key = knob.split(" ", 1)[0]
    assert str(caught.value) == (
        f"{path}: actors.stream_relay.{key}: does not apply: a stream relay has no inbox (it"
        " writes to its client itself: a slow client slows its upstream reads) and is never"
        " restarted nor retired (a broken stream cannot resume); no [actors] knob applies to it"
    )
