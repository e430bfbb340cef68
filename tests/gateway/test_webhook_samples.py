"""Test events carry the fields real events of their type carry: each sample is compared with
what its producer writes, so a producer that changes its data shows up here."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.inference.completion_events import error_data, success_data
from gateway.web.context import RequestContext
from protocol.billing import KeyBudget, month_of
from protocol.timefmt import now_us
from protocol.webhook_samples import SAMPLES, sample_data
from protocol.webhooks import EVENT_TYPES
from storage.key_spend import budget_event_data
from storage.keys import KeyRecord
from storage.keys import event_data as key_event_data
from storage.provider_keys import ProviderKeyRecord, invalid_event_data


def _shape(value: Any) -> Any:
    """Field names and JSON types, recursively (values differ, types must not)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def test_one_sample_per_type_marked_as_a_test_and_fresh_each_time() -> None:
    assert set(SAMPLES) == set(EVENT_TYPES)
    for event_type in EVENT_TYPES:
        data = sample_data(event_type)
        assert data["test"] is True and "test" not in SAMPLES[event_type]
        assert msgspec.json.decode(msgspec.json.encode(data)) == data
    first = sample_data("completion.success")
    first["usage"]["total_tokens"] = -1
    assert sample_data("completion.success")["usage"]["total_tokens"] == 85


def test_key_samples_have_the_key_events_fields() -> None:
    now = now_us()
    record = KeyRecord(
        id="key_x",
        org_id="org_x",
        name="n",
        key_prefix="service_sk_live_AbCd",
        scopes=None,
        rate_limit_rpm=None,
        daily_budget_micros=None,
        monthly_budget_micros=None,
        allowed_models=None,
        expires_at=None,
        is_active=True,
        created_at=now,
        updated_at=now,
        last_used_at=None,
        deleted_at=None,
    )
    real = _shape(key_event_data(record))
    for event_type in ("key.created", "key.deleted"):
        assert _shape(SAMPLES[event_type]) == real, event_type
    updated = SAMPLES["key.updated"]
    assert _shape({k: v for k, v in updated.items() if k != "changed"}) == real
    assert updated["changed"] and all(isinstance(c, str) for c in updated["changed"])


def test_provider_key_and_budget_samples_have_their_producers_fields() -> None:
    record = ProviderKeyRecord(
        id="pk_x",
        org_id="org_x",
        provider="sim",
        key_hint="AbCd",
        created_at=0,
        updated_at=0,
        last_rejected_at=1,
        invalid_since=1,
        invalid_status=401,
    )
    real = invalid_event_data(record)
    assert _shape(SAMPLES["provider_key.invalid"]) == _shape(real)
    sample = SAMPLES["provider_key.invalid"]
    assert (sample["status"], sample["reason"]) == (real["status"], real["reason"])

    budget = KeyBudget(key_id="key_x", key_name="n", daily_micros=None, monthly_micros=10**8)
    period = month_of(now_us())
    threshold = budget_event_data(budget, period, 10**8, 8 * 10**7, 80)
    exhausted = budget_event_data(budget, period, 10**8, 10**8, None)
    assert _shape(SAMPLES["budget.threshold"]) == _shape(threshold)
    assert _shape(SAMPLES["budget.exhausted"]) == _shape(exhausted)
    assert SAMPLES["budget.exhausted"]["threshold_percent"] == 100


def test_completion_samples_have_the_completion_events_fields() -> None:
    ctx = RequestContext(
        request_id="req_x",
        method="POST",
        path="/v1/chat/completions",
        started=0.0,
        route="/v1/chat/completions",
        org_id="org_x",
        key_id="key_x",
        model="sim/sim-small",
        cost_usd=0.5,
        prompt_tokens=3,
        completion_tokens=4,
    )
    assert _shape(SAMPLES["completion.success"]) == _shape(success_data(ctx, 200, 0.25))
    ctx.note_error("upstream_error", "upstream_unavailable", "down")
    assert _shape(SAMPLES["completion.error"]) == _shape(error_data(ctx, 502, 0.25))
