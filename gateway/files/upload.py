"""One upload, from the first byte of the `file` part to a `processed` row, with flat memory.

    async with Upload(store, org_id, quota, declared_length) as upload:
        await upload.receive(part, purpose, filename=label)  # purpose None: it comes later
        record = await upload.complete(purpose)

`receive` streams the part: each piece is counted (413 past the purpose's size limit, at once),
fed to the purpose's validator (protocol/files/: the first bad line is a 400 before the rest is
read), encrypted (protocol/blobcrypt.py) and written to the blob store, which commits the blob
only at the end. The quota is held before the bytes are: the upload's row is inserted first with
a reservation (the declared body length when there is one, else `RESERVE_STEP`), which grows as
the count passes it (403 `quota_exceeded` when the org has no room). `complete` sets the row to
the exact size and `processed`.

Leaving the block without `complete` — a 4xx, the client gone, a cancellation, a crash of the
store — removes everything, shielded: the unfinished blob (the writer aborts), a committed blob,
the row and its reservation. A process that dies mid-upload leaves a row the janitor removes
(`touch` keeps a live one from looking dead) and a temporary the blob store's `remove_stale`
removes; never a file the API shows.

When the form sends `purpose` after the file (curl -F in that order), the content is stored
before its validator is known; `complete` then validates it by reading it back, decrypting.
"""

from __future__ import annotations

import hashlib
import logging
import time
from contextlib import aclosing
from dataclasses import replace
from types import TracebackType

import trio

from gateway.files.form import FORM_OVERHEAD_BYTES
from gateway.web.multipart import Part
from protocol.blobcrypt import Encryptor, new_data_key
from protocol.errors import APIError, InvalidFile
from protocol.files import FileValidator, media_type, validator_for
from protocol.ids import ordered_id
from protocol.secretbox import wrap_data_key
from protocol.timefmt import now_us
from services.files import (
    VISION,
    FileStore,
    blob_key,
    expires_at,
    key_context,
)
from storage.blobs import BlobWriter
from storage.errors import QuotaExceeded
from storage.files import FileRecord, NewUpload

log = logging.getLogger("gateway.files")

RESERVE_STEP = 8 * 1024 * 1024  # the first reservation of an upload of unknown length
TOUCH_INTERVAL_S = 60.0  # how often a live upload tells the janitor so
CLEANUP_TIMEOUT_S = 30.0


def quota_exceeded(quota: int) -> APIError:
    """403 (docs/decisions.md, "Files"): the org's stored bytes, not this request, are the
    problem, and a 403 is not retried by SDKs the way a 429 is. The rest of the body is not
    read, so the connection closes."""
    return APIError(
        403,
        f"The organization's file storage quota ({quota} bytes) is reached; delete files to"
        " make room.",
        type="invalid_request_error",
        code="quota_exceeded",
        headers={"Connection": "close"},
    )


def too_large(purpose: str | None, limit: int) -> APIError:
    """The 413 of the request layer (`request_too_large`, Connection: close), saying which
    limit: `vision` files have a smaller one than the others."""
    what = "`vision` files" if purpose == VISION else "files"
    return APIError(
        413,
        f"The file is too large: {what} may hold at most {limit} bytes.",
        type="invalid_request_error",
        code="request_too_large",
        param="file",
        headers={"Connection": "close"},
    )


class Upload:
    def __init__(
        self,
        store: FileStore,
        org_id: str,
        quota: int,
        declared_length: int | None,
        *,
        digest: bool = False,
    ) -> None:
        """`digest`: also hash the content (`content_sha256`, for an `Idempotency-Key`)."""
        self._store = store
        self._org_id = org_id
        self._quota = quota
        self._declared = declared_length
        self._created_at = now_us()
        self.file_id = ordered_id("file", self._created_at)
        self._data_key = new_data_key()
        self._reserved = 0
        self._size = 0
        self._filename = ""
        self._media_type: str | None = None
        self._validated = False
        self._row = False
        self._blob_committed = False
        self._record: FileRecord | None = None
        self._digest = hashlib.sha256() if digest else None

    def __repr__(self) -> str:
        return f"<Upload {self.file_id} size={self._size} reserved={self._reserved}>"

    async def __aenter__(self) -> Upload:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._record is None:
            await self._discard()

    async def receive(self, part: Part, purpose: str | None, *, filename: str) -> None:
        """Store the `file` part's content (see the module docstring) under `filename`, the
        label `check_filename` made of the part's (never `part.filename` as sent)."""
        store = self._store
        limit = store.max_bytes(purpose)
        validator = validator_for(purpose) if purpose is not None else None
        self._filename = filename
        if self._declared is None:
            await self._begin(purpose, RESERVE_STEP, need=0)
        else:  # the form around the file is at most FORM_OVERHEAD_BYTES of the declared length
            declared = min(self._declared, limit)
            await self._begin(purpose, declared, need=max(0, declared - FORM_OVERHEAD_BYTES))
        encryptor = Encryptor(self._data_key, self.file_id)
        writer = await store.blobs.open_writer(blob_key(self._org_id, self.file_id))
        async with writer:
            touched = time.monotonic()
            async for piece in part:
                self._size += len(piece)
                if self._size > limit:
                    raise too_large(purpose, limit)
                if self._size > self._reserved:
                    await self._reserve(limit)
                    touched = time.monotonic()
                if validator is not None:
                    _feed(validator, piece)
                if self._digest is not None:
                    self._digest.update(piece)
                await _write_all(writer, encryptor.feed(piece))
                if time.monotonic() - touched > TOUCH_INTERVAL_S:
                    await store.repo.touch(self._org_id, self.file_id, now=now_us())
                    touched = time.monotonic()
            if validator is not None:
                self._media_type = _finish(validator)
                self._validated = True
            await _write_all(writer, encryptor.finish())
            await writer.commit()
            self._blob_committed = True

    @property
    def filename(self) -> str:
        return self._filename

    @property
    def content_sha256(self) -> str:
        assert self._digest is not None, "Upload(..., digest=True)"
        return self._digest.hexdigest()

    async def complete(self, purpose: str) -> FileRecord:
        """Validate (when `receive` could not yet) and make the file `processed`."""
        if not self._validated:
            limit = self._store.max_bytes(purpose)
            if self._size > limit:
                raise too_large(purpose, limit)
            self._media_type = await self._validate_stored(purpose)
        now = now_us()
        self._record = await self._store.repo.complete(
            self._org_id,
            self.file_id,
            size=self._size,
            media_type=media_type(self._media_type, self._filename),
            purpose=purpose,
            expires_at=expires_at(purpose, self._created_at),
            now=now,
        )
        return self._record

    # -- inside ---------------------------------------------------------------------------

    async def _begin(self, purpose: str | None, reserve: int, *, need: int) -> None:
        store = self._store
        upload = NewUpload(
            id=self.file_id,
            org_id=self._org_id,
            purpose=purpose or "",
            filename=self._filename,
            blob_key=blob_key(self._org_id, self.file_id),
            data_key_sealed=wrap_data_key(
                store.box, self._data_key, key_context(self._org_id, self.file_id)
            ),
            created_at=self._created_at,
            owner=store.owner,
        )
        try:
            self._reserved = await store.repo.begin_upload(
                upload, reserve=reserve, need=need, quota=self._quota
            )
        except QuotaExceeded:
            raise quota_exceeded(self._quota) from None
        self._row = True

    async def _reserve(self, limit: int) -> None:
        """Grow the reservation to cover the count: doubling, by `RESERVE_STEP` at least, and
        never past the limit (the count is refused there anyway); near the quota, by exactly
        what the count needs."""
        need = self._size - self._reserved
        want = min(max(need, RESERVE_STEP, self._reserved), limit - self._reserved)
        try:
            self._reserved += await self._store.repo.reserve_more(
                self._org_id, self.file_id, want=want, need=need, quota=self._quota, now=now_us()
            )
        except QuotaExceeded:
            raise quota_exceeded(self._quota) from None

    async def _validate_stored(self, purpose: str) -> str | None:
        validator = validator_for(purpose)
        record = await self._store.repo.uploading(self._org_id, self.file_id)
        if record is None:
            raise RuntimeError(f"upload {self.file_id} lost its row")
        # The row says 0 bytes until `complete`; the blob holds `_size`.
        chunks = await self._store.open_plaintext(replace(record, bytes=self._size))
        async with aclosing(chunks):
            async for plain in chunks:
                _feed(validator, plain)
        return _finish(validator)

    async def _discard(self) -> None:
        """Remove what the upload left, shielded (this runs on cancellation too). The row goes
        first, and the blob only if the row was still an upload's: were `complete` cancelled
        after its commit, the file is whole and stays."""
        with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_TIMEOUT_S) as scope:
            try:
                ours = not self._row or await self._store.repo.abandon(self._org_id, self.file_id)
                if self._blob_committed and ours:
                    await self._store.delete_blob(blob_key(self._org_id, self.file_id))
            except Exception:  # the store is down: the answer is the upload's own error
                log.exception("upload %s: cleanup failed; the janitor removes it", self.file_id)
        if scope.cancelled_caught:
            log.warning("upload %s: cleanup timed out; the janitor removes it", self.file_id)


def _feed(validator: FileValidator, piece: bytes) -> None:
    try:
        validator.feed(piece)
    except InvalidFile as exc:
        raise exc.api_error() from None


def _finish(validator: FileValidator) -> str | None:
    try:
        return validator.finish()
    except InvalidFile as exc:
        raise exc.api_error() from None


async def _write_all(writer: BlobWriter, chunks: list[bytes]) -> None:
    for chunk in chunks:
        await writer.write(chunk)
