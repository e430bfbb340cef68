"""The simulated Stripe driven by the official SDK's async client on Trio: customers, payment
methods and test tokens, payment intents (success, declines, 3-D Secure), idempotency, lists,
refunds, disputes, setup intents, auth and routing errors."""

from __future__ import annotations

import httpx
import pytest
import stripe

from bench.stripe import StripeSim
from tests.bench.stripe_sim.support import KEY, SDK_WARNING, Clock, sdk_client

pytestmark = SDK_WARNING
Client = stripe.StripeClient


async def _customer(client: Client, **params: object) -> stripe.Customer:
    return await client.v1.customers.create_async({"email": "a@example.com", **params})


async def _pay(
    client: Client, customer: str, pm: str, amount: int = 1000, **extra: object
) -> stripe.PaymentIntent:
    params = {
        "amount": amount,
        "currency": "usd",
        "customer": customer,
        "payment_method": pm,
        "confirm": True,
        **extra,
    }
    return await client.v1.payment_intents.create_async(params)


# --- customers and payment methods ------------------------------------------------------------


async def test_customer_create_update_and_expanded_default(client: Client, sim: StripeSim) -> None:
    customer = await _customer(client, name="Org", metadata={"org_id": "o1", "tier": "pro"})
    assert customer.id.startswith("cus_") and customer.object == "customer"
    assert customer.livemode is False and customer.metadata.to_dict() == {
        "org_id": "o1",
        "tier": "pro",
    }
    assert customer.invoice_settings.default_payment_method is None
    pm = await client.v1.payment_methods.attach_async("pm_card_visa", {"customer": customer.id})
    assert pm.id.startswith("pm_") and pm.id != "pm_card_visa"
    assert (pm.customer, pm.card.brand, pm.card.last4, pm.type) == (
        customer.id,
        "visa",
        "4242",
        "card",
    )
    updated = await client.v1.customers.update_async(
        customer.id,
        {"invoice_settings": {"default_payment_method": pm.id}, "metadata": {"tier": ""}},
    )
    assert updated.invoice_settings.default_payment_method == pm.id
    assert updated.metadata.to_dict() == {"org_id": "o1"}  # an empty value deletes its key
    fetched = await client.v1.customers.retrieve_async(
        customer.id, {"expand": ["invoice_settings.default_payment_method"]}
    )
    default = fetched.invoice_settings.default_payment_method
    assert isinstance(default, stripe.PaymentMethod) and default.card.last4 == "4242"
    assert [e["type"] for e in sim.events] == [
        "customer.created",
        "payment_method.attached",
        "customer.updated",
    ]


async def test_default_payment_method_must_be_attached_to_that_customer(client: Client) -> None:
    one, two = await _customer(client), await _customer(client)
    pm = await client.v1.payment_methods.attach_async("pm_card_visa", {"customer": one.id})
    with pytest.raises(stripe.InvalidRequestError) as caught:
        await client.v1.customers.update_async(
            two.id, {"invoice_settings": {"default_payment_method": pm.id}}
        )
    assert caught.value.http_status == 400
    assert caught.value.param == "invoice_settings[default_payment_method]"
    with pytest.raises(stripe.InvalidRequestError) as missing:
        await client.v1.customers.retrieve_async("cus_nope")
    assert missing.value.http_status == 404 and missing.value.code == "resource_missing"


@pytest.mark.parametrize(
    ("token", "decline_code"),
    [
        ("pm_card_chargeDeclined", "generic_decline"),
        ("pm_card_chargeDeclinedInsufficientFunds", "insufficient_funds"),
    ],
)
async def test_attaching_a_declined_card_is_a_card_error(
    client: Client, sim: StripeSim, token: str, decline_code: str
) -> None:
    customer = await _customer(client)
    with pytest.raises(stripe.CardError) as caught:
        await client.v1.payment_methods.attach_async(token, {"customer": customer.id})
    assert caught.value.http_status == 402 and caught.value.code == "card_declined"
    assert caught.value.error is not None and caught.value.error.decline_code == decline_code
    assert not any(pm["customer"] for pm in sim.payment_methods.values())


async def test_list_detach_and_tokens_retrieved_unattached(client: Client) -> None:
    customer = await _customer(client)
    pms = [
        await client.v1.payment_methods.attach_async(token, {"customer": customer.id})
        for token in ("pm_card_visa", "pm_card_mastercard", "pm_card_chargeCustomerFail")
    ]
    await client.v1.customers.update_async(
        customer.id, {"invoice_settings": {"default_payment_method": pms[0].id}}
    )
    page = await client.v1.customers.payment_methods.list_async(
        customer.id, {"type": "card", "limit": 2}
    )
    assert [pm.id for pm in page.data] == [pms[2].id, pms[1].id]  # newest first
    assert page.has_more and page.url == f"/v1/customers/{customer.id}/payment_methods"
    rest = await client.v1.customers.payment_methods.list_async(
        customer.id, {"limit": 2, "starting_after": pms[1].id}
    )
    assert [pm.id for pm in rest.data] == [pms[0].id] and not rest.has_more
    detached = await client.v1.payment_methods.detach_async(pms[0].id)
    assert detached.customer is None
    after = await client.v1.customers.retrieve_async(customer.id)
    assert after.invoice_settings.default_payment_method is None
    token = await client.v1.payment_methods.retrieve_async("pm_card_mastercard")
    assert token.id.startswith("pm_") and token.customer is None and token.card.last4 == "4444"


# --- payment intents --------------------------------------------------------------------------


async def test_payment_succeeds_with_a_charge(client: Client, sim: StripeSim) -> None:
    customer = await _customer(client)
    pm = await client.v1.payment_methods.attach_async("pm_card_visa", {"customer": customer.id})
    pi = await _pay(
        client,
        customer.id,
        pm.id,
        2500,
        off_session=True,
        metadata={"org_id": "o1", "topup": "t1"},
        description="top-up",
        expand=["payment_method"],
    )
    assert pi.status == "succeeded" and pi.amount_received == 2500 and pi.currency == "usd"
    assert isinstance(pi.payment_method, stripe.PaymentMethod) and pi.payment_method.id == pm.id
    assert pi.client_secret.startswith(f"{pi.id}_secret_")
    charge = await client.v1.charges.retrieve_async(str(pi.latest_charge))
    assert (charge.amount, charge.status, charge.paid, charge.captured) == (
        2500,
        "succeeded",
        True,
        True,
    )
    assert charge.payment_intent == pi.id and charge.customer == customer.id
    assert charge.metadata.to_dict() == {"org_id": "o1", "topup": "t1"}
    assert charge.amount_refunded == 0 and charge.refunded is False and charge.disputed is False
    assert [e["type"] for e in sim.events[-3:]] == [
        "payment_intent.created",
        "charge.succeeded",
        "payment_intent.succeeded",
    ]
    again = await client.v1.payment_intents.retrieve_async(pi.id)
    assert again.status == "succeeded" and again.payment_method == pm.id


async def test_unconfirmed_and_token_payments(client: Client) -> None:
    customer = await _customer(client)
    waiting = await client.v1.payment_intents.create_async(
        {"amount": 50, "currency": "USD", "customer": customer.id}
    )
    assert waiting.status == "requires_payment_method" and waiting.currency == "usd"
    paid = await _pay(client, customer.id, "pm_card_mastercard")
    assert paid.status == "succeeded" and str(paid.payment_method).startswith("pm_")
    assert paid.payment_method != "pm_card_mastercard"


@pytest.mark.parametrize(
    ("token", "code", "decline_code"),
    [
        ("pm_card_chargeCustomerFail", "card_declined", "generic_decline"),
        ("pm_card_chargeDeclined", "card_declined", "generic_decline"),
        ("pm_card_chargeDeclinedInsufficientFunds", "card_declined", "insufficient_funds"),
    ],
)
async def test_declined_payment_is_a_card_error_with_the_payment_intent(
    client: Client, sim: StripeSim, token: str, code: str, decline_code: str
) -> None:
    customer = await _customer(client)
    with pytest.raises(stripe.CardError) as caught:
        await _pay(client, customer.id, token, metadata={"topup": "t9"})
    error = caught.value.error
    assert caught.value.http_status == 402 and caught.value.code == code
    assert error is not None and error.decline_code == decline_code
    pi = error.payment_intent
    assert pi is not None and pi.status == "requires_payment_method"
    assert pi.last_payment_error is not None and pi.last_payment_error.decline_code == decline_code
    listed = await client.v1.payment_intents.list_async({"customer": customer.id})
    assert [p.id for p in listed.data] == [pi.id]
    assert sim.charges[str(pi.latest_charge)]["status"] == "failed"
    assert sim.events_of("payment_intent.payment_failed")[-1]["data"]["object"]["id"] == pi.id
    assert not sim.events_of("payment_intent.succeeded")


async def test_a_card_that_fails_every_charge_attaches(client: Client) -> None:
    customer = await _customer(client)
    pm = await client.v1.payment_methods.attach_async(
        "pm_card_chargeCustomerFail", {"customer": customer.id}
    )
    with pytest.raises(stripe.CardError):
        await _pay(client, customer.id, pm.id, off_session=True)


async def test_payment_method_errors(client: Client) -> None:
    one, two = await _customer(client), await _customer(client)
    pm = await client.v1.payment_methods.attach_async("pm_card_visa", {"customer": one.id})
    with pytest.raises(stripe.InvalidRequestError) as foreign:
        await _pay(client, two.id, pm.id)
    assert foreign.value.http_status == 400 and foreign.value.param == "payment_method"
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        await _pay(client, one.id, "pm_doesnotexist")
    assert unknown.value.code == "resource_missing" and unknown.value.param == "payment_method"
    with pytest.raises(stripe.InvalidRequestError) as small:
        await _pay(client, one.id, pm.id, amount=49)
    assert small.value.param == "amount" and small.value.code == "amount_too_small"
    with pytest.raises(stripe.InvalidRequestError) as no_currency:
        await client.v1.payment_intents.create_async({"amount": 100})
    assert no_currency.value.param == "currency"
    with pytest.raises(stripe.InvalidRequestError) as unknown_param:
        await client.v1.payment_intents.create_async(
            {"amount": 100, "currency": "usd", "colour": "red"}
        )
    assert unknown_param.value.param == "colour"


async def test_three_d_secure_on_session_then_completed(client: Client, sim: StripeSim) -> None:
    customer = await _customer(client)
    pm = await client.v1.payment_methods.attach_async(
        "pm_card_authenticationRequired", {"customer": customer.id}
    )
    pi = await _pay(client, customer.id, pm.id)
    assert pi.status == "requires_action" and pi.next_action is not None
    assert pi.next_action.type == "use_stripe_sdk" and pi.latest_charge is None
    assert pi.client_secret.startswith(f"{pi.id}_secret_")
    assert sim.events[-1]["type"] == "payment_intent.requires_action"
    sim.complete_authentication(pi.id)
    done = await client.v1.payment_intents.retrieve_async(pi.id)
    assert done.status == "succeeded" and done.latest_charge in sim.charges
    assert [e["type"] for e in sim.events[-2:]] == ["charge.succeeded", "payment_intent.succeeded"]
    second = await _pay(client, customer.id, pm.id)
    sim.complete_authentication(second.id, succeed=False)
    failed = await client.v1.payment_intents.retrieve_async(second.id)
    assert failed.status == "requires_payment_method" and failed.last_payment_error is not None
    assert sim.events[-1]["type"] == "payment_intent.payment_failed"


async def test_three_d_secure_off_session_is_declined(client: Client) -> None:
    customer = await _customer(client)
    pm = await client.v1.payment_methods.attach_async(
        "pm_card_authenticationRequired", {"customer": customer.id}
    )
    with pytest.raises(stripe.CardError) as caught:
        await _pay(client, customer.id, pm.id, off_session=True)
    assert caught.value.code == "authentication_required"
    assert caught.value.error is not None
    assert caught.value.error.decline_code == "authentication_required"
    assert caught.value.error.payment_intent is not None
    assert caught.value.error.payment_intent.status == "requires_payment_method"


# --- idempotency ------------------------------------------------------------------------------


async def test_same_key_replays_the_first_answer(client: Client, sim: StripeSim) -> None:
    customer = await _customer(client)
    params = {
        "amount": 700,
        "currency": "usd",
        "customer": customer.id,
        "payment_method": "pm_card_visa",
        "confirm": True,
        "metadata": {"topup": "t1"},
    }
    first = await client.v1.payment_intents.create_async(params, {"idempotency_key": "topup-t1"})
    events = len(sim.events)
    second = await client.v1.payment_intents.create_async(params, {"idempotency_key": "topup-t1"})
    assert second.id == first.id and second.latest_charge == first.latest_charge
    assert len(sim.payment_intents) == 1 and len(sim.charges) == 1 and len(sim.events) == events
    assert sim.requests[-1].replayed and sim.counters.replays == 1
    async with httpx.AsyncClient(base_url=sim.url) as raw:
        replay = await raw.post(
            "/v1/payment_intents",
            content=client_form(params),
            headers={
                "authorization": f"Bearer {KEY}",
                "idempotency-key": "topup-t1",
                "content-type": "application/x-www-form-urlencoded",
            },
        )
    assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
    assert replay.json()["id"] == first.id
    with pytest.raises(stripe.IdempotencyError) as mismatch:
        await client.v1.payment_intents.create_async(
            {**params, "amount": 701},
            {"idempotency_key": "topup-t1"},
        )
    assert mismatch.value.http_status == 400 and len(sim.payment_intents) == 1


def client_form(params: dict[str, object]) -> bytes:
    from bench.stripe.forms import encode_form

    return encode_form(params).encode()


async def test_a_decline_is_replayed_and_a_key_is_per_api_key(
    client: Client, sim: StripeSim
) -> None:
    customer = await _customer(client)
    params = {
        "amount": 700,
        "currency": "usd",
        "customer": customer.id,
        "payment_method": "pm_card_chargeCustomerFail",
        "confirm": True,
    }
    errors = []
    for _ in range(2):
        with pytest.raises(stripe.CardError) as caught:
            await client.v1.payment_intents.create_async(params, {"idempotency_key": "k-decline"})
        errors.append(caught.value)
    assert errors[0].json_body == errors[1].json_body and len(sim.payment_intents) == 1
    bad_amount = {**params, "amount": 10}
    for _ in range(2):  # a validation error is not kept: the same key runs again
        with pytest.raises(stripe.InvalidRequestError):
            await client.v1.payment_intents.create_async(bad_amount, {"idempotency_key": "k-400"})
    assert sim.counters.replays == 1


# --- lists ------------------------------------------------------------------------------------


async def test_list_payment_intents_by_created_and_pages(
    client: Client, sim: StripeSim, clock: Clock
) -> None:
    customer = await _customer(client)
    other = await _customer(client)
    ids = []
    for i in range(5):
        clock.t = 1_800_000_000 + i * 100
        ids.append((await _pay(client, customer.id, "pm_card_visa", 100 + i)).id)
    await _pay(client, other.id, "pm_card_visa")
    newest_first = list(reversed(ids))
    everything = await client.v1.payment_intents.list_async({"customer": customer.id})
    assert [p.id for p in everything.data] == newest_first and not everything.has_more
    window = await client.v1.payment_intents.list_async(
        {"customer": customer.id, "created": {"gte": 1_800_000_100, "lt": 1_800_000_400}}
    )
    assert [p.id for p in window.data] == newest_first[1:4]
    after = await client.v1.payment_intents.list_async(
        {"customer": customer.id, "created": {"gt": 1_800_000_300}}
    )
    assert [p.id for p in after.data] == newest_first[:1]
    page = await client.v1.payment_intents.list_async({"customer": customer.id, "limit": 2})
    assert [p.id for p in page.data] == newest_first[:2] and page.has_more
    seen = [p.id async for p in page.auto_paging_iter()]
    assert seen == newest_first
    with pytest.raises(stripe.InvalidRequestError) as bad:
        await client.v1.payment_intents.list_async({"limit": 101})
    assert bad.value.param == "limit"
    all_of_them = await client.v1.payment_intents.list_async({"limit": 100})
    assert len(all_of_them.data) == 6


# --- refunds and disputes ---------------------------------------------------------------------


async def test_refunds_partial_full_and_too_much(client: Client, sim: StripeSim) -> None:
    customer = await _customer(client)
    pi = await _pay(client, customer.id, "pm_card_visa", 1000)
    partial = await client.v1.refunds.create_async(
        {"payment_intent": pi.id, "amount": 300, "reason": "requested_by_customer"}
    )
    assert (partial.amount, partial.status, partial.payment_intent) == (300, "succeeded", pi.id)
    assert partial.charge == pi.latest_charge and partial.currency == "usd"
    with pytest.raises(stripe.InvalidRequestError) as too_much:
        await client.v1.refunds.create_async({"payment_intent": pi.id, "amount": 701})
    assert too_much.value.code == "amount_too_large" and too_much.value.param == "amount"
    rest = await client.v1.refunds.create_async(
        {"charge": str(pi.latest_charge), "metadata": {"why": "rest"}}
    )
    assert rest.amount == 700 and rest.metadata.to_dict() == {"why": "rest"}
    charge = await client.v1.charges.retrieve_async(str(pi.latest_charge))
    assert charge.amount_refunded == 1000 and charge.refunded is True
    with pytest.raises(stripe.InvalidRequestError) as nothing_left:
        await client.v1.refunds.create_async({"payment_intent": pi.id})
    assert nothing_left.value.code == "charge_already_refunded"
    fetched = await client.v1.refunds.retrieve_async(partial.id)
    assert fetched.amount == 300
    refunded = sim.events_of("charge.refunded")
    assert [e["data"]["object"]["amount_refunded"] for e in refunded] == [300, 1000]
    assert len(sim.events_of("refund.created")) == 2


async def test_dashboard_refund_and_dispute(client: Client, sim: StripeSim) -> None:
    customer = await _customer(client)
    pi = await _pay(client, customer.id, "pm_card_visa", 1000)
    refund = sim.refund_from_dashboard(pi.id, 200)
    assert refund["amount"] == 200 and sim.events[-1]["type"] == "refund.created"
    dispute = sim.create_dispute(pi.id)
    assert dispute["id"].startswith("dp_") and dispute["status"] == "needs_response"
    assert dispute["amount"] == 800 and dispute["reason"] == "fraudulent"
    charge = await client.v1.charges.retrieve_async(str(pi.latest_charge))
    assert charge.disputed is True
    assert sim.events[-1]["type"] == "charge.dispute.created"
    assert sim.events[-1]["data"]["object"]["payment_intent"] == pi.id


# --- setup intents ----------------------------------------------------------------------------


async def test_setup_intent_confirmed_by_the_browser(client: Client, sim: StripeSim) -> None:
    customer = await _customer(client)
    seti = await client.v1.setup_intents.create_async(
        {"customer": customer.id, "usage": "off_session", "payment_method_types": ["card"]}
    )
    assert seti.status == "requires_payment_method" and seti.payment_method is None
    assert seti.client_secret.startswith(f"{seti.id}_secret_") and seti.usage == "off_session"
    sim.confirm_setup_intent(seti.id, "pm_card_mastercard")
    done = await client.v1.setup_intents.retrieve_async(seti.id)
    assert done.status == "succeeded" and done.payment_method is not None
    pm = await client.v1.payment_methods.retrieve_async(str(done.payment_method))
    assert pm.customer == customer.id and pm.card.brand == "mastercard"
    assert sim.events[-1]["type"] == "setup_intent.succeeded"


# --- auth, routes, outages --------------------------------------------------------------------


async def test_a_wrong_key_is_401(sim: StripeSim) -> None:
    wrong, http = sdk_client(sim, key="sk_test_wrong_key_123")
    try:
        with pytest.raises(stripe.AuthenticationError) as caught:
            await wrong.v1.customers.create_async({"email": "x@example.com"})
    finally:
        await http.close_async()
    assert caught.value.http_status == 401 and not sim.customers
    async with httpx.AsyncClient(base_url=sim.url) as raw:
        response = await raw.get("/v1/customers/cus_x")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_unknown_route_is_404(sim: StripeSim) -> None:
    async with httpx.AsyncClient(base_url=sim.url) as raw:
        response = await raw.get("/v1/balance_sheets", headers={"authorization": f"Bearer {KEY}"})
    assert response.status_code == 404
    assert response.json()["error"]["message"].startswith("Unrecognized request URL")
    assert response.headers["request-id"].startswith("req_")


async def test_outages(sim: StripeSim, client: Client) -> None:
    sim.outage = "refuse"
    with pytest.raises(stripe.APIConnectionError):
        await client.v1.customers.create_async({"email": "x@example.com"})
    sim.outage = "500"
    with pytest.raises(stripe.APIError) as caught:
        await client.v1.customers.create_async({"email": "x@example.com"})
    assert caught.value.http_status == 500
    sim.outage = "hang"
    hanging, http = sdk_client(sim, timeout=1.0)
    try:
        with pytest.raises(stripe.APIConnectionError):
            await hanging.v1.customers.retrieve_async("cus_x")
    finally:
        await http.close_async()
    assert (sim.counters.outage_refused, sim.counters.outage_500, sim.counters.outage_hung) == (
        1,
        1,
        1,
    )
    sim.outage = None
    customer = await client.v1.customers.create_async({"email": "x@example.com"})
    assert list(sim.customers) == [customer.id]


@pytest.mark.parametrize("outage", ["500", "refuse"])
async def test_the_sdk_retries_with_one_idempotency_key(
    sim: StripeSim, monkeypatch: pytest.MonkeyPatch, outage: str
) -> None:
    """Its backoff sleeps with anyio, on Trio here (shortened: it would be 0.5 s and more)."""
    monkeypatch.setattr(stripe._http_client.HTTPClient, "INITIAL_DELAY", 0.001)
    monkeypatch.setattr(stripe._http_client.HTTPClient, "MAX_DELAY", 0.002)
    sim.outage = outage  # type: ignore[assignment]
    retrying, http = sdk_client(sim, retries=2)
    try:
        with pytest.raises(stripe.APIError if outage == "500" else stripe.APIConnectionError):
            await retrying.v1.customers.create_async({"email": "x@example.com"})
    finally:
        await http.close_async()
    keys = [r.idempotency_key for r in sim.requests]
    assert len(keys) == 3 and keys[0] and len(set(keys)) == 1


async def test_hang_after_commit_then_the_retry_replays(sim: StripeSim) -> None:
    sim.hang_after_commit = lambda form: form.get("metadata", {}).get("topup") == "t-kill"
    client, http = sdk_client(sim, timeout=1.0)
    params = {
        "amount": 900,
        "currency": "usd",
        "payment_method": "pm_card_visa",
        "confirm": True,
        "metadata": {"topup": "t-kill"},
    }
    try:
        with pytest.raises(stripe.APIConnectionError):
            await client.v1.payment_intents.create_async(params, {"idempotency_key": "t-kill"})
        (pi,) = sim.payment_intents.values()
        assert pi["status"] == "succeeded" and len(sim.charges) == 1
        events = len(sim.events)
        sim.hang_after_commit = None
        again = await client.v1.payment_intents.create_async(params, {"idempotency_key": "t-kill"})
    finally:
        await http.close_async()
    assert again.id == pi["id"] and again.status == "succeeded"
    assert len(sim.payment_intents) == 1 and len(sim.events) == events
