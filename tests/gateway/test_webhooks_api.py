"""The Webhooks API over real HTTP, on every storage backend: subscriptions and their field
rules, the secret returned only at creation and rotation (never stored in clear), test events
targeted at one subscription, the delivery log and redelivery, paging, who may call which
route (401, 403, 404 across organizations), and the URL check (https only unless allowed, no
loopback/private address unless its network is allowed)."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.credentials import CredentialKind
from protocol.secretbox import WEBHOOK_SECRETS, SecretBox
from protocol.timefmt import now_us
from protocol.webhook_samples import SAMPLES
from protocol.webhooks import EVENT_TYPES
from storage.open import sqlite_path
from storage.webhooks import Attempt
from tests.actors.webhooks.support import signatures, verify
from tests.gateway.keys_client import create_key, error_of
from tests.gateway.test_secrets_at_rest import _all_cells
from tests.harness import Gateway, gateway_config, running_gateway
from tests.webhook_receiver import Receiver, serve_receiver

PATH = "/v1/webhooks"
URL = "https://127.0.0.1:9/hooks"  # allowed by the fixture's config; nothing listens on 9
OVERLAP_S = 60
# The dispatcher polls at start and then once an hour: these tests' subscriptions are not
# delivered to (the delivery log test plays the delivery actor itself).
TOML = f"""
[webhooks]
allowed_private_networks = ["127.0.0.0/8"]
secret_rotation_overlap_s = {OVERLAP_S}
poll_interval_s = 3600
"""
OBJECT_FIELDS = {
    "id",
    "object",
    "url",
    "events",
    "description",
    "enabled",
    "secret_hint",
    "disabled_reason",
    "disabled_at",
    "created_at",
    "updated_at",
}


@pytest.fixture
async def gw(database_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running_gateway(gateway_config(database_url, tmp_path, toml=TOML)) as g:
        yield g


async def _create(gw: Gateway, auth: str | None = None, **body: Any) -> Any:
    body.setdefault("url", URL)
    body.setdefault("events", ["*"])
    return await gw.client.post(PATH, json=body, headers=gw.auth(auth))


async def _created(gw: Gateway, **body: Any) -> dict[str, Any]:
    r = await _create(gw, **body)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def _box(gw: Gateway) -> SecretBox:
    master_key = gw.runtime.config.master_key
    assert master_key is not None
    return SecretBox.for_purpose(master_key, WEBHOOK_SECRETS)


def _bad(r: Any, param: str | None, status: int = 400) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error = error_of(r)
    assert error["param"] == param, error
    if status == 400:
        assert error["type"] == "invalid_request_error"
    return error


async def _other_org(gw: Gateway) -> tuple[str, str]:
    """Another organization's id and management key."""
    storage = gw.runtime.storage
    org = await storage.orgs.create("globex")
    credential = gw.runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await storage.orgs.add_management_key(org.id, credential)
    return org.id, credential.value


async def _other_org_key(gw: Gateway) -> str:
    return (await _other_org(gw))[1]


# -- create, retrieve, list: the secret once --------------------------------------------------


async def test_create_returns_the_secret_once_and_stores_it_sealed(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    r = await _create(gw, events=["key.created", "budget.threshold"], description="ops")
    assert r.status_code == 200, r.text
    created = r.json()
    assert set(created) == OBJECT_FIELDS | {"secret"}
    assert created["id"].startswith("whk_") and created["object"] == "webhook"
    assert created["url"] == URL and created["events"] == ["key.created", "budget.threshold"]
    assert created["enabled"] is True and created["description"] == "ops"
    assert created["disabled_reason"] is None and created["disabled_at"] is None
    assert created["created_at"].endswith("Z") and created["updated_at"].endswith("Z")
    secret = created["secret"]
    assert secret.startswith("whsec_") and len(secret) == len("whsec_") + 43
    assert created["secret_hint"] == "whsec_…" + secret[-4:]

    one = await gw.client.get(f"{PATH}/{created['id']}", headers=gw.auth())
    listed = await gw.client.get(PATH, headers=gw.auth())
    assert one.status_code == 200 and listed.status_code == 200
    without = {k: v for k, v in created.items() if k != "secret"}
    assert one.json() == without
    assert listed.json() == {
        "object": "list",
        "data": [without],
        "has_more": False,
        "first_id": created["id"],
        "last_id": created["id"],
    }
    assert secret not in one.text + listed.text

    # Stored sealed for this org and subscription only.
    record = await gw.runtime.storage.webhooks.get(gw.org_id, created["id"])
    assert record is not None
    assert _box(gw).open(record.secret_sealed, (gw.org_id, created["id"])) == secret
    random_part = secret.removeprefix("whsec_")
    cells = await _all_cells(gw.runtime.storage.db)
    assert not any(random_part in cell for cell in cells), "stored in clear"
    if gw.runtime.storage.db.dialect == "sqlite":
        path = Path(sqlite_path(gw.runtime.config.database_url))
        raw = b"".join(
            p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists()
        )
        assert random_part.encode() not in raw
        assert base64.b64encode(secret.encode())[:20] not in raw
    # Nor in the server's log (the test's own HTTP client logs are not ours).
    rotated = await gw.client.post(f"{PATH}/{created['id']}/rotate_secret", headers=gw.auth())
    server_lines = "\n".join(
        rec.getMessage() for rec in caplog.records if not rec.name.startswith(("httpx", "httpcore"))
    )
    assert "gateway.access" in {rec.name for rec in caplog.records}
    for shown in (secret, rotated.json()["secret"]):
        assert shown.removeprefix("whsec_") not in server_lines


async def test_a_custom_secret_is_used_as_given(gw: Gateway) -> None:
    secret = "my-receivers-own-secret-9876"
    created = await _created(gw, secret=secret, enabled=False)
    # 28 characters: too few for a hint to show any of them.
    assert created["secret"] == secret and created["secret_hint"] == "…"
    assert created["enabled"] is False and created["disabled_reason"] == "manual"
    assert created["disabled_at"] == created["created_at"]
    record = await gw.runtime.storage.webhooks.get(gw.org_id, created["id"])
    assert record is not None
    assert _box(gw).open(record.secret_sealed, (gw.org_id, created["id"])) == secret
    # `null` asks for a generated one.
    generated = await _created(gw, secret=None)
    assert generated["secret"].startswith("whsec_")
    long = "whsec_" + "L" * 28 + "tail"
    assert (await _created(gw, secret=long))["secret_hint"] == "whsec_…tail"


async def test_a_short_custom_secret_is_refused_and_never_hinted_whole(gw: Gateway) -> None:
    """Issue #19 item 10: `abcd` was accepted and its hint showed all of it. 24 characters
    are needed, not counting a `whsec_` prefix (which anyone can guess)."""
    for short in ("abcd", "x" * 23, "whsec_" + "x" * 23, "whsec_abcd"):
        error = _bad(await _create(gw, secret=short), "secret")
        assert error["code"] == "secret_too_short" and "24" in error["message"]
    created = await _created(gw)
    at = f"{PATH}/{created['id']}/rotate_secret"
    error = _bad(await gw.client.post(at, json={"secret": "abcd"}, headers=gw.auth()), "secret")
    assert error["code"] == "secret_too_short"
    assert (await gw.client.get(PATH, headers=gw.auth())).json()["data"] == [
        (await gw.client.get(f"{PATH}/{created['id']}", headers=gw.auth())).json()
    ]
    for fine in ("y" * 24, "whsec_" + "y" * 24):
        made = await _created(gw, secret=fine)
        assert made["secret"] == fine and "y" not in made["secret_hint"]


async def test_event_filters_are_normalised(gw: Gateway) -> None:
    assert (await _created(gw, events=["*"]))["events"] == ["*"]
    deduplicated = await _created(gw, events=["key.created", "completion.error", "key.created"])
    assert deduplicated["events"] == ["key.created", "completion.error"]
    every = await _created(gw, events=list(EVENT_TYPES))
    assert every["events"] == list(EVENT_TYPES)


BAD_CREATES: list[tuple[dict[str, Any], str | None]] = [
    ({"events": ["*"]}, "url"),
    ({"url": URL}, "events"),
    ({"url": 5, "events": ["*"]}, "url"),
    ({"url": "", "events": ["*"]}, "url"),
    ({"url": "https://" + "a" * 2100 + ".example.com/", "events": ["*"]}, "url"),
    ({"url": "ftp://127.0.0.1/x", "events": ["*"]}, "url"),
    ({"url": "127.0.0.1/hooks", "events": ["*"]}, "url"),
    ({"url": "https://user:pw@127.0.0.1/hooks", "events": ["*"]}, "url"),
    ({"url": "https://127.0.0.1/hooks#part", "events": ["*"]}, "url"),
    ({"url": "https://127.0.0.1/ho oks", "events": ["*"]}, "url"),
    ({"url": "https://bücher.example/", "events": ["*"]}, "url"),
    ({"url": "https://127.0.0.1:99999/", "events": ["*"]}, "url"),
    ({"url": "https://127.0.0.1:0/", "events": ["*"]}, "url"),
    ({"url": "https:///hooks", "events": ["*"]}, "url"),
    ({"url": "https://a..b/hooks", "events": ["*"]}, "url"),  # not even encodable as a name
    ({"url": "https://" + "x" * 70 + ".example/", "events": ["*"]}, "url"),
    ({"url": URL, "events": []}, "events"),
    ({"url": URL, "events": "*"}, "events"),
    ({"url": URL, "events": ["key.created", "nope"]}, "events[1]"),
    ({"url": URL, "events": ["*", "key.created"]}, "events"),
    ({"url": URL, "events": [5]}, "events[0]"),
    ({"url": URL, "events": ["*"], "secret": ""}, "secret"),
    ({"url": URL, "events": ["*"], "secret": "has space"}, "secret"),
    ({"url": URL, "events": ["*"], "secret": "é-not-ascii"}, "secret"),
    ({"url": URL, "events": ["*"], "secret": "x" * 1025}, "secret"),
    ({"url": URL, "events": ["*"], "secret": 12}, "secret"),
    ({"url": URL, "events": ["*"], "description": "d" * 513}, "description"),
    ({"url": URL, "events": ["*"], "description": 3}, "description"),
    ({"url": URL, "events": ["*"], "enabled": "yes"}, "enabled"),
    ({"url": URL, "events": ["*"], "enabled": None}, "enabled"),
    ({"url": URL, "events": ["*"], "active": True}, "active"),
]


async def test_every_bad_field_is_a_400_naming_it(gw: Gateway) -> None:
    for body, param in BAD_CREATES:
        r = await gw.client.post(PATH, json=body, headers=gw.auth())
        _bad(r, param)
    for raw in (b"", b"[]", b"{not json"):
        r = await gw.client.post(
            PATH, content=raw, headers={**gw.auth(), "content-type": "application/json"}
        )
        assert r.status_code == 400, raw
    assert (await gw.client.get(PATH, headers=gw.auth())).json()["data"] == []


async def test_urls_are_https_and_never_loopback_or_private_by_default(
    database_url: str, tmp_path: Path
) -> None:
    async with running_gateway(gateway_config(database_url, tmp_path)) as gw:
        refused = [
            "https://127.0.0.1/hooks",
            "https://127.8.9.10:8443/hooks",
            "https://localhost/hooks",
            "https://[::1]/hooks",
            "https://[::ffff:127.0.0.1]/hooks",
            "https://10.1.2.3/hooks",
            "https://192.168.0.10/hooks",
            "https://169.254.169.254/latest/meta-data",
            "https://0.0.0.0/hooks",
        ]
        for url in refused:
            error = _bad(await _create(gw, url=url), "url")
            assert error["code"] == "webhook_url_not_allowed", url
        error = _bad(await _create(gw, url="http://93.184.215.14/hooks"), "url")
        assert error["code"] == "invalid_webhook_url" and "https" in error["message"]
        error = _bad(await _create(gw, url="https://does-not-exist.invalid/hooks"), "url")
        assert error["code"] == "invalid_webhook_url"
        # A public address is fine, and so is its name's case.
        created = await _created(gw, url="HTTPS://93.184.215.14/hooks?source=gw")
        assert created["url"] == "HTTPS://93.184.215.14/hooks?source=gw"
        # PATCH checks a new URL the same way.
        patched = await gw.client.patch(
            f"{PATH}/{created['id']}", json={"url": "https://127.0.0.1/x"}, headers=gw.auth()
        )
        assert _bad(patched, "url")["code"] == "webhook_url_not_allowed"


async def test_allowed_networks_and_http_are_the_operators_choice(
    database_url: str, tmp_path: Path
) -> None:
    toml = '[webhooks]\nallowed_private_networks = ["127.0.0.0/8"]\nallow_http = true\n'
    async with running_gateway(gateway_config(database_url, tmp_path, toml=toml)) as gw:
        assert (await _created(gw, url="https://127.0.0.1:8443/in"))["url"].startswith("https")
        assert (await _created(gw, url="http://127.0.0.1:8080/in"))["url"].startswith("http:")
        # Only the networks listed: ::1 and 10/8 are still refused.
        for url in ("https://[::1]/in", "http://10.0.0.1/in"):
            assert _bad(await _create(gw, url=url), "url")["code"] == "webhook_url_not_allowed"
        assert _bad(await _create(gw, url="ftp://127.0.0.1/in"), "url")


async def test_ssrf_gaps_of_issue_19_are_closed_at_subscription(
    database_url: str, tmp_path: Path
) -> None:
    """Item 11: forms that embed or reach inside addresses, zone ids, and ports other than
    443 are 400 naming `url`; an operator may allow other ports."""
    first = gateway_config(database_url, tmp_path)
    async with running_gateway(first) as gw:
        refused = [
            "https://[64:ff9b:1::7f00:1]/",  # RFC 8215 local-use NAT64
            "https://[::ffff:0:7f00:1]/",  # IPv4-translated loopback
            "https://192.88.99.1/",  # 6to4 relay anycast
            "https://[2002:a00:1::1]/",  # 6to4 of 10.0.0.1
            "https://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the metadata address
            "https://[::a00:1]/",  # IPv4-compatible 10.0.0.1
            "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo, client 127.0.0.1
        ]
        for url in refused:
            error = _bad(await _create(gw, url=url), "url")
            assert error["code"] == "webhook_url_not_allowed", url
        for url in ("https://93.184.216.34%00.127.0.0.1/", "https://[fe80::1%25eth0]/"):
            error = _bad(await _create(gw, url=url), "url")
            assert error["code"] == "invalid_webhook_url" and "%" in error["message"], url
        error = _bad(await _create(gw, url="https://93.184.215.14:8443/hooks"), "url")
        assert error["code"] == "webhook_url_not_allowed" and "port 8443" in error["message"]
        assert (await _created(gw, url="https://93.184.215.14:443/hooks"))["url"]
    toml = "[webhooks]\nallowed_ports = [8443]\n"
    assert first.master_key is not None
    same_key = base64.b64encode(first.master_key).decode()
    config = gateway_config(database_url, tmp_path / "b", toml=toml, GATEWAY_MASTER_KEY=same_key)
    async with running_gateway(config) as gw:
        assert (await _created(gw, url="https://93.184.215.14:8443/hooks"))["url"]
        error = _bad(await _create(gw, url="https://93.184.215.14:8080/hooks"), "url")
        assert error["code"] == "webhook_url_not_allowed"


# -- update, delete ------------------------------------------------------------------------


async def test_patch_changes_only_what_is_sent(gw: Gateway) -> None:
    created = await _created(gw, description="first")
    at = f"{PATH}/{created['id']}"
    r = await gw.client.patch(at, json={"events": ["key.deleted"]}, headers=gw.auth())
    assert r.status_code == 200, r.text
    updated = r.json()
    assert set(updated) == OBJECT_FIELDS
    assert updated["events"] == ["key.deleted"] and updated["description"] == "first"
    assert updated["url"] == URL and updated["secret_hint"] == created["secret_hint"]

    off = (await gw.client.patch(at, json={"enabled": False}, headers=gw.auth())).json()
    assert off["enabled"] is False and off["disabled_reason"] == "manual"
    assert off["disabled_at"] is not None
    on = await gw.client.patch(
        at,
        json={"enabled": True, "description": None, "url": "https://127.0.0.2/h"},
        headers=gw.auth(),
    )
    assert on.status_code == 200, on.text
    assert on.json()["enabled"] is True and on.json()["disabled_reason"] is None
    assert on.json()["disabled_at"] is None and on.json()["description"] is None
    assert on.json()["url"] == "https://127.0.0.2/h"
    assert (await gw.client.get(at, headers=gw.auth())).json() == on.json()

    same = await gw.client.patch(at, json={}, headers=gw.auth())
    assert same.status_code == 200 and same.json()["events"] == ["key.deleted"]


async def test_patch_refuses_a_secret_and_bad_fields(gw: Gateway) -> None:
    created = await _created(gw)
    at = f"{PATH}/{created['id']}"
    error = _bad(
        await gw.client.patch(at, json={"secret": "whsec_new"}, headers=gw.auth()), "secret"
    )
    assert error["code"] == "use_rotate_secret" and "rotate_secret" in error["message"]
    for body, param in [
        ({"events": []}, "events"),
        ({"events": ["nope"]}, "events[0]"),
        ({"url": "http://127.0.0.1/x"}, "url"),
        ({"enabled": 1}, "enabled"),
        ({"description": "d" * 513}, "description"),
        ({"id": "whk_other"}, "id"),
    ]:
        _bad(await gw.client.patch(at, json=body, headers=gw.auth()), param)
    assert (await gw.client.get(at, headers=gw.auth())).json()["events"] == ["*"]


async def test_delete_removes_it(gw: Gateway) -> None:
    created = await _created(gw)
    at = f"{PATH}/{created['id']}"
    r = await gw.client.delete(at, headers=gw.auth())
    assert r.status_code == 200
    assert r.json() == {"id": created["id"], "object": "webhook.deleted", "deleted": True}
    for method in ("GET", "DELETE", "PATCH"):
        again = await gw.client.request(
            method, at, json={} if method == "PATCH" else None, headers=gw.auth()
        )
        assert again.status_code == 404
        assert error_of(again)["code"] == "webhook_not_found"
    assert await gw.runtime.storage.webhooks.get(gw.org_id, created["id"]) is None


# -- paging --------------------------------------------------------------------------------


async def test_list_pages_oldest_first_with_after(gw: Gateway) -> None:
    ids = [(await _created(gw, description=str(i)))["id"] for i in range(3)]
    first = (await gw.client.get(PATH, params={"limit": 2}, headers=gw.auth())).json()
    assert [w["id"] for w in first["data"]] == ids[:2]
    assert first["has_more"] is True and first["first_id"] == ids[0]
    assert first["last_id"] == ids[1]
    second = await gw.client.get(
        PATH, params={"limit": 2, "after": first["last_id"]}, headers=gw.auth()
    )
    assert [w["id"] for w in second.json()["data"]] == ids[2:]
    assert second.json()["has_more"] is False
    for bad in ("0", "101", "x"):
        _bad(await gw.client.get(PATH, params={"limit": bad}, headers=gw.auth()), "limit")
    # Another org sees none of them.
    other = await _other_org_key(gw)
    empty = (await gw.client.get(PATH, headers=gw.auth(other))).json()
    assert empty["data"] == [] and empty["first_id"] is None and empty["last_id"] is None


# -- rotation ------------------------------------------------------------------------------


async def test_rotate_secret_keeps_the_old_one_for_the_overlap(gw: Gateway) -> None:
    created = await _created(gw)
    old = created["secret"]
    at = f"{PATH}/{created['id']}/rotate_secret"
    before = now_us()
    r = await gw.client.post(at, headers=gw.auth())
    assert r.status_code == 200, r.text
    rotated = r.json()
    assert set(rotated) == OBJECT_FIELDS | {"secret"}
    new = rotated["secret"]
    assert new.startswith("whsec_") and new != old
    assert rotated["secret_hint"] == "whsec_…" + new[-4:]
    got = (await gw.client.get(f"{PATH}/{created['id']}", headers=gw.auth())).json()
    assert "secret" not in got and got["secret_hint"] == rotated["secret_hint"]

    record = await gw.runtime.storage.webhooks.get(gw.org_id, created["id"])
    assert record is not None and record.previous_secret_sealed is not None
    context = (gw.org_id, created["id"])
    assert _box(gw).open(record.secret_sealed, context) == new
    assert _box(gw).open(record.previous_secret_sealed, context) == old
    expires = record.previous_secret_expires_at
    assert expires is not None
    assert before + OVERLAP_S * 1_000_000 <= expires <= now_us() + OVERLAP_S * 1_000_000

    by_hand = "rotated-by-hand-555555555555555"
    custom = await gw.client.post(at, json={"secret": by_hand}, headers=gw.auth())
    assert custom.status_code == 200 and custom.json()["secret"] == by_hand
    _bad(await gw.client.post(at, json={"secret": "a b"}, headers=gw.auth()), "secret")
    _bad(await gw.client.post(at, json={"other": 1}, headers=gw.auth()), "other")


# -- test events ---------------------------------------------------------------------------


async def _outbox_row(gw: Gateway, event_id: str) -> dict[str, Any]:
    rows = await gw.runtime.storage.db.fetch(
        "SELECT org_id, webhook_id, type, data FROM events WHERE id = :id", {"id": event_id}
    )
    assert len(rows) == 1
    return dict(rows[0])


async def test_a_test_event_lands_in_the_outbox_for_this_webhook_only(gw: Gateway) -> None:
    created = await _created(gw, events=["key.created"])
    at = f"{PATH}/{created['id']}/test"
    for event_type in EVENT_TYPES:
        r = await gw.client.post(at, json={"type": event_type}, headers=gw.auth())
        assert r.status_code == 202, r.text
        event = r.json()
        assert set(event) == {"id", "type", "created_at", "data"}
        assert event["id"].startswith("evt_") and event["type"] == event_type
        assert event["created_at"].endswith("Z")
        assert event["data"] == {**SAMPLES[event_type], "test": True}
        row = await _outbox_row(gw, event["id"])
        assert row["org_id"] == gw.org_id and row["webhook_id"] == created["id"]
        assert row["type"] == event_type
    for body, param in [({}, "type"), ({"type": "*"}, "type"), ({"type": "nope"}, "type")]:
        _bad(await gw.client.post(at, json=body, headers=gw.auth()), param)


async def test_a_disabled_webhook_gets_no_test_event(gw: Gateway) -> None:
    created = await _created(gw, enabled=False)
    r = await gw.client.post(
        f"{PATH}/{created['id']}/test", json={"type": "key.created"}, headers=gw.auth()
    )
    assert r.status_code == 409 and error_of(r)["code"] == "webhook_disabled"


# -- the delivery log ----------------------------------------------------------------------


async def _deliver_like_an_actor(gw: Gateway, webhook_id: str, statuses: list[int]) -> None:
    """What the delivery actor does, through the same repository: take the lease, queue the
    outbox, and record one attempt per queued event with the given response statuses."""
    repo = gw.runtime.storage.webhooks
    owner = "test-actor"
    assert await repo.claim(webhook_id, owner, now_us(), 3600 * 1_000_000)
    assert await repo.fill_queue(webhook_id, owner, now_us(), limit=100) == len(statuses)
    for status_code in statuses:
        head = await repo.head(webhook_id)
        assert head is not None
        ok = 200 <= status_code < 300
        attempt = Attempt(
            event_id=head.event_id,
            started_at=now_us(),
            duration_ms=7,
            status_code=status_code,
            error=None,
            outcome="delivered" if ok else "permanent",
        )
        status = "delivered" if ok else "failed"
        assert await repo.record_attempt(
            webhook_id, owner, attempt, status=status, next_attempt_at=None, now=now_us()
        )
    await repo.release(webhook_id, owner)


async def test_deliveries_are_listed_and_redelivered(gw: Gateway) -> None:
    created = await _created(gw, events=["key.created"])
    wid = created["id"]
    since = now_us() // 1_000_000 - 1
    test_event = (
        await gw.client.post(
            f"{PATH}/{wid}/test", json={"type": "budget.threshold"}, headers=gw.auth()
        )
    ).json()
    await create_key(gw, name="one")
    await create_key(gw, name="two")
    await _deliver_like_an_actor(gw, wid, [204, 410, 400])

    r = await gw.client.get(f"{PATH}/{wid}/deliveries", headers=gw.auth())
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["object"] == "list" and page["has_more"] is False
    deliveries = page["data"]
    assert [d["status"] for d in deliveries] == ["failed", "failed", "delivered"]  # newest first
    assert [d["event_type"] for d in deliveries] == [
        "key.created",
        "key.created",
        "budget.threshold",
    ]
    delivered = deliveries[-1]
    assert delivered["event_id"] == test_event["id"]
    assert delivered["object"] == "webhook.delivery" and delivered["webhook_id"] == wid
    assert delivered["attempts"] == 1 and delivered["last_status_code"] == 204
    assert delivered["next_attempt_at"] is None
    assert [
        (a["status_code"], a["outcome"], a["duration_ms"]) for a in delivered["attempt_log"]
    ] == [(204, "delivered", 7)]
    assert page["first_id"] == deliveries[0]["event_id"]
    assert page["last_id"] == delivered["event_id"]
    one = await gw.client.get(f"{PATH}/{wid}/deliveries", params={"limit": 1}, headers=gw.auth())
    assert one.json()["has_more"] is True and len(one.json()["data"]) == 1
    rest = await gw.client.get(
        f"{PATH}/{wid}/deliveries",
        params={"limit": 5, "after": one.json()["last_id"]},
        headers=gw.auth(),
    )
    assert [d["event_id"] for d in rest.json()["data"]] == [d["event_id"] for d in deliveries[1:]]

    # One event again: pending at the tail, attempts from zero.
    failed_id = deliveries[-2]["event_id"]
    again = await gw.client.post(
        f"{PATH}/{wid}/deliveries/{failed_id}/redeliver", headers=gw.auth()
    )
    assert again.status_code == 202, again.text
    assert again.json()["event_id"] == failed_id and again.json()["status"] == "pending"
    assert again.json()["attempts"] == 0
    missing = await gw.client.post(
        f"{PATH}/{wid}/deliveries/evt_missing/redeliver", headers=gw.auth()
    )
    assert missing.status_code == 404 and error_of(missing)["code"] == "event_not_found"
    # An event this subscription would not receive (another org's key event) is unknown too.
    other_org, other = await _other_org(gw)
    await create_key(gw, auth_key=other, name="foreign")
    foreign = await gw.runtime.storage.events.list_for_org(other_org)
    assert [e.type for e in foreign] == ["key.created"]
    r = await gw.client.post(
        f"{PATH}/{wid}/deliveries/{foreign[0].id}/redeliver", headers=gw.auth()
    )
    assert r.status_code == 404 and error_of(r)["code"] == "event_not_found"

    # Everything not delivered since then: the other failed one (the first is pending now).
    bulk = await gw.client.post(f"{PATH}/{wid}/redeliver", json={"since": since}, headers=gw.auth())
    assert bulk.status_code == 202, bulk.text
    assert bulk.json() == {"object": "webhook.redelivery", "queued": 1, "has_more": False}
    iso = await gw.client.post(
        f"{PATH}/{wid}/redeliver", json={"since": "2000-01-01T00:00:00Z"}, headers=gw.auth()
    )
    assert iso.json()["queued"] == 0
    statuses = [
        d["status"]
        for d in (await gw.client.get(f"{PATH}/{wid}/deliveries", headers=gw.auth())).json()["data"]
    ]
    assert sorted(statuses) == ["delivered", "pending", "pending"]
    for since_value in ("yesterday", "2030-01-01T00:00:00", -1, None):
        r = await gw.client.post(
            f"{PATH}/{wid}/redeliver", json={"since": since_value}, headers=gw.auth()
        )
        _bad(r, "since")
    _bad(await gw.client.post(f"{PATH}/{wid}/redeliver", json={}, headers=gw.auth()), "since")


async def test_a_disabled_webhook_is_not_redelivered_to(gw: Gateway) -> None:
    created = await _created(gw, enabled=False)
    wid = created["id"]
    for path, body in (
        (f"{PATH}/{wid}/redeliver", {"since": 0}),
        (f"{PATH}/{wid}/deliveries/evt_x/redeliver", None),
    ):
        r = await gw.client.post(path, json=body, headers=gw.auth())
        assert r.status_code == 409 and error_of(r)["code"] == "webhook_disabled"


# -- who may call --------------------------------------------------------------------------


def _every_route(wid: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("GET", f"{PATH}/{wid}", None),
        ("PATCH", f"{PATH}/{wid}", {"description": "x"}),
        ("DELETE", f"{PATH}/{wid}", None),
        ("POST", f"{PATH}/{wid}/test", {"type": "key.created"}),
        ("POST", f"{PATH}/{wid}/rotate_secret", None),
        ("GET", f"{PATH}/{wid}/deliveries", None),
        ("POST", f"{PATH}/{wid}/deliveries/evt_x/redeliver", None),
        ("POST", f"{PATH}/{wid}/redeliver", {"since": 0}),
    ]


async def test_another_organizations_webhook_is_not_found_on_every_route(gw: Gateway) -> None:
    created = await _created(gw)
    other = await _other_org_key(gw)
    for method, path, body in _every_route(created["id"]):
        r = await gw.client.request(method, path, json=body, headers=gw.auth(other))
        assert r.status_code == 404, (method, path, r.text)
        assert error_of(r)["code"] == "webhook_not_found"
    for method, path, body in _every_route("whk_doesnotexist"):
        r = await gw.client.request(method, path, json=body, headers=gw.auth())
        assert r.status_code == 404, (method, path)
    # The subscription is untouched.
    after = (await gw.client.get(f"{PATH}/{created['id']}", headers=gw.auth())).json()
    assert after["description"] is None and after["secret_hint"] == created["secret_hint"]


async def test_credentials_and_scopes(gw: Gateway) -> None:
    created = await _created(gw)
    routes = [("POST", PATH, {"url": URL, "events": ["*"]}), ("GET", PATH, None)]
    routes += _every_route(created["id"])
    plain = await create_key(gw, name="no webhooks", scopes=["keys:manage", "models:read"])
    for method, path, body in routes:
        none = await gw.client.request(method, path, json=body)
        assert none.status_code == 401, (method, path)
        forbidden = await gw.client.request(method, path, json=body, headers=gw.auth(plain["key"]))
        assert forbidden.status_code == 403, (method, path)
        assert error_of(forbidden)["code"] == "insufficient_permissions"
    holder = await create_key(gw, name="hooks", scopes=["webhooks:manage"])
    r = await _create(gw, auth=holder["key"])
    assert r.status_code == 200, r.text
    listed = await gw.client.get(PATH, headers=gw.auth(holder["key"]))
    assert {w["id"] for w in listed.json()["data"]} == {created["id"], r.json()["id"]}


async def test_openapi_documents_the_webhook_routes(gw: Gateway) -> None:
    doc = (await gw.client.get("/openapi.json")).json()
    create = doc["paths"][PATH]["post"]
    ref = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    assert schema["required"] == ["url", "events"]
    assert {"secret", "description", "enabled"} <= set(schema["properties"])
    assert "webhooks:manage" in create["description"]
    assert set(doc["paths"][f"{PATH}/{{webhook_id}}/test"]["post"]["responses"]) >= {
        "202",
        "400",
        "404",
        "409",
    }


# -- end to end: the dispatcher delivers what the API wrote ---------------------------------


async def test_a_test_event_reaches_the_receiver_signed_with_the_returned_secret(
    database_url: str, tmp_path: Path
) -> None:
    toml = (
        '[webhooks]\nallowed_private_networks = ["127.0.0.0/8"]\nallow_http = true\n'
        f"poll_interval_s = 0.05\nsecret_rotation_overlap_s = {OVERLAP_S}\n"
    )
    config = gateway_config(database_url, tmp_path, toml=toml)
    async with trio.open_nursery() as nursery:
        receiver: Receiver = await nursery.start(partial(serve_receiver, tls=None))
        async with running_gateway(config) as gw:
            created = await _created(gw, url=receiver.url, events=["key.created"])
            at = f"{PATH}/{created['id']}"
            sent = await gw.client.post(
                f"{at}/test", json={"type": "budget.threshold"}, headers=gw.auth()
            )
            assert sent.status_code == 202, sent.text
            with trio.fail_after(10):
                [arrival] = await receiver.wait_for(1)
            assert json.loads(arrival.body) == sent.json()
            assert arrival.header("Service-Webhook-Id") == sent.json()["id"]
            assert verify(created["secret"], arrival) and signatures(arrival) == 1

            async def log() -> list[dict[str, Any]]:
                r = await gw.client.get(f"{at}/deliveries", headers=gw.auth())
                data: list[dict[str, Any]] = r.json()["data"]
                return data

            for _ in range(500):  # the outcome is written just after the receiver answered
                if [d["status"] for d in await log()] == ["delivered"]:
                    break
                await trio.sleep(0.02)
            [entry] = await log()
            assert entry["event_id"] == sent.json()["id"] and entry["last_status_code"] == 200
            assert [a["outcome"] for a in entry["attempt_log"]] == ["delivered"]

            # After a rotation both secrets sign, for the overlap.
            rotated = (await gw.client.post(f"{at}/rotate_secret", headers=gw.auth())).json()
            await gw.client.post(f"{at}/test", json={"type": "key.created"}, headers=gw.auth())
            with trio.fail_after(10):
                second = (await receiver.wait_for(2))[1]
            assert signatures(second) == 2
            assert verify(rotated["secret"], second) and verify(created["secret"], second)
            # A real event of a subscribed type follows, in order.
            await create_key(gw, name="seen")
            with trio.fail_after(10):
                third = (await receiver.wait_for(3))[2]
            assert json.loads(third.body)["type"] == "key.created"
            assert json.loads(third.body)["data"]["key_name"] == "seen"
        nursery.cancel_scope.cancel()
