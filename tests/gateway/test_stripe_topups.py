"""Top-ups through Stripe (issue #24), over real HTTP: the client calls the gateway, the gateway's
official SDK calls the simulated Stripe, the simulator sends signed events back to the gateway's
webhook. Every scenario ends with the ledger exact (balance = sum of rows; every credit row names
its PaymentIntent), on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.gateway.stripe_rig import StripeGateway, stripe_gateway


@pytest.fixture
async def sg(database_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    async with stripe_gateway(database_url, tmp_path) as rig:
        yield rig


def only_intent(sg: StripeGateway) -> dict:  # type: ignore[type-arg]
    (pi,) = sg.sim.payment_intents.values()
    return pi  # type: ignore[no-any-return]


async def test_a_top_up_charges_the_default_card_and_is_credited_once(sg: StripeGateway) -> None:
    attached = await sg.attach("pm_card_visa")
    assert attached.status_code == 200, attached.text
    method = attached.json()
    assert method["brand"] == "visa" and method["last4"] == "4242" and method["is_default"]
    assert method["id"].startswith("pm_") and method["id"] != "pm_card_visa"

    r = await sg.topup(20, key="first-top-up")
    assert r.status_code == 200, r.text
    assert r.json()["amount_usd"] == 20.0 and r.json()["new_balance_usd"] == 20.0
    pi = only_intent(sg)
    assert (pi["amount"], pi["currency"], pi["status"]) == (2000, "usd", "succeeded")
    assert pi["payment_method"] == method["id"]
    (row,) = await sg.rows("topup")
    assert row.id == r.json()["transaction_id"] and row.payment_ref == pi["id"]
    assert row.description == "Top-up (visa 4242)"
    # Stripe's payment_intent.succeeded arrives too: the same payment, not a second credit.
    await sg.event_handled("payment_intent.succeeded")
    assert await sg.balance() == 20.0
    assert len(await sg.rows("topup")) == 1
    sub = await sg.client.get("/v1/billing/subscription", headers=sg.auth())
    assert sub.json()["payment_method"] == {"type": "card", "last4": "4242", "brand": "visa"}
    await sg.assert_ledger_exact()


async def test_without_a_default_card_a_top_up_is_400_and_charges_nothing(
    sg: StripeGateway,
) -> None:
    r = await sg.topup(20)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "payment_method_required"
    sub = await sg.client.get("/v1/billing/subscription", headers=sg.auth())
    assert sub.status_code == 200 and sub.json()["payment_method"] is None
    assert not sg.sim.payment_intents
    await sg.assert_ledger_exact()


async def test_a_declined_card_is_402_with_stripes_decline_code_and_nothing_credited(
    sg: StripeGateway,
) -> None:
    refused = await sg.attach("pm_card_chargeDeclined")
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "card_declined"
    assert await sg.attach("pm_card_chargeCustomerFail") is not None
    r = await sg.topup(20)
    assert r.status_code == 402, r.text
    error = r.json()["error"]
    assert error["code"] == "card_declined" and error["decline_code"] == "generic_decline"
    assert error["type"] == "billing_error" and error["param"] == "payment_method_id"
    funds = await sg.topup(20, method="pm_card_chargeDeclinedInsufficientFunds")
    assert funds.status_code == 402
    assert funds.json()["error"]["decline_code"] == "insufficient_funds"
    assert await sg.balance() == 0.0
    assert await sg.rows("topup") == []
    await sg.assert_ledger_exact()


async def test_3d_secure_is_402_with_the_client_secret_then_the_webhook_credits_it(
    sg: StripeGateway,
) -> None:
    assert (await sg.attach("pm_card_authenticationRequired")).status_code == 200
    r = await sg.topup(25, key="needs-3ds")
    assert r.status_code == 402, r.text
    error = r.json()["error"]
    assert error["code"] == "payment_requires_action"
    pi = only_intent(sg)
    assert error["payment_intent"] == pi["id"]
    assert error["client_secret"] == pi["client_secret"]
    assert await sg.balance() == 0.0

    sg.sim.complete_authentication(pi["id"])  # the cardholder finished it in Stripe.js
    await sg.event_handled("payment_intent.succeeded")
    assert await sg.balance() == 25.0
    (row,) = await sg.rows("topup")
    assert row.payment_ref == pi["id"]
    # The client retries its request: the same PaymentIntent, the same row, no second charge.
    again = await sg.topup(25, key="needs-3ds")
    assert again.status_code == 200, again.text
    assert again.json()["transaction_id"] == row.id
    assert len(sg.sim.payment_intents) == 1 and len(await sg.rows("topup")) == 1
    await sg.assert_ledger_exact()


async def test_when_stripe_is_down_a_top_up_is_503_and_nothing_is_credited_or_lost(
    sg: StripeGateway,
) -> None:
    assert (await sg.attach("pm_card_visa")).status_code == 200
    for outage in ("refuse", "500"):
        sg.sim.outage = outage
        r = await sg.topup(20, key=f"while-down-{outage}")
        assert r.status_code == 503, (outage, r.text)
        assert r.json()["error"]["code"] == "payment_provider_unavailable"
        assert await sg.balance() == 0.0
        assert not [pi for pi in sg.sim.payment_intents.values() if pi["status"] == "succeeded"]
    sg.sim.outage = None
    r = await sg.topup(20, key="while-down-500")  # the client's retry, once Stripe is back
    assert r.status_code == 200, r.text
    assert await sg.balance() == 20.0
    await sg.assert_ledger_exact()


async def test_the_same_idempotency_key_makes_one_payment_intent_and_one_credit(
    sg: StripeGateway,
) -> None:
    assert (await sg.attach("pm_card_visa")).status_code == 200
    answers = []

    async def send() -> None:
        answers.append(await sg.topup(30, key="same-key"))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(send)
    assert {r.status_code for r in answers} <= {200, 409}
    assert any(r.status_code == 200 for r in answers)
    later = await sg.topup(30, key="same-key")
    assert later.status_code == 200 and later.headers.get("idempotent-replayed") == "true"
    assert len(sg.sim.payment_intents) == 1
    assert len(await sg.rows("topup")) == 1 and await sg.balance() == 30.0
    await sg.assert_ledger_exact()


async def test_a_webhook_delivered_twice_credits_once(sg: StripeGateway) -> None:
    assert (await sg.attach("pm_card_authenticationRequired")).status_code == 200
    assert (await sg.topup(10)).status_code == 402
    pi = only_intent(sg)
    sg.sim.complete_authentication(pi["id"])
    await sg.event_handled("payment_intent.succeeded")
    (event,) = [e for e in sg.sim.events if e["type"] == "payment_intent.succeeded"]
    sg.sim.redeliver(event["id"])
    sg.sim.redeliver(event["id"])
    await sg.event_handled("payment_intent.succeeded", count=3)
    assert await sg.balance() == 10.0 and len(await sg.rows("topup")) == 1
    assert await sg.gw.runtime.storage.payments.seen(event["id"])
    await sg.assert_ledger_exact()
