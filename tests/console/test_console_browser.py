"""The console in a real browser: Debian's Chromium driven by Playwright (never a downloaded
browser) against a real gateway with a simulated upstream and a webhook receiver.

One journey, as an operator would take it: sign in with the organization's management key,
create a key and see its secret once, send a chat request with it and watch it arrive in the
live overview and the usage chart, disable the key, redeliver a webhook event, then sign in as
the operator and see a crashing actor's restarts in the supervision view; an organization's
session is refused the supervision view and never shows another organization's keys. A
screenshot of each page is saved to $GATEWAY_TEST_ARTIFACTS (default
var/test-artifacts/console/), the run's artifacts.

The gateway runs in the test's Trio loop; Playwright's sync API runs in a worker thread
(`trio.to_thread.run_sync`) and calls back into the loop with `trio.from_thread.run`.
"""

from __future__ import annotations

import asyncio
import os
import re
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from actors.supervisor import RestartPolicy
from bench.upstream import UpstreamServer, serve_upstream
from protocol.credentials import CredentialKind
from tests.backends import REQUIRE, fresh_database_url
from tests.gateway.test_health import Crashy
from tests.harness import OPERATOR_KEY, Gateway, gateway_config, running_gateway
from tests.inference import inference_toml
from tests.waiting import wait_until
from tests.webhook_receiver import Receiver, serve_receiver

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("GATEWAY_TEST_ARTIFACTS") or REPO / "var/test-artifacts/console")
WAIT_MS = 15_000

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists() and not REQUIRE,
    reason="/usr/bin/chromium is not installed (apt-get install chromium); the console's"
    " browser test needs it (GATEWAY_TEST_REQUIRE_BACKENDS=1 makes this a failure)",
)

LOOPBACK_HOOKS = """
[webhooks]
allow_http = true
allowed_private_networks = ["127.0.0.0/8"]
poll_interval_s = 0.1

[[models]]
id = "ha"
strategy = "weighted"
input_usd_per_mtok = 1
output_usd_per_mtok = 2

[[models.deployments]]
provider = "sim"
upstream = "sim-a"

[[models.deployments]]
provider = "sim"
upstream = "sim-b"
"""


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _sign_in(page: Any, url: str, key: str) -> None:
    page.goto(f"{url}/console")
    page.get_by_label("Management or operator key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/console/overview")


def _journey(gw: Gateway, receiver: Receiver, other_org: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    # trio_asyncio (imported by the suite) fakes the asyncio policy; Playwright's own loop in
    # this thread must be a plain asyncio one (the setting is per thread under trio_asyncio).
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    expect.set_options(timeout=WAIT_MS)
    url = gw.url
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        try:
            _org_journey(browser, expect, gw, receiver, other_org)
            _operator_journey(browser, expect, gw, url, other_org)
        finally:
            browser.close()


def _org_journey(browser: Any, expect: Any, gw: Gateway, receiver: Receiver, other: str) -> None:
    url = gw.url
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    # Script errors and CSP refusals; a page answered 401/403 on purpose logs a failed load.
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda m: (
            errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )

    # A wrong key: the form again, with the reason, and no session.
    page.goto(f"{url}/console")
    expect(page).to_have_url(f"{url}/console/sign-in")
    page.keyboard.press("Tab")  # the keyboard reaches the skip link first
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.get_by_label("Management or operator key").fill("service_mgmt_not-a-real-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("was not accepted")
    _shot(page, "sign-in")
    assert context.cookies() == []

    _sign_in(page, url, gw.management_key)
    (cookie,) = context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["secure"], cookie["sameSite"]) == (
        "gateway_console",
        True,
        True,
        "Strict",
    )
    assert cookie["path"] == "/console" and gw.management_key not in cookie["value"]

    # Keys: create one, its secret shown once.
    page.get_by_role("link", name="Keys").click()
    page.get_by_label("Name", exact=True).fill("browser-key")
    page.get_by_label("Daily budget (USD, optional)").fill("5")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_label("Secret").input_value()
    assert secret.startswith("service_sk_")
    _shot(page, "keys-secret-once")
    page.reload()
    expect(page.locator("#keys")).to_contain_text("browser-key")
    assert page.locator("#new-secret").count() == 0
    assert secret not in page.content()

    # Overview open while a request is made: the live refresh shows it without a reload.
    page.get_by_role("link", name="Overview").click()
    expect(page.locator("#top-keys")).not_to_contain_text("browser-key")
    chat = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": "small",
            "stream": True,  # a stream: the operator's overview then has a time to first byte
            "messages": [{"role": "user", "content": "hello"}],
        },
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )
    assert chat.status_code == 200 and chat.text.endswith("data: [DONE]\n\n"), chat.text
    trio.from_thread.run(gw.runtime.accountant.flush)
    expect(page.locator("#top-keys")).to_contain_text("browser-key")
    expect(page.locator("[data-figure=requests-1]")).to_have_text("1")
    _shot(page, "overview")

    # Usage: the request is in today's bar of the chart.
    page.get_by_role("link", name="Usage").click()
    today = page.locator("#requests-chart rect.bar").last
    expect(today).to_have_attribute("data-value", "1")
    assert float(today.get_attribute("height") or 0) > 0
    expect(page.locator("#by-key")).to_contain_text("browser-key")
    _shot(page, "usage")

    # Disable the key: the API refuses it from then on.
    page.get_by_role("link", name="Keys").click()
    page.get_by_role("button", name="Disable browser-key").click()
    expect(page.locator("tr[data-key=browser-key] .state")).to_have_text("disabled")
    refused = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {secret}"})
    assert refused.status_code == 401
    _shot(page, "keys")

    # Webhooks: key.created reached the receiver; redeliver it from the delivery log.
    trio.from_thread.run(receiver.wait_for, 1)
    page.get_by_role("link", name="Webhooks").click()
    page.get_by_role("link", name=receiver.url).click()
    row = page.locator("#deliveries tbody tr").filter(has_text="key.created").first
    expect(row.locator(".status")).to_have_text("delivered")
    event_id = row.get_attribute("data-event")
    row.get_by_role("button", name=f"Redeliver {event_id}").click()
    expect(page.get_by_role("status").first).to_contain_text("queued again")
    arrivals = trio.from_thread.run(receiver.wait_for, 2)
    assert [a.body.count(str(event_id).encode()) > 0 for a in arrivals] == [True, True]
    _shot(page, "webhook-deliveries")

    # Another organization's data and the supervision view stay out of reach.
    response = page.goto(f"{url}/console/supervision")
    assert response is not None and response.status == 403
    expect(page.get_by_role("heading", level=1)).to_contain_text("403")
    assert page.get_by_role("link", name="Supervision").count() == 0
    page.goto(f"{url}/console/keys?org={other}")
    expect(page.locator("#keys")).to_contain_text("browser-key")
    assert "their-key" not in page.content()
    _shot(page, "org-no-supervision")
    assert not errors, errors  # no CSP violation or script error on any page
    context.close()


def _operator_journey(browser: Any, expect: Any, gw: Gateway, url: str, other: str) -> None:
    context = browser.new_context()
    page = context.new_page()
    _sign_in(page, url, OPERATOR_KEY)
    expect(page.locator("#instance")).to_contain_text("Status 2xx")
    ttfb = page.locator("#instance tr").filter(has_text="Time to first byte p50")
    expect(ttfb.locator("td")).to_have_text(re.compile(r"^[0-9.]+ ms$"))
    _shot(page, "operator-overview")
    page.get_by_role("link", name="Supervision").click()
    restarts = page.locator("tr[data-actor=crashy] .restarts")
    expect(restarts).to_have_text(re.compile(r"^\d+$"))
    assert int(restarts.inner_text()) >= 3
    expect(page.locator("tr[data-actor=crashy]")).to_contain_text("crash on purpose")
    expect(page.locator("#deployments")).to_contain_text("ha (weighted)")
    expect(page.locator("#deployments")).to_contain_text("sim/sim-b")
    _shot(page, "supervision")
    page.get_by_role("link", name="Keys").click()
    page.get_by_label("Organization").select_option(other)
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#keys")).to_contain_text("their-key")
    assert "browser-key" not in page.content()
    _shot(page, "operator-keys-other-org")
    context.close()


async def test_the_console_in_chromium(tmp_path: Path) -> None:
    async with (
        fresh_database_url("sqlite", tmp_path) as database_url,
        trio.open_nursery() as nursery,
    ):
        upstream: UpstreamServer = await nursery.start(serve_upstream)
        receiver: Receiver = await nursery.start(partial(serve_receiver, tls=None))
        toml = inference_toml(upstream.url) + LOOPBACK_HOOKS
        config = gateway_config(database_url, tmp_path, toml=toml)
        async with running_gateway(config) as gw:
            client, auth = gw.client, gw.auth()
            topup = await client.post("/v1/credits/topup", json={"amount_usd": 10}, headers=auth)
            assert topup.status_code == 200, topup.text
            hook = await client.post(
                "/v1/webhooks", json={"url": receiver.url, "events": ["key.created"]}, headers=auth
            )
            assert hook.status_code == 200, hook.text
            storage = gw.runtime.storage
            other = await storage.orgs.create("other-org")
            credential = gw.runtime.hasher.generate(CredentialKind.MANAGEMENT)
            await storage.orgs.add_management_key(other.id, credential)
            theirs = await client.post(
                "/v1/keys", json={"name": "their-key"}, headers=gw.auth(credential.value)
            )
            assert theirs.status_code == 200
            crashy = Crashy()
            await gw.runtime.supervisor.start(
                crashy,
                policy=RestartPolicy(initial_backoff=0.001, max_backoff=0.001, max_restarts=3),
            )
            await wait_until(lambda: crashy.runs >= 4)
            await trio.to_thread.run_sync(_journey, gw, receiver, other.id)
            await gw.runtime.supervisor.stop("crashy")
        nursery.cancel_scope.cancel()
