"""The payment-method routes over Stripe (issue #24): a card collected with a SetupIntent is
attached, listed, made the default (the subscription shows it), detached; another
organization's card is "not found" on every route and cannot pay a top-up. And the webhook
facing hostile bytes: whatever arrives, 4xx or an acknowledged no-op, never a 5xx."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench.stripe import sign
from gateway.credits.stripe_webhook import PATH
from protocol.credentials import CredentialKind
from tests.gateway.stripe_rig import WEBHOOK_SECRET, StripeGateway, stripe_gateway


@pytest.fixture
async def sg(database_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    async with stripe_gateway(database_url, tmp_path) as rig:
        yield rig


async def test_a_setup_intents_card_is_attached_listed_made_default_and_detached(
    sg: StripeGateway,
) -> None:
    made = await sg.client.post("/v1/billing/setup_intents", headers=sg.auth())
    assert made.status_code == 200, made.text
    seti = made.json()
    assert seti["object"] == "setup_intent" and seti["client_secret"].startswith(seti["id"])
    confirmed = sg.sim.confirm_setup_intent(seti["id"], "pm_card_mastercard")  # Stripe.js
    pm = confirmed["payment_method"]
    r = await sg.attach(pm, default=False)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == pm and r.json()["brand"] == "mastercard"
    assert r.json()["is_default"] is False
    visa = (await sg.attach("pm_card_visa")).json()
    listed = (await sg.client.get("/v1/billing/payment_methods", headers=sg.auth())).json()
    assert listed["object"] == "list" and listed["has_more"] is False
    assert [(m["id"], m["is_default"]) for m in listed["data"]] == [
        (visa["id"], True),
        (pm, False),
    ]
    r = await sg.client.post(f"/v1/billing/payment_methods/{pm}/default", headers=sg.auth())
    assert r.status_code == 200 and r.json()["is_default"] is True
    sub = (await sg.client.get("/v1/billing/subscription", headers=sg.auth())).json()
    assert sub["payment_method"] == {"type": "card", "last4": "4444", "brand": "mastercard"}
    assert (await sg.topup(5)).status_code == 200  # the default pays
    intent = next(iter(sg.sim.payment_intents.values()))
    assert intent["payment_method"] == pm
    gone = await sg.client.delete(f"/v1/billing/payment_methods/{pm}", headers=sg.auth())
    assert gone.status_code == 200 and gone.json() == {
        "id": pm,
        "object": "payment_method",
        "deleted": True,
    }
    listed = (await sg.client.get("/v1/billing/payment_methods", headers=sg.auth())).json()
    assert [m["id"] for m in listed["data"]] == [visa["id"]]
    again = await sg.client.delete(f"/v1/billing/payment_methods/{pm}", headers=sg.auth())
    assert again.status_code == 404
    # Detached, it belongs to nobody: Stripe would charge it, the gateway does not.
    r = await sg.topup(5, method=pm)
    assert r.status_code == 400 and r.json()["error"]["code"] == "payment_method_not_found"
    assert len(sg.sim.payment_intents) == 1
    await sg.assert_ledger_exact()


async def test_another_organizations_card_is_not_found_and_cannot_pay(sg: StripeGateway) -> None:
    mine = (await sg.attach("pm_card_visa")).json()["id"]
    storage = sg.gw.runtime.storage
    other = await storage.orgs.create("intruder")
    credential = sg.gw.runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await storage.orgs.add_management_key(other.id, credential)
    theirs = {"Authorization": f"Bearer {credential.value}"}
    paths = [
        ("POST", f"/v1/billing/payment_methods/{mine}/default"),
        ("DELETE", f"/v1/billing/payment_methods/{mine}"),
    ]
    for method, path in paths:
        r = await sg.client.request(method, path, headers=theirs)
        assert r.status_code == 404, (path, r.text)
        assert r.json()["error"]["code"] == "payment_method_not_found"
    r = await sg.client.post(
        "/v1/billing/payment_methods", json={"payment_method_id": mine}, headers=theirs
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "payment_method_not_found"
    r = await sg.client.post(
        "/v1/credits/topup", json={"amount_usd": 50, "payment_method_id": mine}, headers=theirs
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "payment_method_not_found"
    assert not sg.sim.payment_intents
    for bad in ("pm_does_not_exist", "pm_../../x"):
        r = await sg.client.post(f"/v1/billing/payment_methods/{bad}/default", headers=sg.auth())
        assert r.status_code == 404, (bad, r.text)
    r = await sg.client.post(
        "/v1/billing/payment_methods", json={"payment_method_id": "pm_x\n"}, headers=sg.auth()
    )
    assert r.status_code == 400


def signed(body: bytes) -> dict[str, str]:
    return {"Stripe-Signature": sign(body, WEBHOOK_SECRET, int(time.time()))}


async def test_hostile_webhook_bodies_are_4xx_or_acknowledged_never_5xx(
    sg: StripeGateway,
) -> None:
    await sg.attach("pm_card_visa")
    assert (await sg.topup(10)).status_code == 200
    bodies = [
        b"",
        b"not json",
        b"\xff\xfe\x00",
        b"[]",
        b'{"id": 1}',
        json.dumps({"id": "evt_1", "type": "payment_intent.succeeded"}).encode(),
        json.dumps({"id": "evt_2", "type": "charge.refunded", "data": {"object": []}}).encode(),
        json.dumps({"id": "evt_2b", "type": "charge.refunded", "data": []}).encode(),
        json.dumps({"id": "evt_2c", "type": 7, "data": "x"}).encode(),
        json.dumps(
            {"id": "evt_3", "type": "charge.refunded", "data": {"object": {"id": 5}}}
        ).encode(),
        json.dumps(
            {
                "id": "evt_4",
                "type": "payment_intent.succeeded",
                "data": {"object": {"id": "pi_x", "metadata": {"reference": ["x"]}}},
            }
        ).encode(),
        json.dumps(
            {
                "id": "evt_5",
                "type": "charge.dispute.created",
                "data": {"object": {"id": "dp_x", "charge": "ch_x", "amount": -5}},
            }
        ).encode(),
        json.dumps({"id": "evt_6", "type": "x" * 10_000, "data": {"object": {}}}).encode(),
        b'{"id": "evt_7", "data": ' * 2000 + b"1" + b"}" * 2000,
    ]
    for body in bodies:
        r = await sg.client.post(PATH, content=body, headers=signed(body))
        assert r.status_code in (200, 400), (body[:60], r.status_code, r.text)
    assert await sg.balance() == 10.0
    await sg.assert_ledger_exact()


async def test_a_dispute_won_gives_the_amount_back(sg: StripeGateway) -> None:
    await sg.attach("pm_card_visa")
    assert (await sg.topup(12)).status_code == 200
    pi = next(iter(sg.sim.payment_intents.values()))
    dispute = sg.sim.create_dispute(pi["id"])
    await sg.event_handled("charge.dispute.created")
    assert await sg.balance() == 0.0
    closed = dict(dispute, status="won")
    body = json.dumps(
        {
            "id": "evt_dispute_closed_1",
            "object": "event",
            "type": "charge.dispute.closed",
            "created": int(time.time()),
            "data": {"object": closed},
        }
    ).encode()
    for _ in range(2):  # delivered twice: given back once
        r = await sg.client.post(PATH, content=body, headers=signed(body))
        assert r.status_code == 200, r.text
    assert await sg.balance() == 12.0
    assert [row.amount_micros for row in await sg.rows("adjustment")] == [12_000_000, -12_000_000]
    await sg.assert_ledger_exact()
