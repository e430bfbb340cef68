"""The console over HTTP (httpx against a real gateway): sign-in, the session cookie and
security headers, CSRF, what an organization's session may see, and hostile forms."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from protocol.credentials import CredentialKind
from tests.console.session import sign_in
from tests.gateway.keys_client import create_key
from tests.harness import OPERATOR_KEY, Gateway, gateway_config, running_gateway
from tests.waiting import wait_until_async

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGES = ("/console/overview", "/console/keys", "/console/usage", "/console/webhooks")


LOOPBACK_HOOKS = """
[webhooks]
allow_http = true
allowed_private_networks = ["127.0.0.0/8"]
"""


@pytest.fixture
async def hooks_gateway(database_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    """A gateway that accepts webhooks on loopback over http."""
    async with running_gateway(gateway_config(database_url, tmp_path, toml=LOOPBACK_HOOKS)) as gw:
        yield gw


async def _second_org(gw: Gateway) -> tuple[str, str]:
    storage = gw.runtime.storage
    org = await storage.orgs.create("other-org")
    credential = gw.runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await storage.orgs.add_management_key(org.id, credential)
    return org.id, credential.value


async def test_sign_in_sets_a_session_cookie_never_the_key(gateway: Gateway) -> None:
    r = await gateway.client.post("/console/sign-in", data={"key": gateway.management_key})
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    attributes = [part.strip() for part in cookie.split(";")]
    assert attributes[0].startswith("gateway_console=")
    assert set(attributes[1:]) == {"Path=/console", "HttpOnly", "Secure", "SameSite=Strict"}
    assert gateway.management_key not in cookie
    signed = await sign_in(gateway, gateway.management_key)
    for path in PAGES:
        page = await signed.get(path)
        assert page.status_code == 200, (path, page.text)
        assert gateway.management_key not in page.text
        assert page.headers["content-security-policy"] == CSP
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert page.headers["cache-control"] == "no-store"
        assert "<script>" not in page.text and "style=" not in page.text  # the CSP forbids them


async def test_a_rejected_key_shows_the_form_again_without_the_key(gateway: Gateway) -> None:
    secret = (await create_key(gateway, name="not-management"))["key"]
    for key in (
        "",
        "nonsense",
        secret,  # a secret key does not open the console
        gateway.management_key + "x",
        "service_op_wrong-operator-key",
        "x" * 100_00,
        "<script>alert(1)</script>",
    ):
        r = await gateway.client.post("/console/sign-in", data={"key": key})
        assert r.status_code == 401, key
        assert "was not accepted" in r.text
        assert "set-cookie" not in r.headers
        if key:
            assert key not in r.text
        assert r.headers["content-security-policy"] == CSP


async def test_without_a_session_pages_redirect_and_changes_are_refused(gateway: Gateway) -> None:
    for path in (*PAGES, "/console/supervision", "/console", "/console/", "/console/usage.csv"):
        r = await gateway.client.get(path)
        assert r.status_code == 303, path
        assert r.headers["location"] in ("/console/sign-in", "/console/overview")
    forged = {"cookie": "gateway_console=made-up-session-id"}
    r = await gateway.client.get("/console/keys", headers=forged)
    assert r.status_code == 303
    r = await gateway.client.post("/console/keys", data={"name": "x", "csrf": "x"}, headers=forged)
    assert r.status_code == 403
    listed = await gateway.client.get("/v1/keys", headers=gateway.auth())
    assert listed.json()["data"] == []


async def test_changes_need_the_session_token_and_this_origin(gateway: Gateway) -> None:
    signed = await sign_in(gateway, gateway.management_key)
    host = gateway.url.removeprefix("http://")
    refused = [
        await signed.post("/console/keys", {"name": "a"}, csrf=False),
        await signed.post("/console/keys", {"name": "b", "csrf": "wrong"}),
        await signed.post("/console/keys", {"name": "c", "csrf": signed.csrf + "x"}),
        await signed.post("/console/keys", {"name": "d"}, origin="https://evil.example"),
        await signed.post("/console/keys", {"name": "e"}, origin="null"),
        await signed.post("/console/keys", {"name": "f"}, **{"sec-fetch-site": "cross-site"}),
        await signed.post("/console/keys", {"name": "g"}, **{"sec-fetch-site": "same-site"}),
        await signed.post(
            "/console/keys",
            {"name": "h"},
            origin=f"http://{host}",
            **{"sec-fetch-site": "cross-site"},
        ),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    listed = await gateway.client.get("/v1/keys", headers=gateway.auth())
    assert listed.json()["data"] == []
    ok = await signed.post(
        "/console/keys",
        {"name": "made-here"},
        origin=f"http://{host}",
        **{"sec-fetch-site": "same-origin"},
    )
    assert ok.status_code == 303, ok.text
    # What Chromium sends under Referrer-Policy: no-referrer.
    ok = await signed.post(
        "/console/keys", {"name": "no-referrer"}, origin="null", **{"sec-fetch-site": "same-origin"}
    )
    assert ok.status_code == 303, ok.text
    ok = await signed.post("/console/keys", {"name": "old-browser"}, origin=f"http://{host}")
    assert ok.status_code == 303, ok.text
    listed = await gateway.client.get("/v1/keys", headers=gateway.auth())
    names = [k["name"] for k in listed.json()["data"]]
    assert names == ["made-here", "no-referrer", "old-browser"]
    # Sign-in from another site is refused too (no session to hold a token yet).
    r = await gateway.client.post(
        "/console/sign-in",
        data={"key": gateway.management_key},
        headers={"origin": "https://evil.example"},
    )
    assert r.status_code == 403 and "set-cookie" not in r.headers


async def test_the_secret_is_shown_once(gateway: Gateway) -> None:
    signed = await sign_in(gateway, gateway.management_key)
    r = await signed.post("/console/keys", {"name": "once", "daily_budget_usd": "2.5"})
    assert r.status_code == 303 and r.headers["location"] == "/console/keys"
    first = await signed.get("/console/keys")
    secrets = re.findall(r'value="(service_sk_[^"]+)"', first.text)
    assert len(secrets) == 1, first.text
    again = await signed.get("/console/keys")
    assert secrets[0] not in again.text
    assert "once" in again.text and "of $2.50" in again.text
    used = await gateway.client.get("/v1/keys", headers={"Authorization": f"Bearer {secrets[0]}"})
    assert used.status_code in (200, 403)  # a valid credential (its scopes decide the rest)


async def test_disable_enable_budget_and_delete(gateway: Gateway) -> None:
    key = await create_key(gateway, name="target")
    signed = await sign_in(gateway, gateway.management_key)
    base = f"/console/keys/{key['id']}"
    assert (await signed.post(base + "/disable")).status_code == 303
    got = await gateway.client.get(f"/v1/keys/{key['id']}", headers=gateway.auth())
    assert got.json()["is_active"] is False
    refused = await gateway.client.get("/v1/models", headers=gateway.auth(key["key"]))
    assert refused.status_code == 401
    assert (await signed.post(base + "/enable")).status_code == 303
    r = await signed.post(base + "/budget", {"daily_budget_usd": "1", "monthly_budget_usd": ""})
    assert r.status_code == 303
    got = await gateway.client.get(f"/v1/keys/{key['id']}", headers=gateway.auth())
    assert (got.json()["daily_budget_usd"], got.json()["monthly_budget_usd"]) == (1.0, None)
    for bad in ("-1", "abc", "nan", "1e99"):
        r = await signed.post(base + "/budget", {"daily_budget_usd": bad})
        assert r.status_code == 400, bad
    assert (await signed.post(base + "/frobnicate")).status_code == 404
    assert (await signed.post(base + "/delete")).status_code == 303
    assert (await signed.post(base + "/delete")).status_code == 404
    got = await gateway.client.get(f"/v1/keys/{key['id']}", headers=gateway.auth())
    assert got.status_code == 404


async def test_an_org_session_sees_only_its_org(hooks_gateway: Gateway) -> None:
    gateway = hooks_gateway
    other_org, other_key = await _second_org(gateway)
    theirs = await create_key(gateway, other_key, name="their-secret-key-name")
    hook = await gateway.client.post(
        "/v1/webhooks",
        json={"url": "http://127.0.0.1:9/their-hook", "events": ["key.created"]},
        headers=gateway.auth(other_key),
    )
    assert hook.status_code == 200, hook.text
    await create_key(gateway, name="our-key-name")
    signed = await sign_in(gateway, gateway.management_key)
    for path in PAGES:
        for query in ({}, {"org": other_org}):
            page = await signed.get(path, **query)
            assert page.status_code == 200
            assert "their-secret-key-name" not in page.text
            assert "their-hook" not in page.text
            assert other_org not in page.text
    assert "our-key-name" in (await signed.get("/console/keys", org=other_org)).text
    csv = await signed.get("/console/usage.csv", org=other_org)
    assert other_org not in csv.text and "their-secret-key-name" not in csv.text
    webhook_id = hook.json()["id"]
    assert (await signed.get(f"/console/webhooks/{webhook_id}")).status_code == 404
    for action in ("test", "rotate"):
        r = await signed.post(f"/console/webhooks/{webhook_id}/{action}", {"type": "key.created"})
        assert r.status_code == 404
    for action in ("disable", "delete"):
        r = await signed.post(f"/console/keys/{theirs['id']}/{action}", {"org": other_org})
        assert r.status_code == 404
    got = await gateway.client.get(f"/v1/keys/{theirs['id']}", headers=gateway.auth(other_key))
    assert got.json()["is_active"] is True
    supervision = await signed.get("/console/supervision")
    assert supervision.status_code == 403
    assert "last-used-recorder" not in supervision.text
    assert "/console/supervision" not in (await signed.get("/console/overview")).text
    overview = await signed.get("/console/overview/live")
    assert "This instance" not in overview.text  # instance-wide figures are the operator's


async def test_the_operator_sees_every_org_and_the_supervision_tree(gateway: Gateway) -> None:
    other_org, other_key = await _second_org(gateway)
    await create_key(gateway, other_key, name="their-key")
    signed = await sign_in(gateway, OPERATOR_KEY)
    tree = await signed.get("/console/supervision")
    assert tree.status_code == 200
    assert 'data-actor="last-used-recorder"' in tree.text
    keys = await signed.get("/console/keys", org=other_org)
    assert "their-key" in keys.text
    assert (await signed.get("/console/keys", org="org_missing")).status_code == 404
    overview = await signed.get("/console/overview")
    assert "This instance" in overview.text and other_org in overview.text
    assert OPERATOR_KEY not in overview.text


async def test_sign_out_ends_the_session(gateway: Gateway) -> None:
    signed = await sign_in(gateway, gateway.management_key)
    r = await signed.post("/console/sign-out")
    assert r.status_code == 303
    assert "Max-Age=0" in r.headers["set-cookie"]
    assert (await signed.get("/console/keys")).status_code == 303


async def test_a_revoked_management_key_ends_its_sessions(gateway: Gateway) -> None:
    storage = gateway.runtime.storage
    extra = gateway.runtime.hasher.generate(CredentialKind.MANAGEMENT)
    key_id = await storage.orgs.add_management_key(gateway.org_id, extra)
    signed = await sign_in(gateway, extra.value)
    assert (await signed.get("/console/keys")).status_code == 200
    await storage.orgs.revoke_management_key(gateway.org_id, key_id)
    assert (await signed.get("/console/keys")).status_code == 303


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/x-www-form-urlencoded", b"name=%ff%fe&csrf=x"),
        ("application/x-www-form-urlencoded", b"\xff\xfe\x00"),
        ("application/json", b'{"name": "x"}'),
        ("multipart/form-data; boundary=x", b"--x--"),
        ("application/x-www-form-urlencoded", b"&".join(b"f%d=1" % i for i in range(500))),
        ("application/x-www-form-urlencoded", b"name=a%00b&csrf=x"),
        ("application/x-www-form-urlencoded", b"a=" + b"x" * 70_000),
        ("", b"name=x"),
    ],
)
async def test_malformed_forms_are_4xx(gateway: Gateway, content_type: str, body: bytes) -> None:
    signed = await sign_in(gateway, gateway.management_key)
    for path in ("/console/keys", "/console/sign-in", "/console/sign-out"):
        r = await gateway.client.post(
            path, content=body, headers={**signed.headers, "content-type": content_type}
        )
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text)
        assert r.headers["content-security-policy"] == CSP


async def test_odd_requests_are_4xx_never_5xx(gateway: Gateway) -> None:
    signed = await sign_in(gateway, gateway.management_key)
    for path, status in (
        ("/console/nope", 404),
        ("/console/keys/a/b/c/d", 404),
        ("/console/static/..%2f..%2fapp.py", 404),
        ("/console/static/missing.css", 404),
        ("/console/usage?start=yesterday", 400),
        ("/console/usage?start=2020-01-01&end=2026-01-01", 400),
        ("/console/usage?start=2026-02-01&end=2026-01-01", 400),
        ("/console/usage?start=%ff", 400),
        ("/console/webhooks/whk_missing", 404),
    ):
        r = await gateway.client.get(path, headers=signed.headers)
        assert r.status_code == status, (path, r.status_code, r.text)
    r = await gateway.client.delete("/console/keys", headers=signed.headers)
    assert r.status_code == 405
    r = await signed.post("/console/overview")
    assert r.status_code == 405


async def test_static_files_and_the_api_document(gateway: Gateway) -> None:
    css = await gateway.client.get("/console/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    js = await gateway.client.get("/console/static/console.js")
    assert js.status_code == 200 and "text/javascript" in js.headers["content-type"]
    assert js.headers["x-content-type-options"] == "nosniff"
    document = (await gateway.client.get("/openapi.json")).json()
    assert not [p for p in document["paths"] if p.startswith("/console")]


async def test_usage_csv_cells_never_start_a_formula(gateway: Gateway) -> None:
    signed = await sign_in(gateway, gateway.management_key)
    r = await signed.get("/console/usage.csv")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"].startswith("attachment;")
    assert r.text.splitlines()[0].startswith("day,key_id,key_name,model,requests")


def test_csv_cells_are_defused() -> None:
    from gateway.console.usage import _cell

    assert _cell("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert _cell("+1") == "'+1" and _cell("@x") == "'@x" and _cell("-2") == "'-2"
    assert _cell("small") == "small" and _cell(None) == ""


async def test_webhook_test_event_rotation_and_redelivery(hooks_gateway: Gateway) -> None:
    gateway = hooks_gateway
    hook = await gateway.client.post(
        "/v1/webhooks",
        json={"url": "http://127.0.0.1:9/ours", "events": ["key.created"]},
        headers=gateway.auth(),
    )
    assert hook.status_code == 200, hook.text
    webhook_id, old_hint = hook.json()["id"], hook.json()["secret_hint"]
    signed = await sign_in(gateway, gateway.management_key)
    base = f"/console/webhooks/{webhook_id}"
    assert "127.0.0.1:9/ours" in (await signed.get("/console/webhooks")).text
    r = await signed.post(base + "/test", {"type": "no.such.event"})
    assert r.status_code == 400
    r = await signed.post(base + "/test", {"type": "key.created"})
    assert r.status_code == 303 and r.headers["location"] == base
    assert "Test event key.created queued." in (await signed.get(base)).text
    events: list[str] = []

    async def delivery_listed() -> bool:  # the dispatcher makes the delivery row
        events[:] = re.findall(r'data-event="([^"]+)"', (await signed.get(base)).text)
        return len(events) == 1

    await wait_until_async(delivery_listed)
    r = await signed.post(f"{base}/deliveries/{events[0]}/redeliver")
    assert r.status_code == 303
    assert "queued again" in (await signed.get(base)).text
    r = await signed.post(f"{base}/deliveries/evt_missing/redeliver")
    assert r.status_code == 404
    r = await signed.post(base + "/rotate")
    assert r.status_code == 303
    shown = await signed.get(base)
    secret = re.findall(
        r'id="new-secret" class="secret-value" readonly value="([^"]+)"', shown.text
    )
    assert len(secret) == 1
    assert secret[0] not in (await signed.get(base)).text
    got = await gateway.client.get(f"/v1/webhooks/{webhook_id}", headers=gateway.auth())
    assert got.json()["secret_hint"] != old_hint
    assert (await signed.post(base + "/disable")).status_code == 303
    assert 'id="webhook-state">disabled (manual)' in (await signed.get(base)).text
    refused = await signed.post(base + "/test", {"type": "key.created"})
    assert refused.status_code == 409
    assert (await signed.post(f"{base}/deliveries/{events[0]}/redeliver")).status_code == 409
    assert (await signed.post(base + "/enable")).status_code == 303
    got = await gateway.client.get(f"/v1/webhooks/{webhook_id}", headers=gateway.auth())
    assert got.json()["enabled"] is True


async def test_names_are_escaped(gateway: Gateway) -> None:
    hostile = '<img src=x onerror="alert(1)">'
    await create_key(gateway, name=hostile)
    signed = await sign_in(gateway, gateway.management_key)
    page = await signed.get("/console/keys")
    assert hostile not in page.text
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in page.text
