"""The simulated Stripe's webhooks: signed as Stripe signs them (the SDK's construct_event
accepts them), delivered in order, retried after a failure, redelivered, paused."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from functools import partial

import pytest
import stripe
import trio

from bench.stripe import StripeSim, running_stripe_sim, sign
from bench.stripe.store import Origin
from tests.bench.stripe_sim.support import KEY, SDK_WARNING, WHSEC, sdk_client
from tests.webhook_receiver import CLOSE, HANG, Receiver, response, serve_receiver

pytestmark = SDK_WARNING


@pytest.fixture
async def receiver(nursery: trio.Nursery) -> Receiver:
    started: Receiver = await nursery.start(partial(serve_receiver, tls=None))
    return started


@pytest.fixture
async def hooked(receiver: Receiver) -> AsyncIterator[StripeSim]:
    async with running_stripe_sim(
        secret_key=KEY,
        webhook_url=receiver.url,
        webhook_secret=WHSEC,
        retry_schedule_s=(0.01, 0.02, 0.04),
        attempt_timeout_s=1.0,
    ) as sim:
        yield sim


async def _pay(sim: StripeSim, token: str = "pm_card_visa") -> stripe.PaymentIntent:
    client, http = sdk_client(sim)
    try:
        customer = await client.v1.customers.create_async({"email": "a@example.com"})
        return await client.v1.payment_intents.create_async(
            {
                "amount": 1200,
                "currency": "usd",
                "customer": customer.id,
                "payment_method": token,
                "confirm": True,
            },
            {"idempotency_key": "pay-1"},
        )
    finally:
        await http.close_async()


def _verified(body: bytes, signature: str | None) -> stripe.Event:
    return stripe.Webhook.construct_event(body, signature, WHSEC, tolerance=300)


async def test_events_are_signed_and_delivered_in_order(
    hooked: StripeSim, receiver: Receiver
) -> None:
    pi = await _pay(hooked)
    arrivals = await receiver.wait_for(4)
    events = [_verified(a.body, a.header("stripe-signature")) for a in arrivals]
    assert [e.type for e in events] == [
        "customer.created",
        "payment_intent.created",
        "charge.succeeded",
        "payment_intent.succeeded",
    ]
    assert all(a.method == "POST" and a.target == "/hook" for a in arrivals)
    assert arrivals[0].header("content-type") == "application/json; charset=utf-8"
    succeeded = events[3]
    assert succeeded.data.object.id == pi.id and succeeded.data.object.status == "succeeded"
    assert succeeded.livemode is False and succeeded.pending_webhooks == 1
    assert succeeded.request.idempotency_key == "pay-1"
    assert str(succeeded.request.id).startswith("req_")
    assert succeeded.id == hooked.events[3]["id"]
    stamp = int((arrivals[0].header("stripe-signature") or "").split(",")[0].removeprefix("t="))
    assert abs(stamp - time.time()) < 60
    await hooked.wait_webhooks_idle()
    assert [d.status for d in hooked.deliveries] == [200] * 4


async def test_snapshots_are_taken_when_the_event_happens(
    hooked: StripeSim, receiver: Receiver
) -> None:
    hooked.webhooks_paused = True
    pi = await _pay(hooked)
    hooked.refund_from_dashboard(pi.id, 400)
    hooked.refund_from_dashboard(pi.id)
    assert not receiver.arrivals and not hooked.deliveries
    hooked.webhooks_paused = False
    arrivals = await receiver.wait_for(8)
    events = [json.loads(a.body) for a in arrivals]
    refunded = [e["data"]["object"] for e in events if e["type"] == "charge.refunded"]
    assert [c["amount_refunded"] for c in refunded] == [400, 1200]
    assert [c["refunded"] for c in refunded] == [False, True]
    assert events[4]["request"]["idempotency_key"] is None


async def test_a_failing_receiver_is_retried_with_the_same_event(
    hooked: StripeSim, receiver: Receiver
) -> None:
    receiver.play(response(500), CLOSE, HANG)
    client, http = sdk_client(hooked)
    try:
        await client.v1.customers.create_async({"email": "a@example.com"})
    finally:
        await http.close_async()
    customer_event = hooked.events[0]
    await hooked.wait_webhooks_idle()
    attempts = [(d.attempt, d.status, d.error) for d in hooked.deliveries]
    assert attempts[0] == (1, 500, None)
    assert attempts[1][:2] == (2, None) and attempts[1][2] is not None
    assert attempts[2] == (3, None, "timeout")
    assert attempts[3] == (4, 200, None)
    bodies = {a.body for a in receiver.arrivals}
    assert len(bodies) == 1 and json.loads(bodies.pop())["id"] == customer_event["id"]
    for arrival in receiver.arrivals:
        _verified(arrival.body, arrival.header("stripe-signature"))


async def test_dropped_after_the_last_attempt_then_redelivered(
    hooked: StripeSim, receiver: Receiver
) -> None:
    receiver.play(*[response(503)] * 4)
    client, http = sdk_client(hooked)
    try:
        await client.v1.customers.create_async({"email": "a@example.com"})
    finally:
        await http.close_async()
    await hooked.wait_webhooks_idle()
    event_id = hooked.events[0]["id"]
    assert hooked.dropped_events == [event_id] and len(hooked.deliveries) == 4
    hooked.redeliver(event_id)
    await hooked.wait_webhooks_idle()
    assert hooked.deliveries[-1].status == 200 and hooked.deliveries[-1].event_id == event_id
    hooked.redeliver(event_id)  # a duplicate delivery of a delivered event
    arrivals = await receiver.wait_for(6)
    assert json.loads(arrivals[5].body)["id"] == event_id


async def test_url_and_secret_set_after_start(receiver: Receiver) -> None:
    async with running_stripe_sim(secret_key=KEY) as sim:
        pi = await _pay(sim)
        sim.create_dispute(pi.id)
        assert not sim.deliveries and sim.events[-1]["pending_webhooks"] == 0
        sim.webhook_url, sim.webhook_secret = receiver.url, WHSEC
        arrivals = await receiver.wait_for(len(sim.events))
    last = _verified(arrivals[-1].body, arrivals[-1].header("stripe-signature"))
    assert last.type == "charge.dispute.created" and last.data.object.charge == pi.latest_charge


async def test_unreachable_receiver_is_a_recorded_error() -> None:
    async with running_stripe_sim(
        secret_key=KEY,
        webhook_url="http://127.0.0.1:9/hook",
        webhook_secret=WHSEC,
        retry_schedule_s=(0.01,),
    ) as sim:
        sim.account.emit("customer.updated", {"id": "cus_x"}, Origin())
        await sim.wait_webhooks_idle()
    assert [(d.attempt, d.status) for d in sim.deliveries] == [(1, None), (2, None)]
    assert all(d.error for d in sim.deliveries)


def test_sign_matches_the_sdk_and_stale_or_forged_signatures_fail() -> None:
    body = json.dumps({"id": "evt_1", "object": "event", "type": "x", "data": {"object": {}}})
    now = int(time.time())
    header = sign(body.encode(), WHSEC, now)
    assert header == stripe.WebhookSignature.generate_signature_header(body, WHSEC, now)
    assert _verified(body.encode(), header).id == "evt_1"
    with pytest.raises(stripe.SignatureVerificationError):
        _verified(body.encode(), sign(body.encode(), WHSEC, now - 301))
    with pytest.raises(stripe.SignatureVerificationError):
        _verified(body.encode(), sign(body.encode(), "whsec_other", now))
    with pytest.raises(stripe.SignatureVerificationError):
        _verified(body.encode() + b" ", header)
