"""Storage: one interface (`Database`), two backends (SQLite, PostgreSQL), a repository per
aggregate. Nothing here imports `gateway`."""

from storage.database import Database, Executor, Row
from storage.errors import NotFound, StorageError, StorageUnavailable, UniqueViolation
from storage.open import Storage, open_database, open_storage

__all__ = [
    "Database",
    "Executor",
    "NotFound",
    "Row",
    "Storage",
    "StorageError",
    "StorageUnavailable",
    "UniqueViolation",
    "open_database",
    "open_storage",
]
