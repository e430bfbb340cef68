"""Sample `data` for each webhook event type: what `POST /v1/webhooks/{id}/test` sends (a test
event carries `data.test` true and a synthetic payload). No I/O.

Each sample has the fields the real producer writes for that type, with made-up values, so a
receiver can be built against a test event and then see the same shape from real ones (see
docs/webhooks.md, "Event types and their data"; tests/gateway/test_webhook_samples.py compares
them with the producers). Types with no producer yet (endpoints, fine-tuning, guardrails)
have the shape decided here for them.
"""

from __future__ import annotations

import copy
from typing import Any

from protocol.webhooks import EVENT_TYPES

_KEY = {
    "key_id": "key_SAMPLE00000000000000000",
    "key_name": "sample key",
    "key_prefix": "service_sk_live_AbCd",
    "is_active": True,
}
_BUDGET = {
    "key_id": "key_SAMPLE00000000000000000",
    "key_name": "sample key",
    "period": "monthly",
    "budget_usd": 100.0,
    "period_end": "2030-01-31T23:59:59.999999Z",
}
_COMPLETION = {
    "request_id": "req_SAMPLE00000000000000000",
    "key_id": "key_SAMPLE00000000000000000",
    "model": "gpt-4o-mini",
    "endpoint": "/v1/chat/completions",
}
_ENDPOINT = {
    "model": "chat-ha",
    "provider": "east",
    "upstream": "gpt-4o-mini",
    "host": "east.example.com",
}
_JOB = {
    "job_id": "ftjob_SAMPLE00000000000000000",
    "model": "gpt-4o-mini-2024-07-18",
    "training_file": "file_SAMPLE00000000000000000",
}

SAMPLES: dict[str, dict[str, Any]] = {
    "completion.success": {
        **_COMPLETION,
        "status": 200,
        "latency_ms": 842.125,
        "stream": False,
        "usage": {"prompt_tokens": 21, "completion_tokens": 64, "total_tokens": 85},
        "cost_usd": 0.000042,
    },
    "completion.error": {
        **_COMPLETION,
        "status": 502,
        "latency_ms": 1203.5,
        "error": {
            "type": "upstream_error",
            "code": "upstream_unavailable",
            "message": "The upstream provider could not be reached.",
        },
    },
    "budget.threshold": {**_BUDGET, "threshold_percent": 80, "spent_usd": 80.25},
    "budget.exhausted": {**_BUDGET, "threshold_percent": 100, "spent_usd": 100.0},
    "key.created": dict(_KEY),
    "key.deleted": {**_KEY, "is_active": False},
    "key.updated": {**_KEY, "changed": ["name", "rate_limit_rpm"]},
    "provider_key.invalid": {
        "provider_key_id": "pk_SAMPLE00000000000000000",
        "provider": "openai",
        "status": 401,
        "reason": "The provider answered 401 Unauthorized: it does not know the key (revoked,"
        " expired or mistyped).",
    },
    "endpoint.unhealthy": {
        **_ENDPOINT,
        "consecutive_failures": 3,
        "last_error": "status 503",
        "since": "2030-01-15T09:30:00Z",
    },
    "endpoint.recovered": {
        **_ENDPOINT,
        "consecutive_successes": 2,
        "unhealthy_since": "2030-01-15T09:30:00Z",
        "since": "2030-01-15T09:42:10Z",
    },
    "fine_tuning.job.succeeded": {
        **_JOB,
        "status": "succeeded",
        "fine_tuned_model": "ft:gpt-4o-mini-2024-07-18:acme::SAMPLE00",
    },
    "fine_tuning.job.failed": {
        **_JOB,
        "status": "failed",
        "error": {"code": "invalid_training_file", "message": "Line 3 is not valid JSON."},
    },
    "guardrail.triggered": {
        "guardrail": "pii",
        "kind": "pii",
        "category": "email",
        "action": "block",
        "stage": "input",
        "key_id": "key_SAMPLE00000000000000000",
        "model": "gpt-4o-mini",
        "request_id": "req_SAMPLE00000000000000000",
    },
    # `scope`: the criteria the purge was given (any of model, key_id, older_than_s; {} for
    # everything of the organization); `by_key_id`: the management key that asked.
    "cache.purged": {
        "scope": {"model": "gpt-4o-mini", "older_than_s": 3600.0},
        "purged": 128,
        "by_key_id": "key_SAMPLE00000000000000000",
    },
}
assert set(SAMPLES) == set(EVENT_TYPES), "one sample per event type"


def sample_data(event_type: str) -> dict[str, Any]:
    """A fresh copy of the type's sample with `test: true`; KeyError for an unknown type."""
    return {**copy.deepcopy(SAMPLES[event_type]), "test": True}
