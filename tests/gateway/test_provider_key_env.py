"""A provider whose `api_key_env` names a variable that is not set: `gateway serve` says so
loudly at start (and still starts: organizations may use the provider with their own keys),
and a request that would go with the gateway's key is a 503 naming the variable, before
anything is sent upstream; with the organization's own key (BYOK) it works."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.gateway.keys_client import error_of
from tests.gateway.test_byok_inference import OWN_KEY, add_own_key, bearer, last_request
from tests.gateway.test_cli import _env, _gateway, _stop
from tests.gateway.test_metrics_workers import ROOT
from tests.inference import Rig, inference_rig
from tests.waiting import wait_until

MISSING = "GATEWAY_TEST_UNSET_PROVIDER_KEY"
MESSAGES = [{"role": "user", "content": "hello"}]


def keyed_by_env(upstream_url: str) -> str:
    return f"""
[[providers]]
name = "envkeyed"
kind = "openai"
base_url = "{upstream_url}/v1"
api_key_env = "{MISSING}"

[[models]]
id = "envsmall"
provider = "envkeyed"
upstream = "sim-small"
input_usd_per_mtok = 1
output_usd_per_mtok = 1
"""


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path, extra_toml=keyed_by_env) as r:
        yield r


async def test_the_gateways_missing_key_is_a_503_naming_the_variable(rig: Rig) -> None:
    sent_before = len(rig.upstream.requests)
    r = await rig.chat({"model": "envsmall", "messages": MESSAGES, "max_tokens": 5})
    assert r.status_code == 503, r.text
    error = error_of(r)
    assert error["code"] == "provider_key_missing"
    assert MISSING in error["message"] and "envkeyed" in error["message"]
    assert int(r.headers["retry-after"]) > 0
    assert len(rig.upstream.requests) == sent_before  # nothing went upstream
    # Other providers are not affected.
    ok = await rig.chat({"model": "small", "messages": MESSAGES, "max_tokens": 5})
    assert ok.status_code == 200, ok.text


async def test_an_orgs_own_key_still_works_without_the_gateways(rig: Rig) -> None:
    await add_own_key(rig, "envkeyed", OWN_KEY)
    r = await rig.chat({"model": "envsmall", "messages": MESSAGES, "max_tokens": 5})
    assert r.status_code == 200, r.text
    assert bearer(last_request(rig, "/v1/chat/completions")) == f"Bearer {OWN_KEY}"


async def test_serve_warns_at_start_naming_provider_and_variable(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(keyed_by_env("http://127.0.0.1:1") + "\n[server]\naccess_log = false\n")
    env = _env(tmp_path, PYTHONPATH=str(ROOT))
    env.pop(MISSING, None)
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            _gateway("serve", "--config", str(config)),
            env=env,
            cwd=tmp_path,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        await wait_until(lambda: b"providers:" in out.read_bytes() or process.poll() is not None)
        assert process.returncode is None, err.read_text()
    finally:
        assert await _stop(process) == 0
    providers = next(ln for ln in out.read_text().splitlines() if ln.startswith("providers:"))
    assert MISSING in providers and "not set" in providers, providers
    warning = err.read_text()
    assert "WARNING" in warning and MISSING in warning and "envkeyed" in warning, warning
