"""Helpers for tests that drive the Keys API."""

from __future__ import annotations

from typing import Any

from tests.harness import Gateway


async def create_key(gw: Gateway, auth_key: str | None = None, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "test key")
    r = await gw.client.post("/v1/keys", json=body, headers=gw.auth(auth_key))
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def error_of(response: Any) -> dict[str, Any]:
    """The OpenAI-shaped error body, checked for shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert response.headers["x-request-id"].startswith("req_")
    error: dict[str, Any] = body["error"]
    return error
