"""A JSON body that is not valid UTF-8 is a 400 `invalid_json` on every JSON route, over real
HTTP, wherever the bad bytes sit: in a field the gateway decodes (it was a 500) or in one it
relays untouched (it reached the provider). Nothing is sent upstream."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.gateway.keys_client import error_of
from tests.inference import Rig, inference_rig

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])  # about HTTP, not storage

# Invalid UTF-8: a byte that never occurs, an overlong `/`, a surrogate encoded in UTF-8.
BAD = [b"a\xffb", b"\xc0\xaf", b"\xed\xa0\x80"]


def _bodies(bad: bytes) -> list[bytes]:
    """The bad bytes in a decoded field, a relayed one, a key, and a value of the body
    every JSON route has in common: wherever they are, the body is refused."""
    return [
        b'{"name":"' + bad + b'","model":"' + bad + b'"}',
        b'{"model":"small","messages":[{"role":"user","content":"' + bad + b'"}]}',
        b'{"model":"haiku","messages":[{"role":"user","content":"' + bad + b'"}],"max_tokens":5}',
        b'{"model":"embed","input":"x","user":"' + bad + b'"}',
        b'{"' + bad + b'":1}',
    ]


async def _json_routes(rig: Rig) -> list[tuple[str, str, bool]]:
    """(method, path, whether a secret key may call it) of every JSON route."""
    doc = (await rig.gateway.client.get("/openapi.json")).json()
    routes = []
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody")
            if body is not None and "application/json" in body["content"]:
                secret = operation.get("description") != "Needs a management key."
                routes.append((method.upper(), re.sub(r"\{[^}]+\}", "x_1", path), secret))
    return routes


@sqlite_only
async def test_invalid_utf8_is_400_invalid_json_on_every_json_route(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path) as rig:
        routes = await _json_routes(rig)
        assert ("POST", "/v1/chat/completions", True) in routes and len(routes) > 15
        for method, path, secret in routes:
            for key in (
                (rig.gateway.management_key, rig.key) if secret else (rig.gateway.management_key,)
            ):
                for bad in BAD:
                    for body in _bodies(bad):
                        r = await rig.gateway.client.request(
                            method,
                            path,
                            content=body,
                            headers={
                                "authorization": f"Bearer {key}",
                                "content-type": "application/json",
                            },
                        )
                        assert r.status_code == 400, (method, path, body, r.text)
                        error = error_of(r)
                        assert error["code"] == "invalid_json", (method, path, body, error)
                        assert "UTF-8" in error["message"]
        assert rig.upstream.requests == []  # nothing was relayed, to any provider
        # The same requests with valid bytes are relayed: the refusal was the bytes.
        r = await rig.chat({"model": "haiku", "messages": [{"role": "user", "content": "é"}]})
        assert r.status_code == 200, r.text
        r = await rig.chat({"model": "small", "messages": [{"role": "user", "content": "é"}]})
        assert r.status_code == 200, r.text
