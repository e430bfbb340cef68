"""Paths and query strings as a hostile client writes them, over raw sockets on both storage
backends (where ids reach storage) and both HTTP servers (where framing of the URL matters).

The rules (docs/api.md, "Paths and query strings"; docs/decisions.md):
- routing is on the raw path: segments are split on a literal `/` only and each segment is
  percent-decoded afterwards, so `%2F` is never a separator (404);
- a path parameter holding a control character or invalid UTF-8 after decoding can name no
  object: 404, before anything reaches storage;
- a query value with a control character or invalid UTF-8, an empty value (`?limit=`) or a
  parameter given twice is 400 naming the parameter; parameters a route does not declare are
  ignored.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.gateway.rawhttp import Raw
from tests.harness import Gateway, gateway_config, running_gateway


async def call(
    gw: Gateway, target: str, *, method: str = "GET", key: str | None = None
) -> tuple[int, dict[str, Any]]:
    """One request with `target` sent byte for byte as written, on a new connection."""
    raw = await Raw.connect(gw.url)
    try:
        await raw.stream.send_all(
            f"{method} {target} HTTP/1.1\r\nhost: t\r\nauthorization: Bearer "
            f"{key or gw.management_key}\r\nconnection: close\r\n\r\n".encode()
        )
        with trio.fail_after(10):
            status, head, body = await raw.response()
    finally:
        await raw.aclose()
    assert status is not None, target
    is_json = b"content-type: application/json" in head.lower()
    return status, json.loads(body) if is_json else {"bytes": body}


def error_of(answer: dict[str, Any]) -> dict[str, Any]:
    error = answer.get("error")
    assert isinstance(error, dict), answer
    assert set(error) == {"message", "type", "param", "code"}, error
    return error


# Every templated route that takes an id, with control characters, invalid UTF-8 and an
# encoded slash in the id. Today they reached storage (PostgreSQL: 500
# CharacterNotInRepertoireError; SQLite: a lookup of a garbled id).
ID_ROUTES = [
    ("GET", "/v1/keys/key_{}x"),
    ("PATCH", "/v1/keys/key_{}x"),
    ("DELETE", "/v1/keys/key_{}x"),
    ("GET", "/v1/files/file_{}x"),
    ("GET", "/v1/files/file_{}x/content"),
    ("DELETE", "/v1/files/file_{}x"),
    ("GET", "/v1/responses/resp_{}x"),
    ("GET", "/v1/responses/resp_{}x/input_items"),
    ("DELETE", "/v1/responses/resp_{}x"),
    ("GET", "/v1/webhooks/wh_{}x"),
    ("GET", "/v1/webhooks/wh_{}x/deliveries"),
    ("GET", "/v1/fine_tuning/jobs/ftjob_{}x"),
    ("GET", "/v1/fine_tuning/jobs/ftjob_{}x/events"),
    ("POST", "/v1/fine_tuning/jobs/ftjob_{}x/cancel"),
    ("GET", "/v1/provider_keys/pk_{}x"),
    ("DELETE", "/v1/provider_keys/pk_{}x"),
    ("GET", "/v1/models/ft:tiny:acme:{}x"),
    ("DELETE", "/v1/models/ft:tiny:acme:{}x"),
    ("GET", "/v1/images/content/img{}x"),
]
BAD_SEGMENT_BYTES = ["%00", "%01", "%0a", "%1F", "%7f", "%C2%85", "%ff", "%c0%af", "%ed%a0%80"]


async def test_a_control_character_or_invalid_utf8_in_a_path_id_is_404(gateway: Gateway) -> None:
    wrong = []
    for method, template in ID_ROUTES:
        for bad in BAD_SEGMENT_BYTES:
            target = template.format(bad)
            status, answer = await call(gateway, target, method=method)
            if status != 404 or error_of(answer)["type"] != "not_found_error":
                wrong.append(f"{method} {target}: {status} {answer}")
    assert not wrong, "\n".join(wrong)


async def test_an_id_404_names_the_parameter(gateway: Gateway) -> None:
    status, answer = await call(gateway, "/v1/keys/key_%00x")
    assert status == 404
    error = error_of(answer)
    assert error["param"] == "key_id" and error["code"] == "not_found"
    assert "\x00" not in error["message"]


async def _upload(gw: Gateway) -> str:
    r = await gw.client.post(
        "/v1/files",
        headers=gw.auth(),
        data={"purpose": "user_data"},
        files={"file": ("a.txt", b"hello", "text/plain")},
    )
    assert r.status_code == 200, r.text
    file_id: str = r.json()["id"]
    return file_id


async def test_an_encoded_slash_is_not_a_path_separator(gateway: Gateway) -> None:
    file_id = await _upload(gateway)
    assert (await call(gateway, f"/v1/files/{file_id}/content"))[0] == 200
    key = (await gateway.client.post("/v1/keys", json={"name": "k"}, headers=gateway.auth())).json()
    assert (await call(gateway, f"/v1/keys/{key['id']}"))[0] == 200
    for target in (
        f"/v1/files/{file_id}%2Fcontent",
        f"/v1/files/{file_id}%2fcontent",
        f"/v1/keys%2F{key['id']}",
        "/v1%2Fadmin%2Factors",
        "/v1%2Fkeys",
        "/v1/files%2F",
    ):
        status, answer = await call(gateway, target)
        assert status == 404, (target, answer)
        assert error_of(answer)["type"] == "not_found_error"


async def test_percent_encoded_plain_characters_still_route(gateway: Gateway) -> None:
    # RFC 3986 6.2.2.2: %65 is "e"; decoding a segment is not what made %2F dangerous.
    status, answer = await call(gateway, "/v1/k%65ys")
    assert status == 200, answer
    file_id = await _upload(gateway)
    quoted = file_id.replace("_", "%5F")
    assert quoted != file_id
    status, answer = await call(gateway, f"/v1/files/{quoted}")
    assert (status, answer["id"]) == (200, file_id)


LIST_ROUTES = [
    ("/v1/files", ("limit", "after", "order", "purpose")),
    ("/v1/keys", ("limit", "offset", "active")),
    ("/v1/webhooks", ("limit", "after")),
    ("/v1/fine_tuning/jobs", ("limit", "after")),
    ("/v1/credits/transactions", ("limit", "offset", "type", "start_date", "end_date")),
]


async def test_bad_query_values_are_400_naming_the_parameter(gateway: Gateway) -> None:
    wrong = []
    for path, params in LIST_ROUTES:
        for name in params:
            for value in ("", "x%00y", "%01", "a%7f", "%ff", "%c0%af", "a%0d%0ab"):
                target = f"{path}?{name}={value}"
                status, answer = await call(gateway, target)
                if status != 400 or error_of(answer)["param"] != name:
                    wrong.append(f"{target}: {status} {answer}")
            # Without "=": the same as empty.
            status, answer = await call(gateway, f"{path}?{name}")
            if status != 400 or error_of(answer)["param"] != name:
                wrong.append(f"{path}?{name}: {status} {answer}")
    assert not wrong, "\n".join(wrong)


async def test_a_query_parameter_given_twice_is_400(gateway: Gateway) -> None:
    status, answer = await call(gateway, "/v1/files?limit=1&limit=100")
    assert status == 400
    error = error_of(answer)
    assert error["param"] == "limit" and "more than once" in error["message"]
    status, answer = await call(gateway, "/v1/files?after=file_a&order=asc&after=file_b")
    assert (status, error_of(answer)["param"]) == (400, "after")


async def test_a_cursor_with_nul_on_the_input_items_route_is_400(gateway: Gateway) -> None:
    for name in ("after", "before"):
        status, answer = await call(gateway, f"/v1/responses/resp_x/input_items?{name}=msg_%00")
        assert (status, error_of(answer)["param"]) == (400, name)


async def test_undeclared_query_parameters_are_ignored(gateway: Gateway) -> None:
    status, answer = await call(gateway, "/v1/files?limit=2&foo=&bar=1&bar=2&_=")
    assert status == 200, answer
    status, answer = await call(gateway, "/v1/files?limit=2&&order=asc&")
    assert status == 200, answer
    # `+` is a space in a query (HTML forms): not a valid order.
    status, answer = await call(gateway, "/v1/files?order=a+sc")
    assert (status, error_of(answer)["param"]) == (400, "order")


# --- both HTTP servers -----------------------------------------------------------------------


@pytest.fixture(params=["builtin", "hypercorn"])
async def served(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> AsyncIterator[Gateway]:
    config = gateway_config(
        database_url, tmp_path, toml=f'[server]\nhttp_server = "{request.param}"\n'
    )
    async with running_gateway(config) as gw:
        yield gw


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_raw_path_routing_on_both_servers(served: Gateway) -> None:
    file_id = await _upload(served)
    assert (await call(served, f"/v1/files/{file_id}/content"))[0] == 200
    assert (await call(served, f"/v1/files/{file_id}%2Fcontent"))[0] == 404
    assert (await call(served, "/v1%2Fadmin%2Factors"))[0] == 404
    assert (await call(served, "/v1/keys/key_%00x"))[0] == 404
    assert (await call(served, "/v1/keys/key_%ff"))[0] == 404
    assert (await call(served, "/v1/k%65ys"))[0] == 200
    assert (await call(served, "/v1/files?limit="))[0] == 400
