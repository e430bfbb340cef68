"""Health, metrics, the actor tree (with a crashing actor being restarted), the access log
and the OpenAPI document."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.lowlevel

from actors.supervisor import RestartPolicy
from gateway.app import create_app
from gateway.console.app import WithConsole
from gateway.web import WebApp
from gateway.web.middleware import RequestMiddleware
from tests.gateway.keys_client import create_key
from tests.gateway.test_health import Crashy
from tests.harness import OPERATOR_KEY, Gateway
from tests.waiting import wait_until


def _find(node: dict[str, object], name: str) -> dict[str, object] | None:
    if node["name"] == name:
        return node
    for child in node["children"]:  # type: ignore[attr-defined]
        found = _find(child, name)
        if found:
            return found
    return None


async def test_crashing_actor_restart_count_shows_in_admin_tree(gateway: Gateway) -> None:
    crashy = Crashy()
    await gateway.runtime.supervisor.start(
        crashy, policy=RestartPolicy(initial_backoff=0.001, max_backoff=0.001)
    )
    await wait_until(lambda: crashy.runs >= 4)
    r = await gateway.client.get("/v1/admin/actors", headers=gateway.auth(OPERATOR_KEY))
    assert r.status_code == 200
    tree = r.json()
    node = _find(tree, "crashy")
    assert node is not None
    assert int(node["restarts"]) >= 3  # type: ignore[call-overload]
    assert "crash on purpose" in str(node["last_error"])
    for name in ("last-used-recorder", "credential-epoch-watcher"):
        found = _find(tree, name)
        assert found is not None and found["state"] == "running"
        assert "inbox_depth" in found and "restarts" in found
    await gateway.runtime.supervisor.stop("crashy")


async def test_metrics_count_requests_by_route_and_status(gateway: Gateway) -> None:
    await create_key(gateway, name="m")
    await gateway.client.get("/v1/keys")  # 401
    text = (await gateway.client.get("/metrics")).text
    none = 'model="none",provider="none"'
    assert (
        f'gateway_requests_total{{method="POST",route="/v1/keys",status_class="2xx",{none}}} 1'
        in text
    )
    assert (
        f'gateway_requests_total{{method="GET",route="/v1/keys",status_class="4xx",{none}}} 1'
        in text
    )
    assert "gateway_request_duration_seconds_bucket" in text
    assert 'gateway_actor_restart_count{actor="last-used-recorder",state="running"} 0' in text


async def test_one_json_access_log_line_per_request(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="gateway.access")
    key = await create_key(gateway, name="logged", scopes=["keys:manage"])
    r = await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))

    def lines() -> list[dict[str, object]]:
        return [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]

    # The line is written just after the response went out.
    await wait_until(lambda: len(lines()) >= 2)
    await trio.sleep(0.01)
    assert len(lines()) == 2
    last = lines()[-1]
    assert last["request_id"] == r.headers["x-request-id"]
    assert last["route"] == "/v1/keys" and last["status"] == 200
    assert last["org_id"] == gateway.org_id and last["key_id"] == key["id"]
    assert last["latency_ms"] >= 0


async def test_openapi_documents_every_route_with_its_types(gateway: Gateway) -> None:
    doc = (await gateway.client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    assert set(paths["/v1/keys"]) == {"get", "post"}
    assert set(paths["/v1/keys/{key_id}"]) == {"get", "patch", "delete"}
    for path in ("/livez", "/readyz", "/healthz", "/metrics", "/v1/admin/actors", "/openapi.json"):
        assert "get" in paths[path]
    create = paths["/v1/keys"]["post"]
    schema_ref = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = doc["components"]["schemas"][schema_ref.rsplit("/", 1)[-1]]
    assert schema["required"] == ["name"]
    assert {"scopes", "rate_limit_rpm", "expires_at"} <= set(schema["properties"])
    assert {"400", "401", "403", "409"} <= set(create["responses"])
    chat = paths["/v1/chat/completions"]["post"]["responses"]
    assert {"402", "429", "502", "504"} <= set(chat)
    assert "402" in paths["/v1/credits/topup"]["post"]["responses"]
    # A secret key's rate limit applies on every route it may call (issue #19, item 9).
    for path, method in (("/v1/files", "post"), ("/v1/keys", "get"), ("/v1/webhooks", "get")):
        assert "429" in paths[path][method]["responses"], (path, method)
    assert "429" not in paths["/healthz"]["get"]["responses"]
    upload = paths["/v1/files"]["post"]["requestBody"]["content"]["multipart/form-data"]
    form = doc["components"]["schemas"][upload["schema"]["$ref"].rsplit("/", 1)[-1]]
    assert form["properties"]["file"]["format"] == "binary"
    assert set(form["required"]) == {"file", "purpose"}
    # Every route the app serves is documented.
    app_rules = {
        "/v1/chat/completions",
        "/v1/embeddings",
        "/v1/rerank",
        "/v1/models",
        "/v1/models/{model_id}",
        "/v1/keys",
        "/v1/keys/{key_id}",
        "/v1/provider_keys",
        "/v1/provider_keys/{provider_key_id}",
        "/v1/credits",
        "/v1/credits/topup",
        "/v1/credits/transactions",
        "/v1/usage",
        "/v1/billing/subscription",
        "/v1/billing/payment_methods",
        "/v1/billing/payment_methods/{payment_method_id}",
        "/v1/billing/payment_methods/{payment_method_id}/default",
        "/v1/billing/setup_intents",
        "/v1/billing/stripe/webhook",
        "/v1/webhooks",
        "/v1/webhooks/{webhook_id}",
        "/v1/webhooks/{webhook_id}/test",
        "/v1/webhooks/{webhook_id}/rotate_secret",
        "/v1/webhooks/{webhook_id}/deliveries",
        "/v1/webhooks/{webhook_id}/deliveries/{event_id}/redeliver",
        "/v1/webhooks/{webhook_id}/redeliver",
        "/v1/files",
        "/v1/files/{file_id}",
        "/v1/files/{file_id}/content",
        "/v1/audio/speech",
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/v1/images/generations",
        "/v1/images/edits",
        "/v1/images/variations",
        "/v1/images/content/{token}",
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/input_items",
        "/v1/fine_tuning/jobs",
        "/v1/fine_tuning/jobs/{job_id}",
        "/v1/fine_tuning/jobs/{job_id}/cancel",
        "/v1/fine_tuning/jobs/{job_id}/events",
        "/v1/cache/purge",
        "/v1/guardrails",
        "/v1/guardrails/{name}",
        "/livez",
        "/readyz",
        "/healthz",
        "/metrics",
        "/v1/admin/actors",
        "/v1/admin/mirrors",
        "/openapi.json",
    }
    assert app_rules == set(paths)


def _schema_of(doc: dict[str, Any], media: dict[str, Any]) -> dict[str, Any]:
    """A media type's schema, its `$ref` resolved."""
    schema: dict[str, Any] = media["schema"]
    ref = schema.get("$ref")
    if ref is not None:
        resolved: dict[str, Any] = doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]
        return resolved
    return schema


async def test_openapi_documents_every_route_the_app_serves(gateway: Gateway) -> None:
    """Built from the app's own router: a route added later is checked without editing here."""
    doc = (await gateway.client.get("/openapi.json")).json()
    app = create_app(gateway.runtime)
    assert isinstance(app, RequestMiddleware) and isinstance(app.app, WithConsole)
    assert isinstance(app.app.app, WebApp)
    operations = app.app.app.router.operations
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert documented == {(op.path, op.method.lower()) for op in operations}
    for op in operations:
        entry = doc["paths"][op.path][op.method.lower()]
        where = f"{op.method} {op.path}"
        if op.method in ("POST", "PUT", "PATCH"):
            assert op.request is not None, f"{where} takes a body but declares no type"
            body = entry["requestBody"]["content"]
            assert _schema_of(doc, next(iter(body.values()))), where
        else:
            assert "requestBody" not in entry, where
        ok = entry["responses"][str(op.success_status)]
        assert ok["content"], f"{where} has no response schema"
        for media in ok["content"].values():
            assert _schema_of(doc, media) if "schema" in media else media["itemSchema"], where
        for name in op.path_params:
            assert {"name": name, "in": "path"}.items() <= next(
                p for p in entry["parameters"] if p["name"] == name
            ).items()
    chat = doc["paths"]["/v1/chat/completions"]["post"]
    content = chat["responses"]["200"]["content"]
    assert _schema_of(doc, content["application/json"])["properties"]["object"] == {
        "enum": ["chat.completion"]
    }
    event = content["text/event-stream"]["itemSchema"]  # one event (OpenAPI 3.2)
    json_data = event["properties"]["data"]["anyOf"][1]["contentSchema"]["anyOf"][0]
    assert _schema_of(doc, {"schema": json_data})["properties"]["object"] == {
        "enum": ["chat.completion.chunk"]
    }
    request = _schema_of(doc, chat["requestBody"]["content"]["application/json"])
    assert {"model", "messages"} <= set(request["required"])
    assert {"stream", "stream_options", "max_tokens", "metadata"} <= set(request["properties"])
    assert "text/plain" in doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert doc["paths"]["/v1/admin/actors"]["get"]["description"].startswith(
        "Needs the operator key (GATEWAY_OPERATOR_KEY)"
    )
