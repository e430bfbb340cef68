"""Signing in to the console over plain httpx, for the HTTP-level tests.

The session cookie is `Secure`: Python's cookie jar never sends it over http://, so the tests
carry it themselves (`cookie`), as a browser on a secure context (127.0.0.1) does."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

from tests.harness import Gateway

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Signed:
    gateway: Gateway
    cookie: str  # "gateway_console=<id>"
    csrf: str

    @property
    def headers(self) -> dict[str, str]:
        return {"cookie": self.cookie}

    async def get(self, path: str, **params: str) -> httpx.Response:
        return await self.gateway.client.get(path, params=params, headers=self.headers)

    async def post(
        self, path: str, form: dict[str, str] | None = None, *, csrf: bool = True, **headers: str
    ) -> httpx.Response:
        data = dict(form or {})
        if csrf:
            data.setdefault("csrf", self.csrf)
        return await self.gateway.client.post(path, data=data, headers={**self.headers, **headers})


async def sign_in(gw: Gateway, key: str) -> Signed:
    r = await gw.client.post("/console/sign-in", data={"key": key})
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/console/overview"
    cookie = r.headers["set-cookie"].split(";")[0]
    page = await gw.client.get("/console/overview", headers={"cookie": cookie})
    assert page.status_code == 200, page.text
    found = _CSRF.search(page.text)
    assert found is not None
    return Signed(gw, cookie, found.group(1))
