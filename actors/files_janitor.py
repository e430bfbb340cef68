"""The files janitor: removes expired files (`vision`, after 24 hours), uploads whose process
died (their row stopped moving), generated images whose URL expired (storage/images.py; they
live in the same blob store), and the blob store's unfinished temporaries.

At its start, before the first round, what an earlier run of this process's instance slot left
(storage/instance_slot.py: that run is dead, so its uploads in progress and temporaries are
leftovers) is removed at once and logged, rather than after the staleness rules' 10 minutes
and an hour.

Every `interval_s`, in batches. A file's row goes first (in one transaction with its quota
charge), then its blob: a janitor that dies between the two leaves a blob whose data key is
gone, unreadable. Several instances may run it at once: `FileRepository.remove` deletes a row
only as it was read, so an upload that moved on, or a row another janitor took, is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from actors.base import Actor
from protocol.timefmt import now_us
from storage.blobs import BlobStore
from storage.files import FileRecord, FileRepository
from storage.images import ImageRecord, ImageRepository

log = logging.getLogger("gateway.files")

BATCH = 500


class FilesJanitor(Actor):
    def __init__(
        self,
        repo: FileRepository,
        blobs: BlobStore,
        *,
        interval_s: float = 60.0,
        stale_upload_s: float = 600.0,
        stale_temporary_s: float = 3600.0,
        batch: int = BATCH,
        name: str = "files-janitor",
        images: ImageRepository | None = None,
        owner: str | None = None,
    ) -> None:
        self.name = name
        self._repo = repo
        self._blobs = blobs
        self._images = images
        self._interval_s = interval_s
        self._stale_upload_us = round(stale_upload_s * 1_000_000)
        self._stale_temporary_s = stale_temporary_s
        self._batch = batch
        self._owner = owner
        self._started_us = now_us()
        self.leftovers = 0
        self.expired = 0
        self.abandoned = 0
        self.temporaries = 0
        self.expired_images = 0
        self.runs = 0

    def statistics(self) -> dict[str, object]:
        return {
            "leftovers": self.leftovers,
            "expired": self.expired,
            "abandoned_uploads": self.abandoned,
            "temporaries": self.temporaries,
            "expired_images": self.expired_images,
            "runs": self.runs,
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if self._owner is not None and not self.runs:  # not again on a restart of this actor
            await self.remove_leftovers(self._owner)
        while True:
            await self.sweep_once()
            await trio.sleep(self._interval_s)

    async def sweep_once(self, now: int | None = None) -> None:
        """One round; `now` (µs) for tests, else the wall clock."""
        now = now_us() if now is None else now
        stale_before = now - self._stale_upload_us
        self.expired += await self._drain(lambda: self._repo.expired(now=now, limit=self._batch))
        self.abandoned += await self._drain(
            lambda: self._repo.stale_uploads(before=stale_before, limit=self._batch)
        )
        if self._images is not None:
            self.expired_images += await self._drain_images(self._images, now)
        self.temporaries += await self._blobs.remove_stale(self._stale_temporary_s)
        self.runs += 1

    async def remove_leftovers(self, owner: str) -> None:
        """Uploads and temporaries `owner`'s earlier run left (begun before this actor)."""
        before = self._started_us
        keys: list[str] = []

        async def fetch() -> list[FileRecord]:
            batch = await self._repo.leftovers(owner=owner, before=before, limit=self._batch)
            keys.extend(record.blob_key for record in batch)
            return batch

        uploads = await self._drain(fetch)
        temporaries = await self._blobs.remove_unfinished(keys, started_before=before / 1e6)
        self.leftovers += uploads
        if uploads or temporaries:
            log.warning(
                "removed what this instance (%s) left unfinished when it last stopped:"
                " %d uploads in progress, %d unfinished blob writes",
                owner,
                uploads,
                temporaries,
            )

    async def _drain(self, fetch: Callable[[], Awaitable[list[FileRecord]]]) -> int:
        """Remove batch after batch until one comes back short (or removes nothing)."""
        total = 0
        while True:
            batch = await fetch()
            removed = await self._remove(batch)
            total += removed
            if len(batch) < self._batch or not removed:
                return total

    async def _drain_images(self, images: ImageRepository, now: int) -> int:
        """Expired images, batch after batch: the row (and with it the data key) first."""
        total = 0
        while True:
            batch = await images.expired(now=now, limit=self._batch)
            removed = 0
            for record in batch:
                if await images.remove(record):
                    removed += 1
                    await self._delete_blob(record)
            total += removed
            if len(batch) < self._batch or not removed:
                return total

    async def _delete_blob(self, record: ImageRecord) -> None:
        try:
            await self._blobs.delete(record.blob_key)
        except Exception:  # its data key is gone with the row: unreadable either way
            log.exception("image %s: blob %s not deleted", record.id, record.blob_key)

    async def _remove(self, records: list[FileRecord]) -> int:
        removed = 0
        for record in records:
            if not await self._repo.remove(record):
                continue
            removed += 1
            try:
                await self._blobs.delete(record.blob_key)
            except Exception:  # its data key is gone with the row: unreadable either way
                log.exception("file %s: blob %s not deleted", record.id, record.blob_key)
        return removed
