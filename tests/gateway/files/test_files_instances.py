"""Two gateway instances sharing one database and one S3 bucket (SeaweedFS) see the same files:
uploaded on one, listed, downloaded and deleted on the other, and one quota across both."""

from __future__ import annotations

import base64
import os
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import trio

from protocol.ids import random_token
from tests.gateway.files.conftest import FilesGateway, files_gateway
from tests.gateway.files.support import PATH, content_of, upload, uploaded, usage
from tests.seaweedfs import SeaweedFS


async def test_two_instances_share_files_and_one_quota(
    database_url: str, tmp_path: Path, seaweedfs: SeaweedFS
) -> None:
    prefix = f"t{random_token(12).lower()}/"
    master_key = {"GATEWAY_MASTER_KEY": base64.b64encode(os.urandom(32)).decode()}

    def instance(name: str) -> AbstractAsyncContextManager[FilesGateway]:
        return files_gateway(
            "s3",
            database_url,
            tmp_path / name,
            seaweedfs,
            prefix=prefix,
            quota=300_000,
            env=master_key,
        )

    async with instance("a") as a, instance("b") as b:
        key = a.gw.management_key  # both instances read the same keys
        content = os.urandom(200_000)
        body = await uploaded(a, content, purpose="assistants")
        listed = (await b.client.get(PATH, headers=b.auth(key))).json()["data"]
        assert [f["id"] for f in listed] == [body["id"]]
        assert (await content_of(b, body["id"], key)).content == content

        # one quota: 200 kB are held, so 150 kB more are refused on either instance ...
        for either in (a, b):
            r = await upload(either, os.urandom(150_000), key=key)
            assert r.status_code == 403
        # ... and concurrent uploads of 60 kB on both fit only as far as the quota goes
        statuses: list[int] = []

        async def one(instance: FilesGateway) -> None:
            r = await upload(instance, os.urandom(60_000), key=key)
            statuses.append(r.status_code)

        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(one, a if i % 2 else b)
        assert statuses.count(200) == 1  # 200 + 60 fits, 200 + 120 does not
        assert await usage(a) == 260_000  # a's org: `key` is its management key

        r = await b.client.delete(f"{PATH}/{body['id']}", headers=b.auth(key))
        assert r.status_code == 200
        assert (await a.client.get(f"{PATH}/{body['id']}", headers=a.auth(key))).status_code == 404
        assert await usage(a) == 60_000
