"""Storage exceptions. Backends map their driver errors to these at one boundary each.

StorageError
 ├── UniqueViolation      an insert/update hit a unique constraint
 ├── NotFound             the row addressed does not exist (or is not the caller's)
 └── StorageUnavailable   the database could not be reached or failed
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
