"""A gateway whose payment processor is Stripe, pointed at the bench suite's simulated Stripe
(bench/stripe/) over real HTTP: the official SDK talks to the simulator, and the simulator sends
its signed events to the gateway's webhook. Helpers the Stripe tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.stripe import StripeSim, running_stripe_sim
from gateway.credits.stripe_webhook import PATH as WEBHOOK_PATH
from tests.harness import Gateway, gateway_config, running_gateway
from tests.waiting import wait_until_async

SECRET_KEY = "sk_test_gateway_0123456789abcdef"
WEBHOOK_SECRET = "whsec_gateway_test_0123456789abcdef"


@dataclass
class StripeGateway:
    gw: Gateway
    sim: StripeSim

    @property
    def client(self) -> httpx.AsyncClient:
        return self.gw.client

    def auth(self) -> dict[str, str]:
        return self.gw.auth()

    async def attach(self, token: str, *, default: bool = True) -> httpx.Response:
        return await self.client.post(
            "/v1/billing/payment_methods",
            json={"payment_method_id": token, "default": default},
            headers=self.auth(),
        )

    async def topup(
        self, amount: float, *, key: str | None = None, method: str | None = None
    ) -> httpx.Response:
        headers = self.auth()
        if key is not None:
            headers["Idempotency-Key"] = key
        body: dict[str, Any] = {"amount_usd": amount}
        if method is not None:
            body["payment_method_id"] = method
        return await self.client.post("/v1/credits/topup", json=body, headers=headers)

    async def balance(self) -> float:
        r = await self.client.get("/v1/credits", headers=self.auth())
        assert r.status_code == 200, r.text
        balance: float = r.json()["balance_usd"]
        return balance

    async def rows(self, type: str | None = None) -> list[Any]:
        found, _ = await self.gw.runtime.storage.ledger.list(
            self.gw.org_id, type=type, limit=200, offset=0
        )
        return found

    async def assert_ledger_exact(self) -> None:
        """The balance is the sum of the rows, and every payment row names its payment."""
        ledger = self.gw.runtime.storage.ledger
        account = await ledger.account(self.gw.org_id)
        assert account.balance_micros == await ledger.sum_rows(self.gw.org_id)
        for row in await self.rows():
            if row.type in ("topup", "refund"):
                assert row.payment_ref is not None and row.payment_ref.startswith("pi_"), row

    async def event_handled(self, type: str, count: int = 1) -> None:
        """Wait until the gateway answered `count` deliveries of events of `type` with 2xx."""

        async def done() -> bool:
            ok = [
                d
                for d in self.sim.deliveries
                if d.event_type == type and d.status is not None and 200 <= d.status < 300
            ]
            return len(ok) >= count

        await wait_until_async(done, limit_s=20)


def stripe_toml(api_base: str, *, reconcile_interval_s: float = 3600.0) -> str:
    return f"""
[billing]
payment_provider = "stripe"
stripe_api_base = "{api_base}"
reconcile_interval_s = {reconcile_interval_s}
"""


@asynccontextmanager
async def stripe_gateway(
    database_url: str, tmp_path: Path, *, reconcile_interval_s: float = 3600.0
) -> AsyncIterator[StripeGateway]:
    async with running_stripe_sim(secret_key=SECRET_KEY, webhook_secret=WEBHOOK_SECRET) as sim:
        config = gateway_config(
            database_url,
            tmp_path,
            toml=stripe_toml(sim.url, reconcile_interval_s=reconcile_interval_s),
            STRIPE_SECRET_KEY=SECRET_KEY,
            STRIPE_WEBHOOK_SECRET=WEBHOOK_SECRET,
        )
        async with running_gateway(config) as gw:
            sim.webhook_url = gw.url + WEBHOOK_PATH
            yield StripeGateway(gw, sim)
