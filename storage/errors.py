"""The storage layer's exceptions. Backends map their driver errors to these at one boundary
each (storage/postgres, storage/sqlite, storage/blobs); the gateway's boundary
(gateway/web/errors.py `to_api_error`) answers `StorageUnavailable` as 503, and the rest are
answers a caller turns into its own error:

    Exception
     ├── StorageError
     │    ├── UniqueViolation          an insert/update hit a unique constraint
     │    ├── NotFound                 the row addressed does not exist (or is not the caller's)
     │    │    └── BlobNotFound        no committed blob under the key
     │    ├── StorageUnavailable       the database could not be reached or failed
     │    │    └── BlobStoreUnavailable  the blob store could not be reached or failed (disk
     │    │                              error, object store down)
     │    └── QuotaExceeded            a file reservation would take the org past its quota
     │                                 (`quota`); nothing was changed
     └── ValueError
          └── InvalidBlobKey           a blob key outside the allowed form (storage/blobs
                                       `validate_key`): a bug in the caller, never client input
"""

from __future__ import annotations


class StorageError(Exception):
    pass


class UniqueViolation(StorageError):
    pass


class NotFound(StorageError):
    pass


class StorageUnavailable(StorageError):
    pass


class BlobNotFound(NotFound):
    """No committed object under the key."""


class BlobStoreUnavailable(StorageUnavailable):
    """The store could not be reached or failed (disk error, object store down)."""


class QuotaExceeded(StorageError):
    """The reservation would take the org past its quota; nothing was changed."""

    def __init__(self, quota: int) -> None:
        super().__init__(f"file storage quota of {quota} bytes reached")
        self.quota = quota


class InvalidBlobKey(ValueError):
    """A key outside the allowed form; a bug in the caller, never a client's input."""
