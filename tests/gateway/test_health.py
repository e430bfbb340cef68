"""Liveness and readiness (`/livez`, `/readyz`, `/healthz` = `/readyz`): what degrades
readiness and what does not. A database that does not answer does not (inference is still
served); an actor past its restart limit, a drain, or a reason set by other code does."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
import trio.lowlevel

from actors.base import Actor
from actors.supervisor import RestartPolicy
from gateway.server.serve import Served, serve_instance
from gateway.web import Auth, Operation, Request, Response, Routes
from tests.backends import POSTGRES_URL
from tests.gateway.test_database_partition import partitionable_gateway
from tests.harness import Gateway, gateway_config
from tests.waiting import wait_until

PROBES = ("/livez", "/readyz", "/healthz")


class Crashy(Actor):
    def __init__(self, name: str = "crashy") -> None:
        self.name = name
        self.runs = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.runs += 1
        task_status.started()
        await trio.lowlevel.checkpoint()
        raise RuntimeError("crash on purpose")


async def _statuses(gw: Gateway) -> dict[str, httpx.Response]:
    return {path: await gw.client.get(path) for path in PROBES}


async def test_probes_answer_ok_on_a_healthy_instance(gateway: Gateway) -> None:
    for path, r in (await _statuses(gateway)).items():
        assert r.status_code == 200, (path, r.text)
        assert r.json() == {"status": "ok"}


@pytest.mark.skipif(POSTGRES_URL is None, reason="needs GATEWAY_TEST_DATABASE_URL")
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_probes_answer_at_once_and_ready_while_the_database_is_partitioned(
    database_url: str, tmp_path: Path
) -> None:
    async with partitionable_gateway(database_url, tmp_path) as (gw, forwarder):
        forwarder.blackhole()
        # Past the statement timeout (0.5 s) a few times: the background actors that poll the
        # database crash and back off meanwhile.
        until = time.monotonic() + 2.0
        while time.monotonic() < until:
            for path in PROBES:
                started = time.monotonic()
                r = await gw.client.get(path)
                assert time.monotonic() - started < 1.0, path
                assert r.status_code == 200, (path, r.text)
            await trio.sleep(0.05)
        r = await gw.client.post("/v1/keys", json={"name": "x"}, headers=gw.auth())
        assert r.status_code == 503  # the database was really out of reach
        forwarder.heal()
        for path, r in (await _statuses(gw)).items():
            assert r.status_code == 200, (path, r.text)


async def test_an_actor_in_backoff_is_ready_one_past_its_restart_limit_is_not(
    gateway: Gateway,
) -> None:
    supervisor = gateway.runtime.supervisor
    backing_off = Crashy("backing-off")
    await supervisor.start(backing_off, policy=RestartPolicy(initial_backoff=60, max_backoff=60))
    await wait_until(lambda: supervisor.snapshot().children[-1].state == "backoff")
    for path, r in (await _statuses(gateway)).items():
        assert r.status_code == 200, (path, r.text)
    await supervisor.stop("backing-off")

    failing = Crashy("gives-up")
    policy = RestartPolicy(initial_backoff=0.001, max_backoff=0.001, max_restarts=2)
    await supervisor.start(failing, policy=policy)
    await wait_until(lambda: not supervisor.all_running() and failing.runs == 3)
    statuses = await _statuses(gateway)
    assert statuses["/livez"].status_code == 200
    for path in ("/readyz", "/healthz"):
        r = statuses[path]
        assert r.status_code == 503, (path, r.text)
        assert r.headers["retry-after"]
        error = r.json()["error"]
        assert error["code"] == "not_ready" and error["type"] == "server_error"
        assert "gives-up" in error["message"]
    await supervisor.stop("gives-up")
    assert (await gateway.client.get("/readyz")).status_code == 200


async def test_a_reason_set_by_other_code_makes_the_instance_not_ready_until_cleared(
    gateway: Gateway,
) -> None:
    readiness = gateway.runtime.readiness
    readiness.set("master_key", "rotated under this instance; restart it")
    statuses = await _statuses(gateway)
    assert statuses["/livez"].status_code == 200
    for path in ("/readyz", "/healthz"):
        r = statuses[path]
        assert r.status_code == 503, (path, r.text)
        assert r.headers["retry-after"] == "1"
        error = r.json()["error"]
        assert error["code"] == "not_ready" and error["type"] == "server_error"
        assert "master_key: rotated under this instance" in error["message"]
    readiness.clear("master_key")
    for path, r in (await _statuses(gateway)).items():
        assert r.status_code == 200, (path, r.text)


@pytest.mark.parametrize("backend", ["sqlite"])  # about the stop sequence, not storage
async def test_a_draining_instance_is_live_but_not_ready(database_url: str, tmp_path: Path) -> None:
    entered, release, stop = trio.Event(), trio.Event(), trio.Event()
    routes = Routes()

    @routes.operation(Operation("GET", "/v1/test/hold", "held open", "Test", auth=Auth.NONE))
    async def hold(request: Request) -> Response:
        entered.set()
        await release.wait()
        return Response(b"{}")

    config = gateway_config(database_url, tmp_path)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            served: Served = await nursery.start(
                partial(serve_instance, config, shutdown_trigger=stop.wait, extra_routes=[routes])
            )
            readiness = served.runtime.readiness
            async with httpx.AsyncClient(base_url=served.urls[0]) as client:
                assert (await client.get("/readyz")).status_code == 200
                held: list[httpx.Response] = []

                async def request_held() -> None:
                    held.append(await client.get("/v1/test/hold"))

                nursery.start_soon(request_held)
                await entered.wait()
                stop.set()  # what SIGTERM does
                await wait_until(lambda: bool(readiness.reasons()))
                assert readiness.reasons() == ["draining: stopping; in-flight requests finish"]
                assert readiness.live()
                release.set()
                await wait_until(lambda: bool(held))
                assert held[0].status_code == 200
