"""The S3-compatible blob store: one object per key in a bucket (AWS S3, SeaweedFS, MinIO, ...),
shared by every gateway instance.

boto3's client is blocking and thread-safe: one client per store, every call in a Trio worker
thread. A writer buffers up to one part (`PART_SIZE`); an object that never fills one is sent
with a single `put_object` at commit, a larger one as a multipart upload whose parts are sent
as they fill, completed at commit and aborted on abort or cancellation. Until completion S3
shows nothing under the key; a crash leaves an incomplete upload, invisible to readers, that
`remove_stale()` aborts. Reads stream `get_object`'s body in chunks of at most `READ_CHUNK`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import boto3
import botocore.config
import botocore.exceptions
import trio

from storage.blobs.interface import READ_CHUNK, BlobReader, BlobStore, BlobWriter, validate_key
from storage.errors import BlobNotFound, BlobStoreUnavailable

PART_SIZE = 8 * 1024 * 1024  # S3's minimum is 5 MiB (but the last); 8 MiB as the AWS CLI
T = TypeVar("T")
_MISSING = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}


@dataclass(frozen=True, repr=False)
class S3Settings:
    bucket: str
    endpoint_url: str | None = None  # None: AWS itself
    region: str | None = None
    access_key_id: str | None = None  # None: boto3's own chain (environment, instance role)
    secret_access_key: str | None = None
    # Prepended to every key: stores sharing one bucket (each test has its own). "" or a valid
    # key followed by "/".
    prefix: str = ""

    def __post_init__(self) -> None:
        if self.prefix:
            validate_key(self.prefix.removesuffix("/"))
            if not self.prefix.endswith("/"):
                raise ValueError("an S3 key prefix ends with '/'")

    def __repr__(self) -> str:
        return (
            f"S3Settings(bucket={self.bucket!r}, endpoint_url={self.endpoint_url!r}, "
            f"region={self.region!r}, prefix={self.prefix!r})"
        )


def _error_code(exc: botocore.exceptions.ClientError) -> str:
    error: dict[str, Any] = exc.response.get("Error", {})
    return str(error.get("Code", ""))


async def _call(fn: Callable[[], T]) -> T:
    """Run a blocking boto3 call in a worker thread; transport failures and server errors
    become `BlobStoreUnavailable` (other client errors propagate to the caller to map)."""
    try:
        return await trio.to_thread.run_sync(fn)
    except botocore.exceptions.ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if isinstance(status, int) and status >= 500:
            raise BlobStoreUnavailable(f"object store failed: {_error_code(exc)}") from exc
        raise
    except (botocore.exceptions.BotoCoreError, OSError) as exc:
        raise BlobStoreUnavailable(f"object store unreachable: {type(exc).__name__}") from exc


class S3BlobStore(BlobStore):
    def __init__(self, settings: S3Settings, client: Any) -> None:
        self.settings = settings
        self.bucket = settings.bucket
        self._prefix = settings.prefix
        self._client = client

    def _object(self, key: str) -> str:
        return self._prefix + validate_key(key)

    @classmethod
    async def open(cls, settings: S3Settings) -> S3BlobStore:
        """A store on `settings.bucket`, created if missing (docs/files.md)."""

        def make_client() -> Any:
            session = boto3.session.Session(
                aws_access_key_id=settings.access_key_id,
                aws_secret_access_key=settings.secret_access_key,
                region_name=settings.region,
            )
            config = botocore.config.Config(
                max_pool_connections=32,
                retries={"mode": "standard", "max_attempts": 3},
                connect_timeout=5,
                read_timeout=60,
                # Custom endpoints (SeaweedFS, MinIO) are addressed by path, not subdomain.
                s3={"addressing_style": "path" if settings.endpoint_url else "auto"},
            )
            return session.client("s3", endpoint_url=settings.endpoint_url, config=config)

        client = await trio.to_thread.run_sync(make_client)
        store = cls(settings, client)
        await store._ensure_bucket()
        return store

    async def _ensure_bucket(self) -> None:
        try:
            await _call(lambda: self._client.head_bucket(Bucket=self.bucket))
            return
        except botocore.exceptions.ClientError as exc:
            if _error_code(exc) not in _MISSING:
                raise BlobStoreUnavailable(f"bucket {self.bucket}: {_error_code(exc)}") from exc
        args: dict[str, Any] = {"Bucket": self.bucket}
        region = self.settings.region
        if region and region != "us-east-1":
            args["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            await _call(lambda: self._client.create_bucket(**args))
        except botocore.exceptions.ClientError as exc:
            if _error_code(exc) not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                raise BlobStoreUnavailable(f"bucket {self.bucket}: {_error_code(exc)}") from exc

    def describe(self) -> str:
        where = self.settings.endpoint_url or "AWS S3"
        return f"S3 bucket {self.bucket} at {where}"

    async def aclose(self) -> None:
        await trio.to_thread.run_sync(self._client.close)

    async def open_writer(self, key: str) -> BlobWriter:
        return _S3Writer(key, self._object(key), self._client, self.bucket)

    async def read(self, key: str) -> BlobReader:
        name = self._object(key)
        try:
            response = await _call(lambda: self._client.get_object(Bucket=self.bucket, Key=name))
        except botocore.exceptions.ClientError as exc:
            if _error_code(exc) in _MISSING:
                raise BlobNotFound(key) from None
            raise
        return _S3Reader(key, int(response["ContentLength"]), response["Body"])

    async def size(self, key: str) -> int:
        name = self._object(key)
        try:
            head = await _call(lambda: self._client.head_object(Bucket=self.bucket, Key=name))
        except botocore.exceptions.ClientError as exc:
            if _error_code(exc) in _MISSING:
                raise BlobNotFound(key) from None
            raise
        return int(head["ContentLength"])

    async def delete(self, key: str) -> None:
        name = self._object(key)
        await _call(lambda: self._client.delete_object(Bucket=self.bucket, Key=name))

    async def remove_stale(self, older_than_s: float) -> int:
        cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=older_than_s)

        def sweep() -> int:
            removed = 0
            paginator = self._client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self._prefix):
                for upload in page.get("Uploads", []):
                    if upload["Initiated"] < cutoff:
                        self._client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
                        removed += 1
            return removed

        return await _call(sweep)

    async def remove_unfinished(self, keys: Sequence[str], *, started_before: float) -> int:
        """Abort the multipart uploads to `keys` begun before `started_before`."""
        cutoff = datetime.datetime.fromtimestamp(started_before, datetime.UTC)
        names = [self._object(key) for key in keys]

        def sweep() -> int:
            removed = 0
            for name in names:
                listing = self._client.list_multipart_uploads(Bucket=self.bucket, Prefix=name)
                for upload in listing.get("Uploads", []):
                    if upload["Key"] == name and upload["Initiated"] < cutoff:
                        self._client.abort_multipart_upload(
                            Bucket=self.bucket, Key=name, UploadId=upload["UploadId"]
                        )
                        removed += 1
            return removed

        return await _call(sweep)


class _S3Writer(BlobWriter):
    def __init__(self, key: str, name: str, client: Any, bucket: str) -> None:
        super().__init__(key)
        self._name = name  # the object's name in the bucket: the store's prefix + key
        self._client = client
        self._bucket = bucket
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []

    async def _write(self, chunk: bytes) -> None:
        self._buffer += chunk
        while len(self._buffer) >= PART_SIZE:
            part = bytes(self._buffer[:PART_SIZE])
            del self._buffer[:PART_SIZE]
            await self._send_part(part)

    async def _send_part(self, part: bytes) -> None:
        if self._upload_id is None:
            created = await _call(
                lambda: self._client.create_multipart_upload(Bucket=self._bucket, Key=self._name)
            )
            self._upload_id = str(created["UploadId"])
        upload_id = self._upload_id
        number = len(self._parts) + 1
        sent = await _call(
            lambda: self._client.upload_part(
                Bucket=self._bucket,
                Key=self._name,
                UploadId=upload_id,
                PartNumber=number,
                Body=part,
            )
        )
        self._parts.append({"PartNumber": number, "ETag": sent["ETag"]})

    async def _commit(self) -> None:
        if self._upload_id is None:
            body = bytes(self._buffer)
            self._buffer = bytearray()
            await _call(
                lambda: self._client.put_object(Bucket=self._bucket, Key=self._name, Body=body)
            )
            return
        if self._buffer:
            part = bytes(self._buffer)
            self._buffer = bytearray()
            await self._send_part(part)
        upload_id, parts = self._upload_id, self._parts
        await _call(
            lambda: self._client.complete_multipart_upload(
                Bucket=self._bucket,
                Key=self._name,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        )
        self._upload_id = None

    async def _abort(self) -> None:
        self._buffer = bytearray()
        upload_id, self._upload_id = self._upload_id, None
        if upload_id is None:
            return
        try:
            await _call(
                lambda: self._client.abort_multipart_upload(
                    Bucket=self._bucket, Key=self._name, UploadId=upload_id
                )
            )
        except (BlobStoreUnavailable, botocore.exceptions.ClientError):
            pass  # invisible to readers; remove_stale() aborts it later


class _S3Reader(BlobReader):
    def __init__(self, key: str, size: int, body: Any) -> None:
        super().__init__(key, size)
        self._body: Any = body

    async def _next(self) -> bytes:
        body = self._body
        if body is None:
            return b""
        chunk: bytes = await _call(lambda: body.read(READ_CHUNK))
        return chunk

    async def aclose(self) -> None:
        body, self._body = self._body, None
        if body is not None:
            body.close()
