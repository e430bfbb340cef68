"""`budget.threshold` (50, 80 and 100 %) and `budget.exhausted` over real HTTP, on both
backends, with exactly the API's data fields (docs/webhooks.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.inference import inference_rig

# Many one-letter words: the upstream counts more prompt tokens than the gateway's estimate
# (bytes / 4) reserved for, so one request can spend past the cap it was admitted under.
WORDS = " ".join(["a"] * 2000)
BODY = {"model": "small", "messages": [{"role": "user", "content": WORDS}], "max_tokens": 1}
API_FIELDS = {
    "key_id",
    "key_name",
    "threshold_percent",
    "period",
    "budget_usd",
    "spent_usd",
    "period_end",
}


def next_utc_midnight() -> datetime:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=1)


def parsed(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


async def test_crossing_a_daily_budget_writes_thresholds_and_exhausted(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path) as rig:
        gw = rig.gateway
        accountant = gw.runtime.accountant
        assert (await rig.chat(BODY)).status_code == 200  # the rig's uncapped key: the price
        await accountant.flush()
        rows, _ = await gw.runtime.storage.ledger.list(gw.org_id, type="usage", limit=1, offset=0)
        charge = -rows[0].amount_micros
        r = await gw.client.post(
            "/v1/keys",
            json={"name": "capped", "daily_budget_usd": charge / 1e6},
            headers=gw.auth(),
        )
        key_id, key = r.json()["id"], r.json()["key"]
        assert (await rig.chat(BODY, key=key)).status_code == 200  # reaches 100 %
        await accountant.flush()
        refused = await rig.chat(BODY, key=key)
        assert refused.status_code == 402
        assert refused.json()["error"]["code"] == "budget_exceeded"
        assert (await rig.chat(BODY, key=key)).status_code == 402  # still one exhausted event
        await accountant.flush()
        events = [
            e
            for e in await gw.runtime.storage.events.list_for_org(gw.org_id, limit=1000)
            if e.type.startswith("budget.")
        ]
    assert [(e.type, e.data["threshold_percent"]) for e in events] == [
        ("budget.threshold", 50),
        ("budget.threshold", 80),
        ("budget.threshold", 100),
        ("budget.exhausted", 100),
    ]
    for e in events:
        data: dict[str, Any] = e.data
        assert set(data) == API_FIELDS
        assert data["key_id"] == key_id and data["key_name"] == "capped"
        assert data["period"] == "daily"
        assert data["budget_usd"] == charge / 1e6 and isinstance(data["budget_usd"], float)
        assert data["spent_usd"] == charge / 1e6 and isinstance(data["spent_usd"], float)
        assert parsed(data["period_end"]) == next_utc_midnight()
