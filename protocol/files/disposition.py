"""The `Content-Disposition` of a file download (RFC 6266), from the stored filename. No I/O.

A stored filename is the client's label, kept as given (gateway/files/routes.py); it may hold
a path (`../../etc/passwd`, `C:\\Users\\x\\a.txt`), quotes, backslashes, non-ASCII text, and
in rows stored before uploads refused them, control characters. What is sent is:

- the *base name*: the part after the last `/` or `\\`, so no client saves a download outside
  its chosen directory; a name with nothing left (`dir/`, `..`) falls back to the file's id;
- without control, format (bidirectional overrides such as U+202E, which make `exe.txt` of
  `txt.exe`) or line/paragraph separator characters;
- `filename="…"`: that name in printable ASCII, every other character (and `"`, `\\`, `%`,
  which some clients unescape) as `_`;
- `filename*=UTF-8''…` (RFC 8187) with the exact name percent-encoded, only when it differs
  from the ASCII one. The header is printable ASCII whatever the name.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import quote

_DROPPED = frozenset({"Cc", "Cf", "Zl", "Zp"})
_UNQUOTABLE = frozenset('"\\%')


def base_name(filename: str, fallback: str) -> str:
    """The name a download is saved as: the last path segment, without invisible or control
    characters, or `fallback` when nothing usable is left."""
    last = filename.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in last if unicodedata.category(c) not in _DROPPED).strip()
    return fallback if name in ("", ".", "..") else name


def content_disposition(filename: str, fallback: str) -> str:
    """`attachment` with the base name of `filename` (`fallback` when it has none)."""
    name = base_name(filename, fallback)
    ascii_name = "".join(c if " " <= c <= "~" and c not in _UNQUOTABLE else "_" for c in name)
    header = f'attachment; filename="{ascii_name}"'
    if ascii_name != name:
        header += f"; filename*=UTF-8''{quote(name, safe='')}"
    return header
