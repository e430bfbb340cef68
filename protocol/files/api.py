"""The Files API wire types (SPEC "File", "Files"): the file object, its list page and the
deletion result. The upload itself is multipart, parsed by the route (gateway/files/)."""

from __future__ import annotations

from typing import Literal

import msgspec


class FileObject(msgspec.Struct, kw_only=True):
    """Exactly SPEC's fields. `status` is always `processed`: an upload is validated and stored
    before it is answered (docs/decisions.md, "Files")."""

    id: str
    object: Literal["file"] = "file"
    bytes: int
    filename: str
    purpose: str
    created_at: int  # Unix seconds
    status: str
    status_details: None = None


class FileList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True
