"""protocol/webhooks.py: filters, secrets, the envelope bytes, signatures and the retry schedule,
checked against docs/webhooks.md with an independent verifier written from the text."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from protocol import webhooks
from protocol.webhooks import Outcome


def verify(header: str, body: bytes, secret: str, now: int) -> bool:
    """A receiver's check, from the documented scheme only: `t=<ts>,v1=<hex>[,v1=…]`, HMAC-SHA256 of
    `<ts>.<raw body>` keyed by the secret, timestamps within 300 s, constant-time compare."""
    parts = [p.split("=", 1) for p in header.split(",")]
    stamps = [v for k, v in parts if k == "t"]
    if len(stamps) != 1 or abs(now - int(stamps[0])) > 300:
        return False
    expected = hmac.new(secret.encode(), stamps[0].encode() + b"." + body, "sha256").hexdigest()
    return any(hmac.compare_digest(expected, v) for k, v in parts if k == "v1")


def test_filter_accepts_known_types_and_star_alone() -> None:
    assert webhooks.normalize_filter(["key.created", "key.created", "budget.threshold"]) == (
        "key.created",
        "budget.threshold",
    )
    assert webhooks.normalize_filter(["*"]) == ("*",)
    for bad in ([], ["key.exploded"], ["*", "key.created"], ["KEY.CREATED"]):
        with pytest.raises(ValueError):
            webhooks.normalize_filter(bad)


def test_every_spec_type_is_known() -> None:
    spec = (
        "completion.success completion.error budget.threshold budget.exhausted key.created "
        "key.deleted key.updated provider_key.invalid endpoint.unhealthy "
        "fine_tuning.job.succeeded fine_tuning.job.failed guardrail.triggered cache.purged"
    )
    # endpoint.recovered is ours, beyond the spec: endpoint.unhealthy's way back (decisions.md).
    assert set(spec.split()) | {"endpoint.recovered"} == webhooks.KNOWN_TYPES


def test_matches() -> None:
    assert webhooks.matches(("*",), "cache.purged")
    assert webhooks.matches(("key.created",), "key.created")
    assert not webhooks.matches(("key.created",), "key.deleted")


def test_generated_secrets_are_whsec_and_32_random_bytes() -> None:
    a, b = webhooks.generate_secret(), webhooks.generate_secret()
    assert a != b
    assert re.fullmatch(r"whsec_[A-Za-z0-9_-]{43}", a)
    webhooks.check_custom_secret(a)


@pytest.mark.parametrize("bad", ["", "has space" * 3, "tab\there" * 3, "é-accent" * 4, "x" * 1025])
def test_custom_secret_rules(bad: str) -> None:
    with pytest.raises(ValueError):
        webhooks.check_custom_secret(bad)


@pytest.mark.parametrize("short", ["abcd", "x" * 23, "whsec_" + "x" * 23, "whsec_"])
def test_a_custom_secret_has_24_characters_after_its_prefix(short: str) -> None:
    with pytest.raises(webhooks.SecretTooShort):
        webhooks.check_custom_secret(short)
    webhooks.check_custom_secret("x" * 24)
    webhooks.check_custom_secret("whsec_" + "x" * 24)


def test_secret_hint_shows_at_most_an_eighth_of_a_secret() -> None:
    assert webhooks.secret_hint("whsec_" + "a" * 28 + "1234") == "whsec_…1234"
    assert webhooks.secret_hint("m" * 28 + "cret") == "…cret"
    assert webhooks.secret_hint("whsec_" + "a" * 27 + "123") == "whsec_…"
    assert webhooks.secret_hint("mine-own-secret") == "…"
    assert webhooks.secret_hint("abcd") == "…"
    generated = webhooks.generate_secret()
    assert webhooks.secret_hint(generated) == "whsec_…" + generated[-4:]


def test_envelope_embeds_the_stored_data_verbatim() -> None:
    data = '{"b":1,"a":[true,null],"s":"é"}'
    body = webhooks.envelope("evt_1", "key.created", 1_700_000_000_000_000, data)
    assert body.endswith(b',"data":' + data.encode() + b"}")
    parsed = json.loads(body)
    assert parsed == {
        "id": "evt_1",
        "type": "key.created",
        "created_at": "2023-11-14T22:13:20Z",
        "data": {"b": 1, "a": [True, None], "s": "é"},
    }
    assert list(parsed) == ["id", "type", "created_at", "data"]
    assert body == webhooks.envelope("evt_1", "key.created", 1_700_000_000_000_000, data)


def test_signature_verifies_independently_and_binds_body_time_and_secret() -> None:
    body = webhooks.envelope("evt_1", "key.created", 0, '{"x":1}')
    secret = webhooks.generate_secret()
    header = webhooks.signature_header(1000, body, [secret])
    assert re.fullmatch(r"t=1000,v1=[0-9a-f]{64}", header)
    assert verify(header, body, secret, now=1000)
    assert not verify(header, body + b" ", secret, now=1000)
    assert not verify(header, body, secret + "x", now=1000)
    assert not verify(header, body, secret, now=1301)
    assert not verify(header.replace("t=1000", "t=1001"), body, secret, now=1000)
    expected = hmac.new(secret.encode(), b"1000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1000,v1={expected}"


def test_dual_signatures_during_rotation_newest_first() -> None:
    body = b'{"id":"evt_1"}'
    header = webhooks.signature_header(5, body, ["new-secret", "old-secret"])
    t, new, old = header.split(",")
    assert t == "t=5"
    assert new == "v1=" + webhooks.sign("new-secret", 5, body)
    assert old == "v1=" + webhooks.sign("old-secret", 5, body)
    assert verify(header, body, "new-secret", 5) and verify(header, body, "old-secret", 5)


def test_delivery_headers_per_spec() -> None:
    body = b"{}"
    headers = dict(webhooks.delivery_headers("evt_9", "cache.purged", 77, body, ["s"]))
    assert headers == {
        "Content-Type": "application/json",
        "Service-Webhook-Id": "evt_9",
        "Service-Webhook-Event": "cache.purged",
        "Service-Webhook-Timestamp": "77",
        "Service-Webhook-Signature": f"t=77,v1={webhooks.sign('s', 77, body)}",
    }


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.DELIVERED),
        (204, Outcome.DELIVERED),
        (299, Outcome.DELIVERED),
        (None, Outcome.RETRY),
        (500, Outcome.RETRY),
        (503, Outcome.RETRY),
        (408, Outcome.RETRY),
        (429, Outcome.RETRY),
        (400, Outcome.PERMANENT),
        (404, Outcome.PERMANENT),
        (410, Outcome.PERMANENT),
        (301, Outcome.PERMANENT),
        (100, Outcome.PERMANENT),
    ],
)
def test_outcome_of(status: int | None, outcome: Outcome) -> None:
    assert webhooks.outcome_of(status) is outcome


def test_retry_schedule_is_exactly_spec_then_spent() -> None:
    delays = [webhooks.next_delay_s(n, None) for n in range(1, 8)]
    assert delays == [10, 60, 600, 3600, 21600, 86400, None]


def test_a_longer_retry_after_wins_a_shorter_does_not() -> None:
    assert webhooks.next_delay_s(1, 120) == 120
    assert webhooks.next_delay_s(2, 5) == 60
    assert webhooks.next_delay_s(7, 120) is None


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    later = format_datetime(datetime.fromtimestamp(now + 90, UTC), usegmt=True)
    assert webhooks.retry_after_s("30", now) == 30
    assert webhooks.retry_after_s(later, now) == pytest.approx(90)
    assert webhooks.retry_after_s("99999999999999999999", now) == webhooks.MAX_RETRY_AFTER_S
    for bad in (None, "", "soon", "-5", "1.5", "Wed, 99 Foo 2020 00:00:00 GMT"):
        assert webhooks.retry_after_s(bad, now) is None
