"""Stripe's events and what follows a payment (issue #24), over real HTTP against the simulated
Stripe: the webhook's signature checks, refunds (by the operator's command and from Stripe's
dashboard), disputes, auto-replenish off session, and the reconciler crediting what a request
and its webhook both missed. The ledger stays exact after each (balance = sum of rows)."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path

import pytest
import stripe

from actors.payment_reconciler import PaymentReconciler
from bench.stripe import sign
from gateway.credits.refund_command import refund_command
from gateway.credits.stripe_webhook import PATH
from tests.charges import usage_charge
from tests.gateway.stripe_rig import SECRET_KEY, WEBHOOK_SECRET, StripeGateway, stripe_gateway
from tests.waiting import wait_until_async


@pytest.fixture
async def sg(database_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    async with stripe_gateway(database_url, tmp_path) as rig:
        yield rig


async def paid(sg: StripeGateway, amount: float = 20) -> str:
    """A top-up with the default visa; its transaction id."""
    assert (await sg.attach("pm_card_visa")).status_code == 200
    r = await sg.topup(amount)
    assert r.status_code == 200, r.text
    txn_id: str = r.json()["transaction_id"]
    return txn_id


def event_body(sg: StripeGateway, type: str, obj: dict) -> bytes:  # type: ignore[type-arg]
    return json.dumps(
        {
            "id": f"evt_forged{int(time.time() * 1000)}",
            "object": "event",
            "type": type,
            "created": int(time.time()),
            "data": {"object": obj},
        }
    ).encode()


async def test_a_forged_or_stale_event_is_refused_400_and_changes_nothing(
    sg: StripeGateway,
) -> None:
    await paid(sg)
    pi = next(iter(sg.sim.payment_intents.values()))
    # The same PaymentIntent again, as a second succeeded payment would look: were it believed,
    # nothing new would be credited (same id) — so forge one with a new id and our metadata.
    forged = dict(pi, id="pi_forged0001", amount_received=900_000)
    body = event_body(sg, "payment_intent.succeeded", forged)
    now = int(time.time())
    cases = {
        "no signature": {},
        "wrong secret": {"Stripe-Signature": sign(body, "whsec_not_ours_000000000000", now)},
        "stale": {"Stripe-Signature": sign(body, WEBHOOK_SECRET, now - 301)},
        "garbage": {"Stripe-Signature": "t=abc,v1=zz"},
    }
    for name, headers in cases.items():
        r = await sg.client.post(PATH, content=body, headers=headers)
        assert r.status_code == 400, (name, r.text)
        assert r.json()["error"]["code"] == "invalid_signature", name
    tampered = body.replace(b"900000", b"900001")
    r = await sg.client.post(
        PATH, content=tampered, headers={"Stripe-Signature": sign(body, WEBHOOK_SECRET, now)}
    )
    assert r.status_code == 400
    assert await sg.balance() == 20.0 and len(await sg.rows("topup")) == 1
    # Signed properly, an event about a customer that is no organization's is acknowledged
    # and ignored.
    stranger = dict(forged, customer="cus_someone_else")
    body = event_body(sg, "payment_intent.succeeded", stranger)
    r = await sg.client.post(
        PATH, content=body, headers={"Stripe-Signature": sign(body, WEBHOOK_SECRET, now)}
    )
    assert r.status_code == 200, r.text
    assert await sg.balance() == 20.0
    await sg.assert_ledger_exact()


async def test_a_refund_by_the_operators_command_writes_a_refund_row_once(
    sg: StripeGateway,
) -> None:
    txn_id = await paid(sg, 20)
    config = sg.gw.runtime.config
    assert await refund_command(config, "txn_not_a_top_up", None) == 1
    assert await refund_command(config, txn_id, Decimal("25")) == 1  # more than was paid
    assert await refund_command(config, txn_id, Decimal("5")) == 0
    (refund,) = await sg.rows("refund")
    assert refund.amount_micros == -5_000_000 and refund.payment_ref.startswith("pi_")
    # Stripe's charge.refunded follows: the same refund, not a second row.
    await sg.event_handled("charge.refunded")
    assert len(await sg.rows("refund")) == 1
    # The rest, then nothing is left to refund.
    assert await refund_command(config, txn_id, None) == 0
    assert await refund_command(config, txn_id, None) == 1
    await sg.event_handled("charge.refunded", count=2)
    assert await sg.balance() == 0.0
    assert sum(r.amount_micros for r in await sg.rows("refund")) == -20_000_000
    await sg.assert_ledger_exact()


async def test_a_refund_and_a_dispute_made_in_stripe_arrive_by_webhook(
    sg: StripeGateway,
) -> None:
    await paid(sg, 30)
    pi = next(iter(sg.sim.payment_intents.values()))
    sg.sim.refund_from_dashboard(pi["id"], 1000)  # 10 USD
    await sg.event_handled("charge.refunded")
    assert await sg.balance() == 20.0
    acc = sg.gw.runtime.accountant  # 15 USD of it is spent
    acc.settle(await acc.reserve(sg.gw.org_id, 15_000_000), usage_charge(sg.gw.org_id, 15_000_000))
    await acc.flush()
    sg.sim.create_dispute(pi["id"])  # what was not refunded, 20 USD, is disputed
    await sg.event_handled("charge.dispute.created")
    # The balance may go below zero; inference is then refused 402 until a top-up.
    assert await sg.balance() == -15.0
    (adjustment,) = await sg.rows("adjustment")
    assert adjustment.amount_micros == -20_000_000 and adjustment.payment_ref == pi["id"]
    with pytest.raises(Exception) as refused:
        await sg.gw.runtime.accountant.reserve(sg.gw.org_id, 1)
    assert type(refused.value).__name__ == "InsufficientCredits"
    await sg.assert_ledger_exact()


async def test_auto_replenish_charges_off_session_and_credits_once(sg: StripeGateway) -> None:
    await paid(sg, 6)
    r = await sg.client.patch(
        "/v1/credits",
        json={"auto_replenish": True, "replenish_amount_usd": 20, "replenish_threshold_usd": 5},
        headers=sg.auth(),
    )
    assert r.status_code == 200, r.text
    acc = sg.gw.runtime.accountant
    acc.settle(await acc.reserve(sg.gw.org_id, 2_000_000), usage_charge(sg.gw.org_id, 2_000_000))
    await acc.flush()
    await wait_until_async(lambda: _topups(sg, 2), limit_s=20)
    auto = [pi for pi in sg.sim.payment_intents.values() if pi["metadata"]["kind"] != "topup"]
    (pi,) = auto
    assert pi["amount"] == 2000 and pi["metadata"]["kind"] == "auto_replenish"
    (made,) = [
        r
        for r in sg.sim.requests
        if (r.method, r.path) == ("POST", "/v1/payment_intents")
        and r.params["metadata"]["kind"] == "auto_replenish"
    ]
    assert made.params["off_session"] == "true" and made.params["confirm"] == "true"
    await sg.event_handled("payment_intent.succeeded", count=2)
    assert await sg.balance() == 24.0
    rows = await sg.rows("topup")
    assert rows[0].description == "Auto top-up (visa 4242)" and rows[0].payment_ref == pi["id"]
    await sg.assert_ledger_exact()


async def _topups(sg: StripeGateway, count: int) -> bool:
    return len(await sg.rows("topup")) >= count


async def test_a_declined_auto_replenish_turns_it_off_with_a_note_and_an_event(
    sg: StripeGateway,
) -> None:
    await paid(sg, 6)
    assert (await sg.attach("pm_card_authenticationRequired")).status_code == 200
    r = await sg.client.patch(
        "/v1/credits",
        json={"auto_replenish": True, "replenish_amount_usd": 20, "replenish_threshold_usd": 5},
        headers=sg.auth(),
    )
    assert r.status_code == 200
    acc = sg.gw.runtime.accountant
    acc.settle(await acc.reserve(sg.gw.org_id, 2_000_000), usage_charge(sg.gw.org_id, 2_000_000))
    await acc.flush()

    async def off() -> bool:
        r = await sg.client.get("/v1/credits", headers=sg.auth())
        return r.json()["auto_replenish"] is False

    await wait_until_async(off, limit_s=20)
    account = (await sg.client.get("/v1/credits", headers=sg.auth())).json()
    assert "authentication_required" in account["auto_replenish_failure"]
    events = await sg.gw.runtime.storage.events.list_for_org(sg.gw.org_id, limit=50)
    failed = [e for e in events if e.type == "billing.auto_replenish_failed"]
    assert len(failed) == 1
    # Stripe's payment_intent.payment_failed follows: it was off already, no second event.
    await sg.event_handled("payment_intent.payment_failed")
    again = await sg.gw.runtime.storage.events.list_for_org(sg.gw.org_id, limit=50)
    assert len([e for e in again if e.type == "billing.auto_replenish_failed"]) == 1
    assert await sg.balance() == 4.0
    await sg.assert_ledger_exact()


async def test_the_reconciler_credits_a_succeeded_payment_the_ledger_misses(
    sg: StripeGateway,
) -> None:
    """The request lost Stripe's answer and the webhook never came: the reconciler's pass
    credits it, once, however often it runs."""
    assert (await sg.attach("pm_card_visa")).status_code == 200
    sg.sim.webhooks_paused = True
    # What a top-up request that died right after Stripe's answer leaves: a succeeded
    # PaymentIntent and no row (tests/gateway/test_stripe_processes.py does it with kill -9).
    payments = sg.gw.runtime.payments
    method = await payments.default_method(sg.gw.org_id)
    assert method is not None
    await payments.charge(sg.gw.org_id, method, 15_000_000, "topup:lost-answer")
    assert await sg.balance() == 0.0
    reconciler = sg.gw.runtime.supervisor.get("payment-reconciler")
    assert isinstance(reconciler, PaymentReconciler)
    await wait_until_async(lambda: _reconciled(sg, reconciler), limit_s=60)
    assert await sg.balance() == 15.0
    sg.sim.webhooks_paused = False
    await sg.event_handled("payment_intent.succeeded")
    assert len(await sg.rows("topup")) == 1
    await sg.assert_ledger_exact()


async def _reconciled(sg: StripeGateway, reconciler) -> bool:  # type: ignore[no-untyped-def]
    await reconciler.reconcile_once()
    return len(await sg.rows("topup")) == 1


@pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")  # the stock client
async def test_a_refund_of_a_payment_the_gateway_did_not_make_changes_nothing(
    sg: StripeGateway,
) -> None:
    """Someone charges the org's Customer by hand in Stripe's dashboard, then refunds it: the
    gateway never credited it, so the refund takes nothing off."""
    await paid(sg, 10)
    customer = await sg.gw.runtime.storage.payments.customer(sg.gw.org_id, "stripe")
    assert customer is not None
    http = stripe.HTTPXClient()
    client = stripe.StripeClient(SECRET_KEY, base_addresses={"api": sg.sim.url}, http_client=http)
    try:
        by_hand = await client.v1.payment_intents.create_async(
            {
                "amount": 700,
                "currency": "usd",
                "customer": customer,
                "payment_method": "pm_card_visa",
                "confirm": True,
                "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            }
        )
    finally:
        await http.close_async()  # type: ignore[no-untyped-call]
    assert by_hand.status == "succeeded"
    sg.sim.refund_from_dashboard(by_hand.id)
    await sg.event_handled("charge.refunded")
    await sg.event_handled("payment_intent.succeeded", count=2)
    assert await sg.balance() == 10.0 and await sg.rows("refund") == []
    await sg.assert_ledger_exact()
