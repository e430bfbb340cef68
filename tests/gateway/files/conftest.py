"""`files_gw`: a gateway over real HTTP on every (database, blob store) pair — SQLite and
PostgreSQL, the local store under the data dir and a bucket of the session's SeaweedFS (one per
test) — with `stored()`, everything the store holds, to show what an upload left behind."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.ids import random_token
from tests.harness import Gateway, gateway_config, running_gateway
from tests.seaweedfs import SeaweedFS, seaweedfs

__all__ = ["seaweedfs"]

QUOTA = 64 * 1024 * 1024  # the free plan's quota in these tests


@dataclass
class FilesGateway:
    gw: Gateway
    kind: str  # "local" or "s3"
    # Every blob the store holds (name -> bytes), temporaries and unfinished uploads included.
    stored: Callable[[], Awaitable[dict[str, bytes]]]
    data_dir: Path

    @property
    def client(self) -> Any:
        return self.gw.client

    def auth(self, key: str | None = None) -> dict[str, str]:
        return self.gw.auth(key)


def files_toml(kind: str, server: SeaweedFS | None, bucket: str, quota: int) -> str:
    toml = f"[files]\nfree_quota_bytes = {quota}\n"
    if kind == "s3":
        assert server is not None
        toml += (
            f'store = "s3"\ns3_endpoint_url = "{server.endpoint_url}"\n'
            f's3_bucket = "{bucket}"\ns3_region = "{server.region}"\n'
        )
    return toml


def s3_env(server: SeaweedFS | None) -> dict[str, str]:
    if server is None:
        return {}
    return {
        "AWS_ACCESS_KEY_ID": server.access_key_id,
        "AWS_SECRET_ACCESS_KEY": server.secret_access_key,
    }


def lister(
    kind: str, data_dir: Path, server: SeaweedFS | None, bucket: str
) -> Callable[[], Awaitable[dict[str, bytes]]]:
    async def stored() -> dict[str, bytes]:
        def local() -> dict[str, bytes]:
            root = data_dir / "blobs"
            if not root.exists():
                return {}
            return {
                str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()
            }

        def s3() -> dict[str, bytes]:
            assert server is not None
            client = server.client()
            out = {}
            listing = client.list_objects_v2(Bucket=bucket)
            for item in listing.get("Contents", []):
                body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                out[item["Key"]] = body
            for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
                out["upload:" + upload["Key"]] = b""
            return out

        return await trio.to_thread.run_sync(local if kind == "local" else s3)

    return stored


@asynccontextmanager
async def files_gateway(
    kind: str,
    database_url: str,
    data_dir: Path,
    server: SeaweedFS | None,
    *,
    quota: int = QUOTA,
    bucket: str | None = None,
    extra_toml: str = "",
) -> AsyncIterator[FilesGateway]:
    bucket = bucket or f"files-{random_token(10).lower()}"
    toml = files_toml(kind, server, bucket, quota) + extra_toml
    config = gateway_config(database_url, data_dir, toml=toml, **s3_env(server))
    try:
        async with running_gateway(config) as gw:
            yield FilesGateway(gw, kind, lister(kind, data_dir, server, bucket), data_dir)
    finally:
        if server is not None:
            await trio.to_thread.run_sync(drop_bucket, server, bucket)


def drop_bucket(server: SeaweedFS, bucket: str) -> None:
    """Delete the test's bucket and all it holds: SeaweedFS gives each bucket its own volumes,
    and the session's server has room for the volumes of only a few buckets."""
    client = server.client()
    try:
        listing = client.list_objects_v2(Bucket=bucket)
    except client.exceptions.NoSuchBucket:
        return
    for item in listing.get("Contents", []):
        client.delete_object(Bucket=bucket, Key=item["Key"])
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    client.delete_bucket(Bucket=bucket)


@pytest.fixture(params=["local", "s3"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def s3_server(request: pytest.FixtureRequest, store_kind: str) -> SeaweedFS | None:
    if store_kind != "s3":
        return None
    server: SeaweedFS = request.getfixturevalue("seaweedfs")
    return server


@pytest.fixture
async def files_gw(
    store_kind: str, database_url: str, tmp_path: Path, s3_server: SeaweedFS | None
) -> AsyncIterator[FilesGateway]:
    async with files_gateway(store_kind, database_url, tmp_path / "data", s3_server) as fg:
        yield fg
