"""The Files API wire types (docs/files.md): the file object, its list page and the
deletion result. The upload itself is multipart, parsed by the route (gateway/files/)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

Purpose = Literal["fine-tune", "batch", "assistants", "vision", "user_data"]


class FileUpload(msgspec.Struct, kw_only=True):
    """The multipart form of `POST /v1/files`, for /openapi.json only: the route parses the
    form as a stream (gateway/files/routes.py), never through this type."""

    purpose: Purpose
    file: Annotated[
        str,
        msgspec.Meta(
            extra_json_schema={"format": "binary"},
            description="the content: 512 MB at most, 20 MB for vision",
        ),
    ]


# The download's body, for /openapi.json: the file's raw bytes under its stored media type.
FileContent = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={"format": "binary"},
        description="the file's bytes, served as the media type stored with it: the validated"
        " type (image/png, image/jpeg, image/webp, application/jsonl), else the filename"
        " extension's (the standard table; HTML, SVG, XML and JavaScript types excepted), else"
        " application/octet-stream",
    ),
]


class FileObject(msgspec.Struct, kw_only=True):
    """Exactly the API's fields. `status` is always `processed`: an upload is validated and stored
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
