"""The Files API (docs/files.md): upload (multipart, streamed), list, retrieve, download, delete.

Callers need a management key or a secret key holding `files`. Another organization's file is
indistinguishable from a missing one (404 `file_not_found`) on every route, and so is an expired
`vision` file or an upload still in progress. Uploads are validated and stored before they are
answered, so every file the API shows is `processed` (docs/decisions.md, "Files").
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Literal

from gateway.config.schema import FilesConfig
from gateway.files.commit import complete_while_connected, fingerprint, once_per_key
from gateway.files.form import FORM_LIMITS
from gateway.files.upload import Upload
from gateway.web import Operation, Request, Response, Routes, json_response
from gateway.web.multipart import Part, malformed
from gateway.web.responses import StreamResponse
from protocol import errors
from protocol.errors import BlobCorrupt
from protocol.files import PURPOSES
from protocol.files.api import FileContent, FileDeleted, FileList, FileObject, FileUpload
from protocol.files.disposition import content_disposition
from protocol.labels import check_idempotency_key
from protocol.scopes import FILES
from protocol.timefmt import now_us
from services.files import FileStore, file_corrupt
from storage.files import FileRecord
from storage.idempotency import IdempotencyRepository
from storage.orgs import OrgRepository

log = logging.getLogger("gateway.files")

_TAG = "Files"
_AUTH_ERRORS = (401, 403)
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
MAX_FILENAME_CHARS = 512
PREFETCH_BYTES = 1024 * 1024  # decrypted (so checked) before a download's answer starts


def _not_found(file_id: str) -> errors.APIError:
    return errors.not_found(f"No file with id {file_id!r}.", code="file_not_found", param="file_id")


def file_object(record: FileRecord) -> FileObject:
    return FileObject(
        id=record.id,
        bytes=record.bytes,
        filename=record.filename,
        purpose=record.purpose,
        created_at=record.created_at // 1_000_000,
        status=record.status,
    )


def check_purpose(value: str) -> str:
    if value not in PURPOSES:
        raise errors.invalid_request(
            f"Unknown purpose {value!r}; one of: {', '.join(PURPOSES)}.",
            param="purpose",
            code="invalid_purpose",
        )
    return value


def check_filename(part: Part) -> str:
    """The client's filename as a label: control characters dropped (it is echoed in
    `Content-Disposition`), at most `MAX_FILENAME_CHARS`; it never names a path."""
    if part.filename is None:
        raise malformed("The `file` part has no filename (Content-Disposition: filename=...).")
    name = "".join(c for c in part.filename if unicodedata.category(c) != "Cc").strip()
    if not name:
        raise errors.invalid_request(
            "The `file` part's filename is empty.", param="file", code="invalid_filename"
        )
    if len(name) > MAX_FILENAME_CHARS:
        raise errors.invalid_request(
            f"The filename is longer than {MAX_FILENAME_CHARS} characters.",
            param="file",
            code="invalid_filename",
        )
    return name


async def skip_field(part: Part) -> None:
    """Another field (an SDK's extra): read and dropped, but capped like a field, so the form
    around the file stays within FORM_OVERHEAD_BYTES."""
    limit = FORM_LIMITS.max_field_bytes
    async for _ in part:
        if part.size > limit:
            raise errors.invalid_request(
                f"Field '{part.name}' is longer than {limit} bytes.",
                param=part.name,
                code="field_too_large",
            )


def _duplicate(name: str) -> errors.APIError:
    return errors.invalid_request(
        f"The form has more than one `{name}` part.", param=name, code="duplicate_part"
    )


def routes(
    store: FileStore,
    orgs: OrgRepository,
    config: FilesConfig,
    idempotency: IdempotencyRepository,
) -> Routes:
    r = Routes()
    repo = store.repo

    async def quota_of(org_id: str) -> int:
        org = await orgs.get(org_id)
        return config.quota_bytes(org.plan if org is not None else "free")

    async def owned(request: Request) -> FileRecord:
        """The caller's file named in the path: 404 for anyone else's, or none."""
        assert request.principal is not None
        file_id = request.path_params["file_id"]
        record = await repo.get(request.principal.org_id, file_id, now=now_us())
        if record is None:
            raise _not_found(file_id)
        return record

    @r.operation(
        Operation(
            "POST",
            "/v1/files",
            "Upload a file (multipart: `file`, `purpose`); validated and encrypted as it streams"
            " (send `Idempotency-Key` to retry safely)",
            _TAG,
            request=FileUpload,
            request_content_type="multipart/form-data",
            response=FileObject,
            scope=FILES,
            body_limit="file",
            errors=(400, *_AUTH_ERRORS, 409, 413, 415),
        )
    )
    async def create_file(request: Request) -> Response:
        assert request.principal is not None
        org_id = request.principal.org_id
        key = request.header(b"idempotency-key")
        if key is not None:
            check_idempotency_key(key, "Idempotency-Key")
        quota = await quota_of(org_id)
        purpose: str | None = None
        seen_file = False
        async with (
            Upload(store, org_id, quota, request.content_length, digest=key is not None) as upload,
            request.multipart(FORM_LIMITS) as form,
        ):
            async for part in form:
                if part.name == "purpose":
                    if purpose is not None:
                        raise _duplicate("purpose")
                    purpose = check_purpose(await part.text())
                elif part.name == "file":
                    if seen_file:
                        raise _duplicate("file")
                    seen_file = True
                    await upload.receive(part, purpose, filename=check_filename(part))
                else:
                    await skip_field(part)
            if not seen_file:
                raise errors.invalid_request(
                    "The form has no `file` part.", param="file", code="missing_required_field"
                )
            if purpose is None:
                raise errors.invalid_request(
                    "The form has no `purpose` part.",
                    param="purpose",
                    code="missing_required_field",
                )
            checked_purpose = purpose

            async def commit() -> FileObject:
                record = await complete_while_connected(request, store, upload, checked_purpose)
                return file_object(record)

            if key is None:
                return json_response(await commit())
            request_fingerprint = fingerprint(purpose, upload.filename, upload.content_sha256)
            file, replayed = await once_per_key(
                idempotency, org_id, key, request_fingerprint, commit
            )
        headers = [(b"idempotent-replayed", b"true")] if replayed else None
        return json_response(file, headers=headers)

    @r.operation(
        Operation(
            "GET",
            "/v1/files",
            "List the organization's files",
            _TAG,
            response=FileList,
            scope=FILES,
            errors=(400, *_AUTH_ERRORS),
            query=(
                ("purpose", "string", "only files of this purpose"),
                ("limit", "integer", f"page size, default {DEFAULT_LIMIT}, max {MAX_LIMIT}"),
                ("order", "string", "asc or desc (default) by created_at"),
                ("after", "string", "the `last_id` of the previous page"),
            ),
        )
    )
    async def list_files(request: Request) -> Response:
        assert request.principal is not None
        query = request.query
        purpose = query.get("purpose") or None
        if purpose is not None:
            check_purpose(purpose)
        order = query.get("order") or "desc"
        if order not in ("asc", "desc"):
            raise errors.invalid_request("`order` must be asc or desc.", param="order")
        limit = request.query_int("limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
        page = await repo.list_for_org(
            request.principal.org_id,
            purpose=purpose,
            limit=limit,
            order=_order(order),
            after=query.get("after") or None,
            now=now_us(),
        )
        data = [file_object(record) for record in page.items]
        return json_response(
            FileList(
                data=data,
                first_id=data[0].id if data else None,
                last_id=data[-1].id if data else None,
                has_more=page.has_more,
            )
        )

    @r.operation(
        Operation(
            "GET",
            "/v1/files/{file_id}",
            "Retrieve a file's metadata",
            _TAG,
            response=FileObject,
            scope=FILES,
            errors=(*_AUTH_ERRORS, 404),
        )
    )
    async def retrieve_file(request: Request) -> Response:
        record = await owned(request)
        return json_response(file_object(record))

    @r.operation(
        Operation(
            "GET",
            "/v1/files/{file_id}/content",
            "Download a file's content (streamed, with its stored media type)",
            _TAG,
            response=FileContent,
            response_content_type="*/*",  # the stored media type: protocol/files/media.py
            scope=FILES,
            errors=(*_AUTH_ERRORS, 404, 500),
        )
    )
    async def download_file(request: Request) -> StreamResponse:
        record = await owned(request)
        try:
            chunks = await store.open_plaintext(record)
            # Up to PREFETCH_BYTES are decrypted before the answer starts: a file that small
            # is checked whole, so tampering is a clean 500, not a cut-off body.
            first = [chunk async for chunk in _take(chunks, PREFETCH_BYTES)]
        except BlobCorrupt as exc:
            log.error("file %s: content refused: %s", record.id, exc)
            raise file_corrupt(record) from None
        return StreamResponse(
            _guarded(record, first, chunks),
            content_type=record.media_type.encode("latin-1"),
            headers=[
                (b"content-length", b"%d" % record.bytes),
                (b"x-content-type-options", b"nosniff"),
                (
                    b"content-disposition",
                    content_disposition(record.filename, record.id).encode("ascii"),
                ),
                (b"cache-control", b"private, no-store"),
            ],
        )

    @r.operation(
        Operation(
            "DELETE",
            "/v1/files/{file_id}",
            "Delete a file (its bytes leave the quota at once)",
            _TAG,
            response=FileDeleted,
            scope=FILES,
            errors=(*_AUTH_ERRORS, 404),
        )
    )
    async def delete_file(request: Request) -> Response:
        assert request.principal is not None
        file_id = request.path_params["file_id"]
        record = await repo.delete(request.principal.org_id, file_id, now=now_us())
        if record is None:
            raise _not_found(file_id)
        try:
            await store.delete_blob(record.blob_key)
        except Exception:  # the data key went with the row: the blob is unreadable already
            log.exception("file %s: blob %s not deleted (unreadable)", record.id, record.blob_key)
        return json_response(FileDeleted(id=record.id))

    return r


def _order(value: str) -> Literal["asc", "desc"]:
    return "asc" if value == "asc" else "desc"


async def _take(chunks: AsyncIterator[bytes], at_least: int) -> AsyncIterator[bytes]:
    """Chunks from `chunks` until `at_least` bytes were taken or it ended."""
    taken = 0
    while taken < at_least:
        chunk = await anext(chunks, None)
        if chunk is None:
            return
        taken += len(chunk)
        yield chunk


async def _guarded(
    record: FileRecord, first: list[bytes], rest: AsyncGenerator[bytes, None]
) -> AsyncIterator[bytes]:
    """The plaintext; a chunk that fails its check later ends the response short (the
    connection is aborted, so the client sees a body shorter than Content-Length, never
    unauthenticated bytes)."""
    for chunk in first:
        yield chunk
    try:
        async with aclosing(rest):
            async for chunk in rest:
                yield chunk
    except BlobCorrupt as exc:
        log.error("file %s: content refused mid-download: %s", record.id, exc)
        raise
