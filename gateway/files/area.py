"""The files area: the Files API, the file store (whose blobs images keep theirs in, and which
fine-tuning reads training files from) and its janitor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

from actors.files_janitor import FilesJanitor
from gateway.area import Area
from gateway.core import Core
from gateway.files import FileStore, open_file_store
from gateway.files.routes import routes
from protocol.secretbox import FILE_KEYS


@dataclass(frozen=True, kw_only=True)
class FilesArea(Area):
    store: FileStore  # rows, encrypted blobs (local or S3), the quota


@asynccontextmanager
async def open_files(core: Core) -> AsyncIterator[FilesArea]:
    """Owns the blob store and this process's instance slot: left once every actor stopped."""
    storage = core.storage
    async with open_file_store(core.config, storage.files, core.master_key) as plain:
        # Every box under the master key refuses once the key is retired.
        store = replace(plain, box=core.box(FILE_KEYS))
        # Generated images live in the same blob store: their expiry is this janitor's too.
        await core.supervisor.start(
            FilesJanitor(store.repo, store.blobs, images=storage.images, owner=store.owner)
        )
        yield FilesArea(
            routes=routes(store, storage.orgs, core.config.files, storage.idempotency),
            store=store,
        )
