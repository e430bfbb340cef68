"""Master-key rotation with real files: uploaded under the old key on either store, the key
rotated by the admin command, and a gateway started with the new key downloads every file
byte-identical — the blobs untouched — while the old key opens nothing any more."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from gateway.keyring.command import rotate_command
from protocol.errors import SecretBoxError
from protocol.secretbox import FILE_KEYS, SecretBox, unwrap_data_key
from tests.gateway.files.conftest import files_gateway
from tests.gateway.files.support import chat_jsonl, content_of, uploaded


async def test_rotation_rewraps_file_keys_and_every_file_still_downloads(
    store_kind: str, database_url: str, tmp_path: Path, s3_server: Any
) -> None:
    old, new = os.urandom(32), os.urandom(32)
    prefix = f"rot{os.urandom(4).hex()}/"  # both gateways see the same objects
    contents = {
        "fine-tune": chat_jsonl(40),
        "user_data": os.urandom(200_000),
        "assistants": os.urandom(70_000),
    }
    async with files_gateway(
        store_kind,
        database_url,
        tmp_path / "data",
        s3_server,
        env={"GATEWAY_MASTER_KEY": base64.b64encode(old).decode()},
        prefix=prefix,
    ) as before:
        key = before.gw.management_key
        ids = {
            purpose: (await uploaded(before, content, purpose=purpose))["id"]
            for purpose, content in contents.items()
        }
        blobs_before = await before.stored()
        config = before.gw.runtime.config

    assert (
        await rotate_command(config, {"GATEWAY_NEW_MASTER_KEY": base64.b64encode(new).decode()})
        == 0
    )

    async with files_gateway(
        store_kind,
        database_url,
        tmp_path / "data",
        s3_server,
        env={"GATEWAY_MASTER_KEY": base64.b64encode(new).decode()},
        prefix=prefix,
    ) as after:
        for purpose, file_id in ids.items():
            r = await content_of(after, file_id, key)  # API keys survive the rotation too
            assert r.status_code == 200, r.text
            assert r.content == contents[purpose]
        assert await after.stored() == blobs_before  # content untouched: only keys re-wrapped
        repo = after.gw.runtime.storage.files
        for file_id in ids.values():
            record = await repo.get(before.gw.org_id, file_id, now=0)
            assert record is not None
            context = (record.org_id, record.id)
            unwrap_data_key(SecretBox.for_purpose(new, FILE_KEYS), record.data_key_sealed, context)
            try:
                unwrap_data_key(
                    SecretBox.for_purpose(old, FILE_KEYS), record.data_key_sealed, context
                )
            except SecretBoxError:
                pass
            else:
                raise AssertionError("the old master key still opens a file's data key")
