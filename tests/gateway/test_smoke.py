from tests.harness import Gateway


async def test_healthz_and_unknown_route(gateway: Gateway) -> None:
    r = await gateway.client.get("/healthz")
    assert r.status_code == 200, r.text
    r = await gateway.client.get("/v1/nope")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "unknown_url"
    assert r.headers["x-request-id"].startswith("req_")
