"""`kill -9` of a `gateway serve` process between Stripe's success and the ledger row (issue #24):
after a restart, the payment is credited exactly once — by the reconciler's pass at start, and the
webhook that arrives later changes nothing. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.stripe import running_stripe_sim
from gateway.credits.stripe_webhook import PATH
from tests.gateway.stripe_rig import SECRET_KEY, WEBHOOK_SECRET, stripe_toml
from tests.gateway.test_cli import BOOTSTRAP, _env, _gateway, _run, _start, _stop
from tests.waiting import wait_until, wait_until_async

MGMT = {"Authorization": f"Bearer {BOOTSTRAP}"}


async def test_kill_9_between_stripes_success_and_the_ledger_row_credits_once(
    tmp_path: Path, database_url: str
) -> None:
    async with running_stripe_sim(secret_key=SECRET_KEY, webhook_secret=WEBHOOK_SECRET) as sim:
        config = tmp_path / "gateway.toml"
        config.write_text(stripe_toml(sim.url, reconcile_interval_s=3600))
        env = {
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
            "GATEWAY_CONFIG": str(config),
            "GATEWAY_LOG_LEVEL": "WARNING",
            "STRIPE_SECRET_KEY": SECRET_KEY,
            "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        }
        first_home = tmp_path / "p1"
        first_home.mkdir()
        process, url = await _start(_gateway("serve"), _env(first_home, **env), first_home)
        sim.webhook_url = url + PATH
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            r = await client.post(
                "/v1/billing/payment_methods",
                json={"payment_method_id": "pm_card_visa", "default": True},
                headers=MGMT,
            )
            assert r.status_code == 200, r.text
            sim.webhooks_paused = True  # the webhook must not be what credits it
            sim.hang_after_commit = lambda form: True

            async def top_up() -> None:
                try:
                    await client.post("/v1/credits/topup", json={"amount_usd": 15}, headers=MGMT)
                except httpx.HTTPError:
                    pass  # the process died under it

            async with trio.open_nursery() as nursery:
                nursery.start_soon(top_up)
                await wait_until(lambda: _succeeded(sim.payment_intents) == 1)
                process.send_signal(signal.SIGKILL)  # Stripe took the money; no row yet
                with trio.fail_after(30):
                    await process.wait()
        sim.hang_after_commit = None

        second_home = tmp_path / "p2"
        second_home.mkdir()
        process, url = await _start(_gateway("serve"), _env(second_home, **env), second_home)
        sim.webhook_url = url + PATH
        try:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:

                async def credited() -> bool:
                    r = await client.get("/v1/credits", headers=MGMT)
                    return bool(r.json()["balance_usd"] == 15.0)

                await wait_until_async(credited, limit_s=30)  # the reconciler's pass at start
                sim.webhooks_paused = False
                await wait_until(lambda: _acknowledged(sim.deliveries))
                r = await client.get("/v1/credits/transactions", headers=MGMT)
                rows = r.json()["data"]
                assert [row["type"] for row in rows] == ["topup"]
                assert (await client.get("/v1/credits", headers=MGMT)).json()["balance_usd"] == 15
                assert sum(row["amount_usd"] for row in rows) == 15.0
                # The operator refunds 5 USD of it from the command line.
                refund = await _run(
                    _gateway("admin", "refund", rows[0]["id"], "--amount", "5"),
                    _env(second_home, **env),
                    second_home,
                )
                assert refund.returncode == 0, refund.stderr
                assert b"refunded 5.00 USD" in refund.stdout

                async def refunded() -> bool:
                    r = await client.get("/v1/credits", headers=MGMT)
                    return bool(r.json()["balance_usd"] == 10.0)

                await wait_until_async(refunded, limit_s=30)  # within the balance TTL
                (stripe_refund,) = sim.refunds.values()
                assert stripe_refund["amount"] == 500
        finally:
            assert await _stop(process) == 0


def _succeeded(intents: dict[str, Any]) -> int:
    return sum(1 for pi in intents.values() if pi["status"] == "succeeded")


def _acknowledged(deliveries: list[Any]) -> bool:
    return any(
        d.event_type == "payment_intent.succeeded" and d.status is not None and d.status < 300
        for d in deliveries
    )
