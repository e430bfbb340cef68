"""What image requests cost and who may make them, over real HTTP on both backends: images ×
unit price (by size and quality where priced so) × (1 + plan fee) to the micro-dollar, the
balance equal to the sum of the ledger rows, usage rows with the model and request id;
402 before the provider is asked, 429 rate limits, bring-your-own-key (0 charged), scopes,
allowed models, the provider's failures mapped as for chat, `completion.error` events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from protocol.billing import charge_micros
from tests.gateway.images.support import (
    DALLE2_PRICE,
    DALLE2_SMALL,
    DALLE3_STANDARD,
    DALLE3_TALL,
    DALLE3_TALL_HD,
    FLUX_PRICE,
    error_of,
    generate,
    image_requests,
    images_rig,
)
from tests.gateway.keys_client import create_key
from tests.inference import Rig, inference_rig, ledger

CREDIT = 100_000_000


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with images_rig(database_url, tmp_path) as r:
        yield r


@pytest.mark.parametrize(
    ("body", "images", "price"),
    [
        ({"model": "dalle3", "prompt": "a"}, 1, DALLE3_STANDARD),
        ({"model": "dalle3", "prompt": "a", "size": "1024x1792"}, 1, DALLE3_TALL),
        (
            {"model": "dalle3", "prompt": "a", "size": "1024x1792", "quality": "hd"},
            1,
            DALLE3_TALL_HD,
        ),
        (
            {"model": "dalle3", "prompt": "a", "size": "1792x1024", "quality": "hd"},
            1,
            DALLE3_STANDARD,
        ),
        ({"model": "dalle2", "prompt": "a", "n": 7}, 7, DALLE2_PRICE),
        ({"model": "dalle2", "prompt": "a", "n": 3, "size": "512x512"}, 3, DALLE2_SMALL),
        ({"model": "flux", "prompt": "a", "n": 10, "response_format": "b64_json"}, 10, FLUX_PRICE),
    ],
)
async def test_each_charge_is_images_times_price_plus_fee(
    rig: Rig, body: dict[str, Any], images: int, price: Decimal
) -> None:
    r = await generate(rig, body)
    assert r.status_code == 200, r.text
    assert len(r.json()["data"]) == images
    charge = charge_micros(images * price, Decimal("4"))  # the free plan's fee
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT - charge
    (row,) = rows
    assert row.amount_micros == -charge
    assert (
        row.model
        == "sim/"
        + {"dalle3": "dall-e-3", "dalle2": "dall-e-2", "flux": "flux-schnell"}[body["model"]]
    )
    assert row.request_id == r.headers["x-request-id"]


async def test_only_the_images_returned_are_charged(rig: Rig) -> None:
    r = await generate(rig, {"model": "dalle2", "prompt": "[one-image] a", "n": 5})
    assert r.status_code == 200 and len(r.json()["data"]) == 1
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT - charge_micros(DALLE2_PRICE, Decimal("4"))
    assert rows[0].amount_micros == -charge_micros(DALLE2_PRICE, Decimal("4"))


async def test_the_pro_plan_fee(rig: Rig) -> None:
    storage = rig.gateway.runtime.storage
    await storage.db.execute(
        "UPDATE orgs SET plan = 'pro' WHERE id = :id", {"id": rig.gateway.org_id}
    )
    rig.gateway.runtime.accountant.refresh(rig.gateway.org_id)
    r = await generate(rig, {"model": "dalle2", "prompt": "a", "n": 3})
    assert r.status_code == 200
    balance, _ = await ledger(rig, 1)
    assert balance == CREDIT - charge_micros(3 * DALLE2_PRICE, Decimal("2.5"))


async def test_edits_are_charged_per_image_too(rig: Rig) -> None:
    from bench.upstream.image_routes import png

    r = await rig.gateway.client.post(
        "/v1/images/edits",
        data={"model": "dalle2", "prompt": "a hat", "n": "2", "size": "512x512"},
        files={"image": ("i.png", png((1, 2, 3), 8), "image/png")},
        headers=rig.gateway.auth(rig.key),
    )
    assert r.status_code == 200, r.text
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT - charge_micros(2 * DALLE2_SMALL, Decimal("4"))
    assert rows[0].request_id == r.headers["x-request-id"]


async def test_failures_charge_nothing(rig: Rig) -> None:
    for body in (
        {"model": "dalle2", "prompt": "forbidden"},
        {"model": "dalle2", "prompt": "[answer-with-url]"},
        {"model": "dalle2", "prompt": "a", "n": 11},
    ):
        assert (await generate(rig, body)).status_code in (400, 502)
    rig.upstream.behavior.fail_status = 500
    assert (await generate(rig, {"model": "dalle2", "prompt": "a"})).status_code == 502
    await rig.gateway.runtime.accountant.flush()
    account = await rig.gateway.runtime.storage.ledger.account(rig.gateway.org_id)
    assert account.balance_micros == CREDIT
    # Nothing is left held: the whole credit still buys images.
    rig.upstream.behavior.fail_status = None
    assert (await generate(rig, {"model": "dalle2", "prompt": "a"})).status_code == 200


async def test_402_when_the_balance_cannot_hold_n_images(database_url: str, tmp_path: Path) -> None:
    # $5 of credit: 4 images at $1 ($4.16 with the fee) fit, 5 ($5.20) do not.
    toml = '[[models]]\nid = "pricey"\nprovider = "sim"\nupstream = "dall-e-2"\nusd_per_image = 1\n'
    async with images_rig(database_url, tmp_path, credit_usd=5, extra_toml=toml) as rig:
        r = await generate(rig, {"model": "pricey", "prompt": "a", "n": 5})
        assert r.status_code == 402 and error_of(r)["code"] == "insufficient_credits"
        assert image_requests(rig, "generations") == []
        ok = await generate(rig, {"model": "pricey", "prompt": "a", "n": 4})
        assert ok.status_code == 200


async def test_key_budget_is_402_budget_exceeded(rig: Rig) -> None:
    key = (await create_key(rig.gateway, name="b", daily_budget_usd=0.01))["key"]
    r = await generate(rig, {"model": "dalle3", "prompt": "a"}, key=key)
    assert r.status_code == 402 and error_of(r)["code"] == "budget_exceeded"


async def test_rate_limit_is_429(rig: Rig) -> None:
    key = (await create_key(rig.gateway, name="slow", rate_limit_rpm=1))["key"]
    body = {"model": "dalle2", "prompt": "a", "response_format": "b64_json"}
    assert (await generate(rig, body, key=key)).status_code == 200
    r = await generate(rig, body, key=key)
    assert r.status_code == 429 and error_of(r)["code"] == "rate_limit_exceeded"
    assert "retry-after" in r.headers


async def test_scopes_and_allowed_models(rig: Rig) -> None:
    r = await rig.gateway.client.post(
        "/v1/images/generations", json={"model": "dalle2", "prompt": "a"}
    )
    assert r.status_code == 401
    bad = await generate(rig, {"model": "dalle2", "prompt": "a"}, key="sk-not-a-key")
    assert bad.status_code == 401
    no_scope = (await create_key(rig.gateway, name="c", scopes=["chat:completions"]))["key"]
    for path in ("generations", "edits", "variations"):
        r = await rig.gateway.client.post(
            f"/v1/images/{path}", json={}, headers=rig.gateway.auth(no_scope)
        )
        assert r.status_code == 403, path
    images_key = (await create_key(rig.gateway, name="i", scopes=["images"]))["key"]
    ok = await generate(rig, {"model": "dalle2", "prompt": "a"}, key=images_key)
    assert ok.status_code == 200
    only_flux = (await create_key(rig.gateway, name="f", allowed_models=["flux"]))["key"]
    r = await generate(rig, {"model": "dalle2", "prompt": "a"}, key=only_flux)
    assert r.status_code == 403 and error_of(r)["code"] == "model_not_allowed"


async def test_a_chat_only_provider_cannot_make_images(rig: Rig) -> None:
    r = await generate(rig, {"model": "haiku", "prompt": "a"})
    assert r.status_code == 400


@pytest.mark.parametrize(
    ("status", "ours", "code"),
    [
        (429, 429, "upstream_rate_limited"),
        (500, 502, "upstream_error"),
        (503, 502, "upstream_error"),
        (401, 502, "upstream_auth_failed"),
        (408, 504, "upstream_timeout"),
    ],
)
async def test_upstream_failures_are_mapped_as_for_chat(
    rig: Rig, status: int, ours: int, code: str
) -> None:
    rig.upstream.behavior.fail_status = status
    rig.upstream.behavior.retry_after = "7" if status == 429 else None
    r = await generate(rig, {"model": "dalle2", "prompt": "a"})
    assert r.status_code == ours and error_of(r)["code"] == code
    if status == 429:
        assert r.headers["retry-after"] == "7"


async def test_upstream_timeout_is_504(database_url: str, tmp_path: Path) -> None:
    async with images_rig(database_url, tmp_path, read_timeout_s=0.3) as rig:
        rig.upstream.behavior.hang = True
        r = await generate(rig, {"model": "dalle2", "prompt": "a"})
        assert r.status_code == 504 and error_of(r)["code"] == "upstream_timeout"


async def test_unreachable_upstream_is_502(database_url: str, tmp_path: Path) -> None:
    toml = (
        '[[models]]\nid = "gone-image"\nprovider = "dead"\nupstream = "dall-e-2"\n'
        "usd_per_image = 0.02\n"
    )
    async with images_rig(database_url, tmp_path, extra_toml=toml) as rig:
        r = await generate(rig, {"model": "gone-image", "prompt": "a"})
        assert r.status_code == 502 and error_of(r)["code"] == "upstream_unavailable"


async def test_failures_are_completion_error_events(rig: Rig) -> None:
    rig.upstream.behavior.fail_status = 500
    r = await generate(rig, {"model": "dalle2", "prompt": "a"})
    assert r.status_code == 502
    rig.upstream.behavior.fail_status = None
    r2 = await generate(rig, {"model": "dalle3", "prompt": "forbidden"})
    assert r2.status_code == 400
    await rig.gateway.runtime.event_writer.flush()
    events = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id, limit=100)
    errors = [e for e in events if e.type == "completion.error"]
    assert {e.data["request_id"] for e in errors} == {
        r.headers["x-request-id"],
        r2.headers["x-request-id"],
    }
    codes = {e.data["error"]["code"] for e in errors}
    assert codes == {"upstream_error", "content_policy_violation"}


async def test_own_provider_key_is_sent_and_charges_nothing(rig: Rig) -> None:
    r = await rig.gateway.client.post(
        "/v1/provider_keys",
        json={"provider": "sim", "api_key": "sk-org-own"},
        headers=rig.gateway.auth(),
    )
    assert r.status_code in (200, 201), r.text
    g = await generate(rig, {"model": "unpriced-image", "prompt": "a", "n": 2})
    assert g.status_code == 200, g.text
    assert image_requests(rig, "generations")[-1].headers["authorization"] == "Bearer sk-org-own"
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT
    (row,) = rows
    assert row.amount_micros == 0 and row.request_id == g.headers["x-request-id"]


async def test_billing_off_still_answers(database_url: str, tmp_path: Path) -> None:
    from tests.gateway.images.support import IMAGES_TOML

    toml = "[billing]\nenabled = false\n" + IMAGES_TOML
    async with inference_rig(database_url, tmp_path, extra_toml=toml, credit_usd=None) as rig:
        r = await generate(rig, {"model": "dalle2", "prompt": "a"})
        assert r.status_code == 200


async def test_edits_and_variations_map_failures_and_use_the_orgs_key(rig: Rig) -> None:
    from bench.upstream.image_routes import png

    files = {"image": ("i.png", png((1, 2, 3), 8), "image/png")}
    headers = rig.gateway.auth(rig.key)
    rig.upstream.behavior.fail_status = 429
    r = await rig.gateway.client.post(
        "/v1/images/variations", data={"model": "dalle2"}, files=files, headers=headers
    )
    assert r.status_code == 429 and error_of(r)["code"] == "upstream_rate_limited"
    rig.upstream.behavior.fail_status = 502
    r = await rig.gateway.client.post(
        "/v1/images/edits", data={"model": "dalle2", "prompt": "a"}, files=files, headers=headers
    )
    assert r.status_code == 502
    rig.upstream.behavior.fail_status = None
    added = await rig.gateway.client.post(
        "/v1/provider_keys",
        json={"provider": "sim", "api_key": "sk-org-own"},
        headers=rig.gateway.auth(),
    )
    assert added.status_code in (200, 201)
    r = await rig.gateway.client.post(
        "/v1/images/edits", data={"model": "dalle2", "prompt": "a"}, files=files, headers=headers
    )
    assert r.status_code == 200
    assert image_requests(rig, "edits")[-1].headers["authorization"] == "Bearer sk-org-own"
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT and [row.amount_micros for row in rows] == [0]
