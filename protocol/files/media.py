"""The media type stored with a file and served as the download's `Content-Type`.

The client's own `Content-Type` for the part is never used: a file stored as `text/html` or
`image/svg+xml` because its uploader said so would be served as such from our origin. The type
comes from what validation proved (`image/png`, `application/jsonl`, …), else from the
filename's extension via `mimetypes` (the standard table, not the host's /etc/mime.types, so
every instance answers the same), else `application/octet-stream`. Types a browser would
render as active content from an extension alone are served as `application/octet-stream`
(the download should also carry `X-Content-Type-Options: nosniff`).
"""

from __future__ import annotations

import mimetypes

FALLBACK = "application/octet-stream"

_TABLE = mimetypes.MimeTypes(filenames=())
_TABLE.add_type("application/jsonl", ".jsonl")
_TABLE.add_type("application/jsonl", ".ndjson")
_TABLE.add_type("text/markdown", ".md")

# Served from our origin these could run script in the reader's browser.
_ACTIVE = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "image/svg+xml",
        "text/xml",
        "application/xml",
        "text/javascript",
        "application/javascript",
        "application/x-javascript",
    }
)


def media_type(validated: str | None, filename: str) -> str:
    """`validated` (from the validator's `finish()`) wins; else the extension's; else fallback."""
    if validated:
        return validated
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    dot = name.rfind(".")
    if dot < 0:
        return FALLBACK
    # Only the extension is looked at: `guess_type` would also read `data:` URLs.
    guessed, encoding = _TABLE.guess_type("file" + name[dot:].lower(), strict=False)
    if guessed is None or encoding is not None or guessed in _ACTIVE:
        return FALLBACK
    return guessed
