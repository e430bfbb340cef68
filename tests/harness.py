"""A real gateway on a loopback port, for tests that speak HTTP to it.

Each instance gets its own database (see tests/backends.py), data dir and master key, and an
organization `acme` with a management key. Talk to it with `client` (httpx over real sockets).
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import trio

from gateway.config import Config, load_config
from gateway.runtime import Runtime
from gateway.server.serve import serve_instance
from gateway.web import Routes
from protocol.credentials import CredentialKind

# The instance-wide operator credential every test instance accepts (`/v1/admin/*`).
OPERATOR_KEY = "service_op_harness-operator-key-0123456789"


@dataclass
class Gateway:
    url: str
    runtime: Runtime
    org_id: str
    management_key: str
    client: httpx.AsyncClient

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.management_key}"}


def gateway_config(
    database_url: str, data_dir: Path, *, toml: str | None = None, **env: str
) -> Config:
    """A config for a test instance; `toml` is written to a file and loaded as the config."""
    path: Path | None = None
    if toml is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / "gateway.toml"
        path.write_text(toml)
    environ: Mapping[str, str] = {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_DATA_DIR": str(data_dir),
        "GATEWAY_PORT": "0",
        "GATEWAY_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
        "GATEWAY_OPERATOR_KEY": OPERATOR_KEY,
        **env,
    }
    return load_config(path, environ=environ)


@asynccontextmanager
async def running_gateway(
    config: Config, *, extra_routes: Sequence[Routes] = (), stop: trio.Event | None = None
) -> AsyncIterator[Gateway]:
    """With `stop`, the test may start the graceful drain itself (setting it) while it still
    talks to the instance; leaving the block then waits for the drain to end."""
    stop = stop if stop is not None else trio.Event()
    async with trio.open_nursery() as nursery:
        served = await nursery.start(
            partial(serve_instance, config, shutdown_trigger=stop.wait, extra_routes=extra_routes)
        )
        storage = served.runtime.storage
        org = await storage.orgs.create(f"acme-{os.urandom(4).hex()}")
        credential = served.runtime.hasher.generate(CredentialKind.MANAGEMENT)
        await storage.orgs.add_management_key(org.id, credential)
        async with httpx.AsyncClient(base_url=served.urls[0], timeout=30) as client:
            yield Gateway(served.urls[0], served.runtime, org.id, credential.value, client)
        stop.set()
