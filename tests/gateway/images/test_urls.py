"""Image URLs: a capability that needs no credential while it lives (and ignores one given),
serves exactly the provider's PNG with nosniff, is stored encrypted, stops working after its
configured lifetime (404, the same as an unknown token), and is removed by the janitor."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import httpx

from actors.files_janitor import FilesJanitor
from bench.upstream.image_routes import image_for
from gateway.files.area import FilesArea
from protocol.credentials import CredentialKind
from protocol.timefmt import now_us
from services.images import token_hash
from tests.gateway.images.support import error_of, generate, images_rig
from tests.gateway.keys_client import create_key
from tests.waiting import wait_until_async


async def test_a_url_works_without_credentials_and_serves_the_png(
    database_url: str, tmp_path: Path
) -> None:
    async with images_rig(database_url, tmp_path) as rig:
        r = await generate(rig, {"model": "dalle2", "prompt": "an owl"})
        url = r.json()["data"][0]["url"]
        token = urlsplit(url).path.rsplit("/", 1)[1]
        assert len(token) == 43  # ~256 random bits: not the row id
        async with httpx.AsyncClient() as anonymous:  # no credential at all
            got = await anonymous.get(url)
        assert got.status_code == 200
        assert got.content == image_for("an owl", 0)
        assert got.headers["content-type"] == "image/png"
        assert got.headers["x-content-type-options"] == "nosniff"
        # Another organization's credential is neither needed nor looked at, nor a bad one.
        runtime = rig.gateway.runtime
        other = await runtime.storage.orgs.create("other")
        credential = runtime.hasher.generate(CredentialKind.MANAGEMENT)
        await runtime.storage.orgs.add_management_key(other.id, credential)
        for bearer in (credential.value, "sk-nonsense"):
            seen = await rig.gateway.client.get(url, headers={"Authorization": f"Bearer {bearer}"})
            assert seen.status_code == 200 and seen.content == got.content
        # The row holds the token's hash only.
        row = await rig.gateway.runtime.storage.images.by_token(token_hash(token), now=now_us())
        assert row is not None and row.org_id == rig.gateway.org_id
        assert token not in row.token_hash and token not in row.id


async def test_unknown_and_malformed_tokens_are_404(database_url: str, tmp_path: Path) -> None:
    async with images_rig(database_url, tmp_path) as rig:
        for token in ("A" * 43, "short", "%2e%2e", "A" * 44):
            r = await rig.gateway.client.get(f"/v1/images/content/{token}")
            assert r.status_code == 404, token
            assert error_of(r)["type"] == "not_found_error"


async def test_the_png_is_stored_encrypted(database_url: str, tmp_path: Path) -> None:
    async with images_rig(database_url, tmp_path) as rig:
        r = await generate(rig, {"model": "dalle2", "prompt": "a secret garden", "n": 2})
        assert r.status_code == 200
        pngs = [image_for("a secret garden", i) for i in range(2)]
        stored = _stored_files(tmp_path)  # blobs, the database, its WAL
        assert any("images" in str(path) for path in stored)
        for path, content in stored.items():
            for png in pngs:
                assert png not in content, path
                assert png[16:40] not in content, path  # not even the IHDR onwards


def _stored_files(root: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}


async def test_urls_expire_after_the_configured_lifetime_and_the_janitor_removes_them(
    database_url: str, tmp_path: Path
) -> None:
    async with images_rig(database_url, tmp_path, lifetime_s=1) as rig:
        runtime = rig.gateway.runtime
        r = await generate(rig, {"model": "dalle2", "prompt": "a moth"})
        url = r.json()["data"][0]["url"]
        token = urlsplit(url).path.rsplit("/", 1)[1]
        record = await runtime.storage.images.by_token(token_hash(token), now=now_us())
        assert record is not None
        assert record.expires_at - record.created_at == 1_000_000
        assert (await rig.gateway.client.get(url)).status_code == 200

        async def expired() -> bool:
            return (await rig.gateway.client.get(url)).status_code == 404

        await wait_until_async(expired, limit_s=5)
        assert await runtime.area(FilesArea).store.blobs.exists(
            record.blob_key
        )  # until the janitor runs
        janitor = FilesJanitor(
            runtime.storage.files,
            runtime.area(FilesArea).store.blobs,
            images=runtime.storage.images,
        )
        await janitor.sweep_once()
        assert janitor.statistics()["expired_images"] == 1
        assert await runtime.storage.images.count() == 0
        assert not await runtime.area(FilesArea).store.blobs.exists(record.blob_key)


async def test_public_base_url_is_the_base_of_image_urls(database_url: str, tmp_path: Path) -> None:
    async with images_rig(
        database_url, tmp_path, GATEWAY_PUBLIC_BASE_URL="https://img.example.com"
    ) as rig:
        r = await generate(rig, {"model": "dalle2", "prompt": "a"})
        assert r.json()["data"][0]["url"].startswith("https://img.example.com/v1/images/content/")


async def test_without_a_public_base_url_the_host_header_is_used_once_valid(
    database_url: str, tmp_path: Path
) -> None:
    async with images_rig(database_url, tmp_path) as rig:
        r = await rig.gateway.client.post(
            "/v1/images/generations",
            json={"model": "dalle2", "prompt": "a"},
            headers={**rig.gateway.auth(rig.key), "host": "gw.example.org:8443"},
        )
        assert r.json()["data"][0]["url"].startswith("http://gw.example.org:8443/v1/images/")
        before = len(rig.upstream.requests)
        bad = await rig.gateway.client.post(
            "/v1/images/generations",
            json={"model": "dalle2", "prompt": "a"},
            headers={**rig.gateway.auth(rig.key), "host": "evil.example/x?y"},
        )
        assert bad.status_code == 400 and error_of(bad)["param"] == "response_format"
        assert len(rig.upstream.requests) == before
        b64 = await rig.gateway.client.post(
            "/v1/images/generations",
            json={"model": "dalle2", "prompt": "a", "response_format": "b64_json"},
            headers={**rig.gateway.auth(rig.key), "host": "evil.example/x?y"},
        )
        assert b64.status_code == 200


async def test_the_url_needs_no_scope_but_generating_does(
    database_url: str, tmp_path: Path
) -> None:
    async with images_rig(database_url, tmp_path) as rig:
        chat_only = (await create_key(rig.gateway, name="c", scopes=["chat:completions"]))["key"]
        r = await generate(rig, {"model": "dalle2", "prompt": "a"}, key=chat_only)
        assert r.status_code == 403
