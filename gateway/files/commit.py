"""The last step of an upload (routes.py): making the file `processed` only while its client is
still there, and once per `Idempotency-Key`.

A client that gave up (a timeout on its side) while the gateway validated and committed its
upload never learns the file's id. So the commit runs beside a watch on the connection: if the
client is known to have left by the time the commit is done, the file is deleted again (row,
quota charge, blob) and nothing is answered; the client can only have left after that point
(its answer was on its way) for the file to stay. For that last gap, and for clients that
retry, `Idempotency-Key`: the same key with the same upload (purpose, filename, content)
answers the same file object again (`Idempotent-Replayed: true`) and stores nothing more; the
key with another upload is 409 `idempotency_key_reused`, and while the first is still being
committed 409 `idempotency_in_progress`. Keys are kept 24 hours, as top-ups' are.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable

import msgspec
import trio

from gateway.errors import ClientDisconnected
from gateway.files.upload import Upload
from gateway.web import Request
from gateway.web.idempotency import stored_response
from protocol.files.api import FileObject
from protocol.timefmt import now_us
from services.files import FileStore
from storage.files import FileRecord
from storage.idempotency import COMPLETED, IdempotencyRepository

log = logging.getLogger("gateway.files")

IN_PROGRESS_TTL_US = 2 * 60 * 1_000_000  # a claim whose instance died frees itself
KEPT_US = 24 * 3600 * 1_000_000
CLEANUP_TIMEOUT_S = 30.0


async def complete_while_connected(
    request: Request, store: FileStore, upload: Upload, purpose: str
) -> FileRecord:
    """`upload.complete(purpose)`; ClientDisconnected (and no file) if the client left."""
    gone = False

    async def watch() -> None:
        nonlocal gone
        message = await request.receive()  # after the whole body: waits for the client to leave
        gone = message["type"] == "http.disconnect"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        record = await upload.complete(purpose)
        nursery.cancel_scope.cancel()
    if gone:
        await _undo(store, record)
        raise ClientDisconnected
    return record


async def _undo(store: FileStore, record: FileRecord) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_TIMEOUT_S):
        removed = await store.repo.delete(record.org_id, record.id, now=now_us())
        if removed is not None:
            try:
                await store.delete_blob(removed.blob_key)
            except Exception:  # the data key went with the row: unreadable already
                log.exception("file %s: blob not deleted (unreadable)", record.id)
    log.info("upload %s: the client left before its answer; the file was removed", record.id)


def fingerprint(purpose: str, filename: str, content_sha256: str) -> str:
    """What makes two uploads under one `Idempotency-Key` the same request."""
    return hashlib.sha256(f"{purpose}\0{filename}\0{content_sha256}".encode()).hexdigest()


async def once_per_key(
    idempotency: IdempotencyRepository,
    org_id: str,
    key: str,
    request_fingerprint: str,
    commit: Callable[[], Awaitable[FileObject]],
) -> tuple[FileObject, bool]:
    """`commit()` under `key` (the `Idempotency-Key`), or the file it made before; True when
    replayed."""
    stored_key = "file:" + key  # its own namespace beside top-ups' and chat's keys
    claim = await idempotency.claim(
        org_id, stored_key, request_fingerprint, now_us=now_us(), ttl_us=IN_PROGRESS_TTL_US
    )
    if not claim.won:
        return msgspec.json.decode(stored_response(claim, "upload"), type=FileObject), True
    try:
        file = await commit()
        await idempotency.finish(
            org_id,
            stored_key,
            COMPLETED,
            msgspec.json.encode(file).decode(),
            expires_us=now_us() + KEPT_US,
        )
    except BaseException:  # a retry runs anew (the file, if any, was removed or stays listed)
        with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_TIMEOUT_S):
            await idempotency.release(org_id, stored_key)
        raise
    return file, False
